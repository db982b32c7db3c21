"""pass@k and pass^k against brute-force enumeration; infra failures excluded and counted."""

from __future__ import annotations

import itertools
import json

import pytest

from pomona.benchmarks import metrics


def brute(n: int, c: int, k: int) -> tuple[float, float]:
    trials = [True] * c + [False] * (n - c)
    draws = list(itertools.combinations(trials, k))
    return (sum(any(d) for d in draws) / len(draws), sum(all(d) for d in draws) / len(draws))


@pytest.mark.parametrize(
    ("n", "c", "k"), [(n, c, k) for n in range(1, 7) for c in range(n + 1) for k in range(1, n + 1)]
)
def test_estimators_match_enumeration(n: int, c: int, k: int) -> None:
    at, hat = brute(n, c, k)
    assert metrics.pass_at_k(n, c, k) == pytest.approx(at)
    assert metrics.pass_hat_k(n, c, k) == pytest.approx(hat)


def test_estimators_reject_impossible_counts() -> None:
    for args in ((3, 4, 1), (3, 1, 4), (3, 1, 0)):
        with pytest.raises(ValueError):
            metrics.pass_at_k(*args)
        with pytest.raises(ValueError):
            metrics.pass_hat_k(*args)


def row(
    task: str,
    resolved: bool | None,
    kind: str = "none",
    harness: str = "pi",
    reward: float | None = None,
) -> dict:
    reward = (1.0 if resolved else 0.0) if reward is None and kind == "none" else reward
    return {
        "benchmark": "b",
        "harness": harness,
        "model": "m",
        "task": task,
        "reward": reward,
        "resolved": resolved,
        "failure_kind": kind,
    }


def test_summary_is_a_macro_mean_with_infra_failures_apart() -> None:
    rows = [
        row("t1", True),
        row("t1", True),
        row("t1", False),
        row("t2", False),
        row("t2", False),
        row("t2", True),
        row("t1", None, "verifier"),
        row("t2", None, "sandbox"),
        row("t3", None, "verifier"),
        row("t1", True, harness="codex"),
    ]
    pi, codex = sorted(metrics.summarize(rows, ks=(1, 2, 3, 4)), key=lambda s: s.harness)[::-1]
    assert (pi.tasks, pi.trials, pi.resolved) == (2, 6, 3)
    assert pi.resolve_rate == pytest.approx((2 / 3 + 1 / 3) / 2)
    assert pi.mean_reward == pytest.approx(0.5)
    assert pi.failures == {"verifier": 2, "sandbox": 1} and pi.infra_failures == 3
    assert pi.pass_at[1] == pytest.approx(pi.resolve_rate)
    assert pi.pass_at[3] == 1.0 and pi.pass_hat[3] == 0.0
    assert 4 not in pi.pass_at  # a task has only 3 trials that ran
    assert (codex.harness, codex.trials, codex.resolve_rate) == ("codex", 1, 1.0)


def test_all_infra_failures_give_no_rate_rather_than_zero() -> None:
    (s,) = metrics.summarize([row("t1", None, "verifier"), row("t2", None, "timeout")])
    assert s.resolve_rate is None and s.mean_reward is None and s.trials == 0
    assert s.failures == {"verifier": 1, "timeout": 1}


def test_partial_rewards_average_per_task() -> None:
    (s,) = metrics.summarize(
        [row("t1", False, reward=0.5), row("t1", True, reward=1.0), row("t2", False, reward=0.0)]
    )
    assert s.mean_reward == pytest.approx((0.75 + 0.0) / 2)


def test_a_judge_or_simulated_user_episode_is_not_an_attempt() -> None:
    """As the store holds them: metadata as JSON text, no reward, the run's model column."""
    judge = {**row("t1", None), "reward": None, "metadata": json.dumps({"role": "judge"})}
    user = {**row("t1", None), "reward": None, "metadata": {"role": "simulated-user"}}
    (s,) = metrics.summarize([{**row("t1", True), "metadata": "{}"}, judge, user])
    assert (s.trials, s.resolved, s.failures) == (1, 1, {})
    assert metrics.summarize([judge, user]) == []
