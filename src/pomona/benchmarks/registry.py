"""Benchmark names, as `pomona run --benchmark NAME` takes them, to task lists.

    swe-local                  the SWE task set shipped with Pomona (offline)
    swebench:PATH              a 5.x task repo, or official .parquet / .jsonl rows
    terminal-bench-local       the Terminal-Bench tasks shipped with Pomona (offline)
    terminal-bench:PATH        a directory of harbor task directories
    files, text                the built-in smoke sets

SWE-bench tasks grade into official log directories, so they need to know where (`logs`), under
which run id and model name: those are the keyword arguments.
"""

from __future__ import annotations

from pathlib import Path

from pomona.benchmarks import builtin, swe_tasks, swebench, terminal_bench
from pomona.benchmarks.task import Task

LOCAL = ("swe-local", "terminal-bench-local", *builtin.TASK_SETS)


def load(name: str, *, logs: str | Path = "pomona-runs/swebench", run_id: str = "pomona",
         model: str = "pomona") -> list[Task]:
    kind, _, path = name.partition(":")
    swe = {"root": str(logs), "run_id": run_id, "model": model}
    if name == "swe-local":
        return list(swebench.tasks(swe_tasks.DATA, "swe-local", **swe))
    if kind == "swebench" and path:
        return list(swebench.tasks(path, "swebench", **swe))
    if name == "terminal-bench-local":
        return list(terminal_bench.tasks(terminal_bench.DATA, "terminal-bench-local"))
    if kind == "terminal-bench" and path:
        return list(terminal_bench.tasks(path, "terminal-bench"))
    if name in builtin.TASK_SETS:
        return builtin.tasks(name)
    raise KeyError(f"unknown benchmark {name!r}: choose {', '.join(LOCAL)}, swebench:PATH "
                   "or terminal-bench:PATH")
