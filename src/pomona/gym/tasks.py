"""Which task an environment's `reset` plays: the one its options name, else a seeded draw."""

from __future__ import annotations

import numpy as np

from pomona.benchmarks import builtin
from pomona.benchmarks.task import Task


def pick_task(tasks: list[Task], option: Task | str | None, rng: np.random.Generator) -> Task:
    """The task `option` names (a Task, or an id in `tasks` or the built-in sets), else a draw."""
    if isinstance(option, Task):
        return option
    if isinstance(option, str):
        return next((t for t in tasks if t.id == option), None) or builtin.get(option)
    return tasks[int(rng.integers(len(tasks)))]
