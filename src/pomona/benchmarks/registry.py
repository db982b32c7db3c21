"""Benchmark names, as `pomona run --benchmark NAME` takes them, to task lists.

    swe-local                  the SWE task set shipped with Pomona (offline)
    swebench:DATASET           any SWE-bench-format dataset: a task repo, .parquet / .jsonl rows,
                               a saved or hub dataset (verified, lite, multilingual, swe-gym...)
    terminal-bench-local       the Terminal-Bench tasks shipped with Pomona (offline)
    terminal-bench:PATH        a directory of harbor task directories
    files, text                the built-in smoke sets

SWE-bench tasks grade into official log directories, so they need to know where (`logs`), under
which run id and model name: those are the keyword arguments. Datasets given by name or path are
labelled with the dataset's own name (or a short hash of the path), so two never share a row of
the leaderboard.
"""

from __future__ import annotations

from pathlib import Path

from pomona.benchmarks import builtin, swe_datasets, swe_tasks, swebench, terminal_bench
from pomona.benchmarks.task import Task

LOCAL = ("swe-local", "terminal-bench-local", *builtin.TASK_SETS)


def load(name: str, *, logs: str | Path = "pomona-runs/swebench", run_id: str = "pomona",
         model: str = "pomona") -> list[Task]:
    kind, _, path = name.partition(":")
    swe = {"root": str(logs), "run_id": run_id, "model": model}
    if name == "swe-local":
        return list(swebench.tasks(swe_tasks.DATA, "swe-local", **swe))
    if kind == "swebench" and path:
        data = swe_datasets.load(path)
        return [swebench.to_task(i, f"swebench:{data.label}", **swe) for i in data.instances]
    if name == "terminal-bench-local":
        return list(terminal_bench.tasks(terminal_bench.DATA, "terminal-bench-local"))
    if kind == "terminal-bench" and path:
        return list(terminal_bench.tasks(path, f"terminal-bench:{swe_datasets.label_of(path)}"))
    if name in builtin.TASK_SETS:
        return builtin.tasks(name)
    raise KeyError(f"unknown benchmark {name!r}: choose {', '.join(LOCAL)}, swebench:DATASET "
                   "or terminal-bench:PATH")
