"""Benchmark names, as `pomona run --benchmark NAME` takes them, to task lists.

    swe-local                  the SWE task set shipped with Pomona (offline)
    swe-multilingual-local     its JavaScript counterpart (Node's test runner), like Multilingual
    swebench:DATASET           any SWE-bench-format dataset: a task repo, .parquet / .jsonl rows,
                               a saved or hub dataset (verified, lite, multilingual, swe-gym...)
    terminal-bench-local       the Terminal-Bench tasks shipped with Pomona (offline)
    terminal-bench:PATH        a directory of harbor task directories
    files, text                the built-in smoke sets
    miniwob                    MiniWoB++'s sampled tasks in real Chromium (offline)
    webvoyager-local           the local sites' tasks, WebVoyager's schema (also deepshop-local,
                               mind2web-local); these run with the WebVoyager loop by default
    webvoyager:PATH            a WebVoyager checkout: its 643 tasks on the live web, its judge
    claw-eval-local            Claw-Eval task.yaml tasks shipped with Pomona (mock services, MCP);
    claw-eval:PATH             a directory of Claw-Eval task directories; Claw-Eval's own loop
                               (`claw-eval` harness) by default
    qwenclawbench-local        QwenClawBench task_*.md tasks shipped with Pomona (OpenClaw default)
    qwenclawbench:PATH         a QwenClawBench checkout (tasks/ and assets/)

SWE-bench tasks grade into official log directories, so they need to know where (`logs`), under
which run id and model name: those are the keyword arguments. Datasets given by name or path are
labelled with the dataset's own name (or a short hash of the path), so two never share a row of
the leaderboard.
"""

from __future__ import annotations

from pathlib import Path

from pomona.benchmarks import builtin, swebench, terminal_bench
from pomona.benchmarks.swebench import datasets as swe_datasets
from pomona.benchmarks.swebench import task_sets as swe_tasks
from pomona.benchmarks.task import Task

BROWSER = ("miniwob", "webvoyager-local", "deepshop-local", "mind2web-local")

CLAW = {"claw-eval": "claw-eval", "qwenclawbench": "openclaw"}  # task format -> natural harness

LOCAL = (
    "swe-local",
    "swe-multilingual-local",
    "terminal-bench-local",
    *builtin.TASK_SETS,
    *BROWSER,
    *(f"{c}-local" for c in CLAW),
)


def is_browser(name: str) -> bool:
    return name in BROWSER or name.partition(":")[0] == "webvoyager"


def natural_harness(name: str) -> str:
    """The harness a benchmark runs with when none is named."""
    claw = name.removesuffix("-local").partition(":")[0]
    return "webvoyager" if is_browser(name) else CLAW.get(claw, "pi")


def load(
    name: str,
    *,
    logs: str | Path = "pomona-runs/swebench",
    run_id: str = "pomona",
    model: str = "pomona",
) -> list[Task]:
    kind, _, path = name.partition(":")
    swe = {"root": str(logs), "run_id": run_id, "model": model}
    if name in swe_tasks.TASK_SETS:
        return list(swebench.tasks(swe_tasks.TASK_SETS[name].out, name, **swe))
    if kind == "swebench" and path:
        data = swe_datasets.load(path)
        return [swebench.to_task(i, f"swebench:{data.label}", **swe) for i in data.instances]
    if name == "terminal-bench-local":
        return list(terminal_bench.tasks(terminal_bench.DATA, "terminal-bench-local"))
    if kind == "terminal-bench" and path:
        return list(terminal_bench.tasks(path, f"terminal-bench:{swe_datasets.label_of(path)}"))
    if name in builtin.TASK_SETS:
        return builtin.tasks(name)
    if name in BROWSER:
        from pomona.benchmarks.browser import suite

        return suite.load(name)
    if kind == "webvoyager" and path:
        from pomona.benchmarks.browser import official

        return official.webvoyager_tasks(path)
    claw = name.removesuffix("-local") if name.endswith("-local") else kind
    if claw in CLAW and (name.endswith("-local") or path):
        from pomona.benchmarks.claw import load as load_claw

        return load_claw(claw, path or None)
    raise KeyError(
        f"unknown benchmark {name!r}: choose {', '.join(LOCAL)}, swebench:DATASET "
        "or terminal-bench:PATH"
    )
