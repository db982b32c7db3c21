"""Balanced Adaptive Rollout: sample a task in strides until a group of N with a balanced share
of positive attempts can be chosen, as Orchard's trainer does (reference/orchard.md §6.3).

    bar = BalancedRollout(BarConfig(n=4, max_samples=8, stride=8))
    while (k := bar.need()):
        bar.add(run_k_attempts(k))           # any rollout; each attempt -> Attempt(id, reward, status)
    result = bar.result()                    # .group (N attempts or none), .how, .dropped

- After each stride the attempts split into positives (reward > 0), negatives, and backfill
  (aborted, no reward, out of time), which never counts as either.
- The aim is round(mid * N) positives, mid the middle of the target share [lo, hi]; counts are
  tried outward from the aim (aim, aim-1, aim+1, ...) within [ceil(lo*N), floor(hi*N)]. The first
  count that both pools can supply wins, and each pool gives its best-ranked attempts: by
  status (completed, truncated by context, truncated by time, aborted), then in arrival order.
- Once `max_samples` are in without a balanced group, the bounds relax to [0, 1]; failing that,
  the best-ranked N of everything are taken.
- The group is then dropped (not trained on) if any member is aborted, if its rewards do not
  vary (std < 1e-6), or if no reward is positive.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from pomona.errors import UsageError

COMPLETED, TRUNCATED, TRUNCATED_TIME, ABORTED = (
    "completed",
    "truncated",
    "truncated_time",
    "aborted",
)
_RANK = {COMPLETED: 0, TRUNCATED: 1, TRUNCATED_TIME: 2, ABORTED: 3}


@dataclass(frozen=True)
class Attempt:
    id: Any
    reward: float | None
    status: str = COMPLETED

    @property
    def backfill(self) -> bool:
        return self.reward is None or self.status in (ABORTED, TRUNCATED_TIME)

    @classmethod
    def of_record(cls, record: Any) -> Attempt:
        """An attempt from a rollout's EpisodeRecord: infra failures abort, timeouts run out
        of time, a ModelCallEnv step budget truncates."""
        kind = record.failure_kind
        if kind == "timeout":
            status = TRUNCATED_TIME
        elif kind != "none" or record.reward is None:
            status = ABORTED
        elif "truncat" in (record.failure_message or ""):
            status = TRUNCATED
        else:
            status = COMPLETED
        return cls(record, record.reward, status)


@dataclass(frozen=True)
class BarConfig:
    n: int = 4
    max_samples: int = 8
    stride: int = 8
    positive: tuple[float, float] = (0.25, 0.75)

    def __post_init__(self) -> None:
        lo, hi = self.positive
        if not 0 <= lo <= hi <= 1:
            raise UsageError(
                f"positive share bounds must satisfy 0 <= lo <= hi <= 1, not {self.positive}"
            )
        if not 1 <= self.n <= self.max_samples or self.stride < 1:
            raise UsageError("need 1 <= n <= max_samples and stride >= 1")


@dataclass
class BarResult:
    group: list[Attempt]
    how: str  # balanced | relaxed | top
    dropped: str | None  # why the group is not trained on, if it is not
    attempts: list[Attempt] = field(default_factory=list)  # everything sampled, in order


def _ranked(attempts: list[Attempt]) -> list[Attempt]:
    return sorted(attempts, key=lambda a: _RANK.get(a.status, len(_RANK)))  # stable: arrival order


def _counts(n: int, lo: float, hi: float) -> list[int]:
    """Positive counts to try, outward from the aim, within [ceil(lo*n), floor(hi*n)]."""
    low, high = math.ceil(lo * n - 1e-9), math.floor(hi * n + 1e-9)
    aim = min(max(round((lo + hi) / 2 * n), low), high)
    order = [aim]
    for d in range(1, n + 1):
        order += [c for c in (aim - d, aim + d) if low <= c <= high]
    return order


def choose(attempts: list[Attempt], n: int, lo: float, hi: float) -> list[Attempt] | None:
    """N attempts with a positive count in the allowed range, or None if none can be formed."""
    scored = [a for a in attempts if not a.backfill]
    positives = _ranked([a for a in scored if a.reward is not None and a.reward > 0])
    negatives = _ranked([a for a in scored if a.reward is not None and a.reward <= 0])
    for p in _counts(n, lo, hi):
        if p <= len(positives) and n - p <= len(negatives):
            chosen = {id(a) for a in positives[:p] + negatives[: n - p]}
            return [a for a in attempts if id(a) in chosen]  # in arrival order
    return None


def drop_reason(group: list[Attempt]) -> str | None:
    """Why a chosen group teaches nothing (Orchard's filter), or None."""
    if any(a.status == ABORTED for a in group):
        return "a member was aborted"
    rewards = [a.reward for a in group if a.reward is not None]
    if len(rewards) < len(group) or not rewards:
        return "a member has no reward"
    mean = sum(rewards) / len(rewards)
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / max(len(rewards) - 1, 1))
    if std < 1e-6:
        return "rewards do not vary"
    if not any(r > 0 for r in rewards):
        return "no reward is positive"
    return None


class BalancedRollout:
    """The scheduler for one task: tells how many attempts to run next, then what to keep."""

    def __init__(self, config: BarConfig | None = None):
        self.config = config or BarConfig()
        self.attempts: list[Attempt] = []
        self._result: BarResult | None = None

    def need(self) -> int:
        """How many more attempts to run now (0: done, call result())."""
        if self._result is not None:
            return 0
        c = self.config
        if self.attempts:
            group = choose(self.attempts, c.n, *c.positive)
            if group is not None:
                self._finish(group, "balanced")
                return 0
        if len(self.attempts) >= c.max_samples:
            group = choose(self.attempts, c.n, 0.0, 1.0)
            if group is not None:
                self._finish(group, "relaxed")
            else:
                self._finish(_ranked(self.attempts)[: c.n], "top")
            return 0
        return min(c.stride, c.max_samples - len(self.attempts))

    def add(self, attempts: list[Attempt]) -> None:
        self.attempts += attempts

    def _finish(self, group: list[Attempt], how: str) -> None:
        self._result = BarResult(group, how, drop_reason(group), list(self.attempts))

    def result(self) -> BarResult:
        if self._result is None and self.need():
            raise UsageError("the rollout is not finished: run need() more attempts first")
        assert self._result is not None
        return self._result
