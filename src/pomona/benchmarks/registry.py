"""Benchmarks as `pomona run --benchmark NAME` takes them: one Benchmark record each.

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
    claw-eval:PATH             a Claw-Eval checkout (tasks/, mock_services/, src/): its own services,
                               graders, judge and loop (`claw-eval` harness, the default)
    claw-eval-local            Pomona's small set in its layout (the framework: POMONA_CLAW_EVAL)
    qwenclawbench:PATH         a QwenClawBench checkout (data/<dataset>/, scripts/); OpenClaw default
    qwenclawbench-local        Pomona's small set in its layout (the engine: POMONA_QWENCLAWBENCH)

A record says how to load the tasks, who plays them when no harness is named, whether they play
in a browser, and what a run writes after its last episode (SWE-bench's predictions and run
report, the browser judges' agreement). `register` adds one; `get` finds one by name or by
`KIND:PATH`. Adding a benchmark is one record here (docs/extending.md).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pomona.benchmarks import builtin, resume, swebench, terminal_bench
from pomona.benchmarks.swebench import datasets as swe_datasets
from pomona.benchmarks.swebench import task_sets as swe_tasks
from pomona.benchmarks.task import Task
from pomona.errors import UsageError


@dataclass(frozen=True)
class LoadContext:
    """What loading may depend on: the path after `KIND:`, and, for benchmarks that grade into
    official log directories (SWE-bench), where they go and under which run id and model."""

    path: str | None = None
    logs: Path = Path("pomona-runs/swebench")
    run_id: str = "pomona"
    model: str = "pomona"  # the SWE-bench model name (harness + model)
    # the task ids asked for, where a benchmark can skip reading the others; the caller filters
    only: frozenset[str] | None = None


@dataclass(frozen=True)
class Finished:
    """A run's end, as a benchmark's `finish` sees it."""

    records: Sequence[Any]  # the EpisodeRecords, in (task, attempt) order
    tasks: Sequence[Task]
    context: LoadContext
    trajectories: Path
    judged: bool = False  # a judge model was named
    # a resumed run's `episodes` rows that earlier invocations produced (their results stand)
    kept: Sequence[dict[str, Any]] = ()


@dataclass
class Outputs:
    """What a benchmark wrote after the run: lines for the console and named results."""

    lines: list[str] = field(default_factory=list)
    results: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Benchmark:
    """One benchmark (see the module docstring). `name` is what --benchmark takes; with
    `takes_path`, `NAME:PATH` (and `local`, if set, names the shipped set, loaded with no path)."""

    name: str
    summary: str
    load: Callable[[LoadContext], list[Task]]
    agent: str = "pi"  # who plays when no harness is named
    takes_path: bool = False
    browser: bool = False  # its tasks play in a browser, in the browser's own image
    finish: Callable[[Finished], Outputs] | None = None


_REGISTRY: dict[str, Benchmark] = {}


def register(benchmark: Benchmark) -> Benchmark:
    """Make `benchmark` known to `pomona run` and `get` (a name may be registered once)."""
    if benchmark.name in _REGISTRY:
        raise UsageError(f"a benchmark named {benchmark.name!r} is registered already")
    _REGISTRY[benchmark.name] = benchmark
    return benchmark


def benchmarks() -> list[Benchmark]:
    return list(_REGISTRY.values())


def get(name: str) -> tuple[Benchmark, str | None]:
    """The benchmark `name` means and the path it names (`KIND:PATH`), or a UsageError that
    lists the choices."""
    kind, colon, path = name.partition(":")
    found = _REGISTRY.get(name) if not colon else _REGISTRY.get(kind)
    if found is not None and found.takes_path == bool(colon and path):
        return found, path or None
    choices = ", ".join(b.name + (":PATH" if b.takes_path else "") for b in _REGISTRY.values())
    raise UsageError(f"unknown benchmark {name!r}: choose {choices}")


def load(name: str, **context: Any) -> list[Task]:
    """The tasks of benchmark `name` (LoadContext's fields as keywords)."""
    benchmark, path = get(name)
    return benchmark.load(LoadContext(path=path, **context))


# -- the benchmarks Pomona ships ------------------------------------------------------------------


def _swe_finish(done: Finished) -> Outputs:
    """Predictions JSONL of the first attempts that were graded, and swebench's own run report
    over them; nothing at all when no attempt was (an empty file would read as a submission)."""
    ctx = done.context
    instances = [t.metadata["instance"] for t in done.tasks if "instance" in t.metadata]
    preds = [
        swebench.prediction(
            r.task, ctx.model, (r.score or {}).get("details", {}).get("model_patch")
        )
        for r in done.records
        if r.attempt == 0 and r.score is not None
    ] + [_kept_prediction(row, ctx.model) for row in done.kept if resume.attempt_of(row) == 0]
    if not instances or not preds:
        return Outputs()
    swebench.write_predictions(
        ctx.logs / f"{ctx.model.replace('/', '__')}.{ctx.run_id}.predictions.jsonl", preds
    )
    report = swebench.run_report(preds, instances, ctx.run_id, ctx.logs)
    line = (
        f"swebench run report: {report['resolved_instances']}/{report['total_instances']} "
        f"resolved (logs in {ctx.logs})"
    )
    return Outputs([line], {"swe_report": report})


def _kept_prediction(row: dict[str, Any], model: str) -> swebench.Prediction:
    """The prediction of an attempt an earlier invocation of a resumed run graded: its patch as
    the grading kept it (the episode's `grading/patch.diff` artifact)."""
    uri = next(
        (a["uri"] for a in row.get("artifacts") or [] if a["name"] == "grading/patch.diff"), None
    )
    patch = Path(uri.removeprefix("file://")).read_text() if uri else None
    return swebench.prediction(row["task"], model, patch)


def _swe_set(name: str) -> Callable[[LoadContext], list[Task]]:
    def load(ctx: LoadContext) -> list[Task]:
        swe = {"root": str(ctx.logs), "run_id": ctx.run_id, "model": ctx.model}
        return list(swebench.tasks(swe_tasks.TASK_SETS[name].out, name, **swe))

    return load


def _swe_dataset(ctx: LoadContext) -> list[Task]:
    assert ctx.path is not None
    data = swe_datasets.load(ctx.path)
    swe = {"root": str(ctx.logs), "run_id": ctx.run_id, "model": ctx.model}
    return [swebench.to_task(i, f"swebench:{data.label}", **swe) for i in data.instances]


def _terminal_bench(ctx: LoadContext) -> list[Task]:
    logs = ctx.logs.parent / "terminal-bench"  # each verification's evidence, beside SWE's
    if ctx.path is None:
        return list(terminal_bench.tasks(terminal_bench.DATA, "terminal-bench-local", logs=logs))
    label = f"terminal-bench:{swe_datasets.label_of(ctx.path)}"
    return list(terminal_bench.tasks(ctx.path, label, logs=logs))


def _browser(name: str) -> Callable[[LoadContext], list[Task]]:
    def load(ctx: LoadContext) -> list[Task]:
        from pomona.benchmarks.browser import suite

        return suite.load(name)

    return load


def _webvoyager_checkout(ctx: LoadContext) -> list[Task]:
    from pomona.benchmarks.browser import official

    assert ctx.path is not None
    return official.webvoyager_tasks(ctx.path)


def _browser_finish(done: Finished) -> Outputs:
    if not done.judged:
        return Outputs()
    from pomona.benchmarks.browser import judgments

    results = done.trajectories / "browser" / done.context.run_id
    judgments.write_judgments(results, done.records)
    agreement = judgments.judge_agreement(done.records)
    line = f"judge-oracle agreement: {agreement} (verdicts in {results / 'judgments.jsonl'})"
    return Outputs([line], {"judge_agreement": agreement})


def _claw(kind: str) -> Callable[[LoadContext], list[Task]]:
    def load(ctx: LoadContext) -> list[Task]:
        from pomona.benchmarks.claw import load as load_claw

        return load_claw(kind, ctx.path, ctx.only)

    return load


for _name, _summary in (
    ("swe-local", "the SWE task set shipped with Pomona (offline)"),
    ("swe-multilingual-local", "its JavaScript counterpart, like SWE-bench Multilingual"),
):
    register(Benchmark(_name, _summary, _swe_set(_name), finish=_swe_finish))
register(
    Benchmark(
        "swebench",
        "any SWE-bench-format dataset (a task repo, parquet/JSONL rows, a hub name)",
        _swe_dataset,
        takes_path=True,
        finish=_swe_finish,
    )
)
register(Benchmark("terminal-bench-local", "Terminal-Bench tasks shipped with Pomona",
                   _terminal_bench))  # fmt: skip
register(Benchmark("terminal-bench", "a directory of harbor task directories", _terminal_bench,
                   takes_path=True))  # fmt: skip


def _builtin(name: str) -> Callable[[LoadContext], list[Task]]:
    return lambda ctx: builtin.tasks(name)


for _name in builtin.TASK_SETS:
    register(Benchmark(_name, "a built-in smoke set", _builtin(_name)))
for _name, _summary in (
    ("miniwob", "MiniWoB++ in real Chromium (offline)"),
    ("webvoyager-local", "the local sites' tasks in WebVoyager's schema"),
    ("deepshop-local", "the local shop's tasks in DeepShop's schema"),
    ("mind2web-local", "the local sites' tasks in Online-Mind2Web's schema"),
):
    register(Benchmark(_name, _summary, _browser(_name), agent="webvoyager", browser=True,
                       finish=_browser_finish))  # fmt: skip
register(Benchmark("webvoyager", "a WebVoyager checkout: its tasks on the live web, its judge",
                   _webvoyager_checkout, agent="webvoyager", takes_path=True, browser=True,
                   finish=_browser_finish))  # fmt: skip
register(Benchmark("claw-eval-local", "Claw-Eval's layout, a small set shipped with Pomona",
                   _claw("claw-eval"), agent="claw-eval"))  # fmt: skip
register(Benchmark("claw-eval", "a Claw-Eval checkout: its services, graders, judge and loop",
                   _claw("claw-eval"), agent="claw-eval", takes_path=True))  # fmt: skip
register(Benchmark("qwenclawbench-local", "QwenClawBench's layout, a small set shipped with Pomona",
                   _claw("qwenclawbench"), agent="openclaw"))  # fmt: skip
register(Benchmark("qwenclawbench", "a QwenClawBench checkout: its tasks, graders and judge",
                   _claw("qwenclawbench"), agent="openclaw", takes_path=True))  # fmt: skip
