"""Benchmark metrics as pure functions over `episodes` rows.

An episode whose `failure_kind` is not `none` produced no trustworthy reward (sandbox lost,
verifier broken, proxy down...): it is left out of every rate and counted apart by kind, so an
outage never reads as a weak model. Rates are macro means over tasks (reference §7):

    resolve rate  mean over tasks of c/n (= pass@1), c resolved trials of n that ran
    mean reward   mean over tasks of the mean reward of its trials
    pass@k        1 - C(n-c, k) / C(n, k)   (Chen et al. 2021; 1 when n - c < k)
    pass^k        C(c, k) / C(n, k)         (all k of k sampled trials pass)

pass@k and pass^k are reported only when every task has at least k trials that ran. Episodes
made on an attempt's behalf (a judge, a simulated user: their metadata names a `role`) are not
attempts and count nowhere. An attempt played again by `pomona run --resume` counts once.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from math import comb
from typing import Any

from pomona.benchmarks.resume import current
from pomona.errors import UsageError

Key = tuple[str, str, str]  # (benchmark, harness, model)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Probability that at least one of k trials drawn from n (c passing) passes."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise UsageError(f"pass@k needs 0 <= c <= n and 1 <= k <= n (n={n}, c={c}, k={k})")
    return 1.0 if n - c < k else 1.0 - comb(n - c, k) / comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """Probability that all k trials drawn from n (c passing) pass."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise UsageError(f"pass^k needs 0 <= c <= n and 1 <= k <= n (n={n}, c={c}, k={k})")
    return comb(c, k) / comb(n, k)


@dataclass
class Summary:
    benchmark: str
    harness: str
    model: str
    tasks: int  # tasks with at least one trial that ran
    trials: int  # trials that ran
    resolved: int
    resolve_rate: float | None
    mean_reward: float | None
    pass_at: dict[int, float] = field(default_factory=dict)
    pass_hat: dict[int, float] = field(default_factory=dict)
    failures: dict[str, int] = field(default_factory=dict)  # infra failures by kind, excluded

    @property
    def key(self) -> Key:
        return (self.benchmark, self.harness, self.model)

    @property
    def infra_failures(self) -> int:
        return sum(self.failures.values())


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def summarize_group(
    key: Key, rows: Iterable[Mapping[str, Any]], ks: Iterable[int] = (1,)
) -> Summary:
    """Metrics of one (benchmark, harness, model) from its episodes."""
    per_task: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    failures: Counter[str] = Counter()
    for row in rows:
        kind = row.get("failure_kind") or "none"
        if kind != "none" or row.get("reward") is None:
            failures[kind if kind != "none" else "unscored"] += 1
        else:
            per_task[row["task"]].append(row)
    counts = {t: (len(rs), sum(bool(r.get("resolved")) for r in rs)) for t, rs in per_task.items()}
    least = min((n for n, _ in counts.values()), default=0)
    wanted = sorted({k for k in ks if 1 <= k <= least})
    return Summary(
        *key,
        tasks=len(per_task),
        trials=sum(n for n, _ in counts.values()),
        resolved=sum(c for _, c in counts.values()),
        resolve_rate=_mean([c / n for n, c in counts.values()]),
        mean_reward=_mean(
            [sum(float(r["reward"]) for r in rs) / len(rs) for rs in per_task.values()]
        ),
        pass_at={k: _mean([pass_at_k(n, c, k) for n, c in counts.values()]) or 0.0 for k in wanted},
        pass_hat={
            k: _mean([pass_hat_k(n, c, k) for n, c in counts.values()]) or 0.0 for k in wanted
        },
        failures=dict(failures),
    )


def role(row: Mapping[str, Any]) -> str | None:
    """What a model did on an attempt's behalf in this episode ("judge", "simulated-user"), or
    None for an attempt itself. From a `role` column where a reader derived one, else from the
    metadata (as stored, a JSON text, or a mapping)."""
    if row.get("role"):
        return str(row["role"])
    metadata = row.get("metadata") or {}
    if isinstance(metadata, str):
        try:
            metadata = json.loads(metadata)
        except ValueError:
            return None
    value = metadata.get("role") if isinstance(metadata, Mapping) else None
    return str(value) if value else None


def is_attempt(row: Mapping[str, Any]) -> bool:
    return role(row) is None


def summarize(rows: Iterable[Mapping[str, Any]], ks: Iterable[int] = (1,)) -> list[Summary]:
    """One Summary per (benchmark, harness, model), in key order. An attempt a resumed run
    played again counts once: its model result, else its latest failure."""
    groups: dict[Key, list[Mapping[str, Any]]] = defaultdict(list)
    for row in filter(is_attempt, current(rows)):
        groups[
            (row.get("benchmark") or "?", row.get("harness") or "?", row.get("model") or "?")
        ].append(row)
    ks = tuple(ks)
    return [summarize_group(key, groups[key], ks) for key in sorted(groups)]
