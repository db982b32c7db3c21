"""Rollouts for RL: attempts grouped by task with group-normalised advantages (zero-variance
groups dropped, pomona.trainer.advantages), and Balanced Adaptive Rollout, which samples each
task in strides until a balanced group forms (pomona.trainer.bar). Both play their attempts
through the episode engine's `rollout`."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from pomona.benchmarks.task import Task
from pomona.episodes.rollouts import ModelChoice, rollout, tasks_of
from pomona.trainer.advantages import groups
from pomona.trainer.bar import Attempt, BalancedRollout


async def group_rollout(
    tasks: Sequence[Task | str],
    harness: str,
    model: ModelChoice | None = None,
    n: int = 4,
    *,
    scale: bool = True,
    keep_dropped: bool = False,
    **kwargs: Any,
) -> list[Any]:
    """`n` attempts per task grouped by task, each group with its members' group-normalised
    advantages (pomona.trainer.advantages.Group). Groups whose rewards do not vary are dropped
    unless `keep_dropped`; attempts with an infra failure are never members."""
    records = await rollout(tasks, harness, model, n=n, **kwargs)
    found = groups(records, key="task", scale=scale)
    return found if keep_dropped else [g for g in found if not g.dropped]


async def balanced_rollout(
    tasks: Sequence[Task | str],
    harness: str,
    model: ModelChoice | None = None,
    *,
    config: Any = None,
    **kwargs: Any,
) -> dict[str, Any]:
    """Balanced Adaptive Rollout over each task (pomona.trainer.bar): attempts run in strides
    until a group with a balanced share of positives can be chosen. Returns {task id: BarResult}
    whose attempts hold the EpisodeRecords."""

    async def one(task: Task) -> Any:
        bar = BalancedRollout(config)
        while k := bar.need():
            records = await rollout([task], harness, model, n=k, **{"progress": False, **kwargs})
            bar.add([Attempt.of_record(r) for r in records])
        return bar.result()

    chosen = tasks_of(tasks)
    results = await asyncio.gather(*(one(t) for t in chosen))
    return {t.id: r for t, r in zip(chosen, results, strict=True)}
