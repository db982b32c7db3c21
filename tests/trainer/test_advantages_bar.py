"""Group advantages and Balanced Adaptive Rollout against cases worked out by hand."""

from __future__ import annotations

import math

import pytest

from pomona.trainer.advantages import groups, kept, normalise
from pomona.trainer.bar import (
    ABORTED,
    COMPLETED,
    TRUNCATED,
    TRUNCATED_TIME,
    Attempt,
    BalancedRollout,
    BarConfig,
    choose,
)


def test_group_normalised_advantages_by_hand():
    # [1, 0, 0, 1]: mean 0.5, sample std sqrt(4 * 0.25 / 3) = 0.57735
    a = normalise([1.0, 0.0, 0.0, 1.0], eps=0.0)
    assert a == pytest.approx([0.866025, -0.866025, -0.866025, 0.866025], abs=1e-6)
    assert normalise([1.0, 0.0, 0.0, 1.0], scale=False) == [0.5, -0.5, -0.5, 0.5]
    # [2, 1, 0]: mean 1, std 1
    assert normalise([2.0, 1.0, 0.0], eps=0.0) == pytest.approx([1.0, 0.0, -1.0])
    assert normalise([1.0, 1.0, 1.0]) is None  # no variance: no signal
    assert normalise([0.3]) is None  # one attempt is no group


def test_groups_drop_zero_variance_and_leave_out_infra_failures():
    attempts = [
        {"task": "a", "reward": 1.0}, {"task": "a", "reward": 0.0},
        {"task": "b", "reward": 1.0}, {"task": "b", "reward": 1.0},
        {"task": "a", "reward": None},  # an infra failure: not a member, not a 0
        {"task": "c", "reward": 0.0}, {"task": "c", "reward": float("nan")},
    ]  # fmt: skip
    found = {g.key: g for g in groups(attempts)}
    assert found["a"].rewards == [1.0, 0.0] and len(found["a"].excluded) == 1
    # [1, 0]: mean 0.5, sample std sqrt(0.5), so +-0.5 / sqrt(0.5) = +-0.70711
    assert found["a"].advantages == pytest.approx([math.sqrt(0.5), -math.sqrt(0.5)], rel=1e-5)
    assert found["b"].dropped and found["c"].dropped
    assert [g.key for g in kept(found.values())] == ["a"]
    assert found["a"].advantage_of(attempts[1]) == pytest.approx(-0.70711, rel=1e-4)


def run(rewards, statuses=None):
    statuses = statuses or [COMPLETED] * len(rewards)
    return [Attempt(f"x{i}", r, s) for i, (r, s) in enumerate(zip(rewards, statuses, strict=True))]


def drive(config, strides):
    bar, asked = BalancedRollout(config), []
    it = iter(strides)
    while k := bar.need():
        asked.append(k)
        bar.add(next(it)[:k])
    return bar.result(), asked


def test_bar_strides_until_balanced():
    config = BarConfig(n=4, max_samples=8, stride=4)
    first = run([1, 1, 1, 1])
    second = [Attempt(f"y{i}", r) for i, r in enumerate([0, 1, 0, 1])]
    result, asked = drive(config, [first, second])
    assert asked == [4, 4]  # all positive after one stride: no negatives to balance with
    assert result.how == "balanced" and result.dropped is None
    # aim round(0.5 * 4) = 2 positives: the first two positives, then the negatives, in order
    assert [a.id for a in result.group] == ["x0", "x1", "y0", "y2"]


def test_bar_stops_after_the_first_stride_that_balances():
    result, asked = drive(BarConfig(n=4, max_samples=8, stride=8), [run([0, 1, 0, 0, 0, 1, 1, 0])])
    assert asked == [8] and result.how == "balanced"
    assert sorted(a.reward for a in result.group) == [0, 0, 1, 1]


def test_bar_counts_outward_from_the_aim():
    # only 1 positive among 8: 2 is impossible, 1 is the next count tried (within [1, 3])
    group = choose(run([0, 0, 1, 0, 0, 0, 0, 0]), 4, 0.25, 0.75)
    assert [a.reward for a in group] == [0, 0, 1, 0]
    # only 1 negative: 2 impossible, 1 impossible (needs 3 negatives), 3 positives + 1 negative
    group = choose(run([1, 1, 1, 0, 1, 1]), 4, 0.25, 0.75)
    assert sorted(a.reward for a in group) == [0, 1, 1, 1]


def test_bar_ranks_by_status_and_sets_backfill_aside():
    attempts = run(
        [1, 1, 1, 0, 0, None, 1],
        [TRUNCATED, COMPLETED, COMPLETED, COMPLETED, COMPLETED, ABORTED, TRUNCATED_TIME],
    )
    group = choose(attempts, 4, 0.25, 0.75)
    # the two completed positives beat the truncated one; the aborted and timed-out are backfill
    assert [a.id for a in group] == ["x1", "x2", "x3", "x4"]


def test_bar_relaxes_then_takes_the_top():
    # all negative: no balanced group; relaxed to [0, 1] it is 4 negatives, which teach nothing
    result, _ = drive(BarConfig(n=4, max_samples=8, stride=8), [run([0] * 8)])
    assert (result.how, result.dropped) == ("relaxed", "rewards do not vary")
    # too few scored attempts for any count: the best-ranked 4 of everything
    attempts = run(
        [1, None, None, None, 0, None, None, None],
        [COMPLETED, *[ABORTED] * 3, COMPLETED, *[ABORTED] * 3],
    )
    result, _ = drive(BarConfig(n=4, max_samples=8, stride=8), [attempts])
    assert result.how == "top" and [a.id for a in result.group] == ["x0", "x4", "x1", "x2"]
    assert result.dropped == "a member was aborted"
    # balanced but no positive reward (negative rewards only, as Orchard's -1 scheme gives)
    assert (
        drive(BarConfig(n=2, max_samples=2, stride=2), [run([-1, -0.5])])[0].dropped
        == "no reward is positive"
    )


def test_bar_config_is_checked():
    with pytest.raises(ValueError, match="lo <= hi"):
        BarConfig(positive=(0.8, 0.2))
    with pytest.raises(ValueError, match="n <= max_samples"):
        BarConfig(n=9, max_samples=8)
