"""The main job as a function: run a harness with a model on a benchmark, record every call and
episode into the trajectory store, and grade each attempt the benchmark's official way
(`pomona run` is its command line: run_cli.py).

    pomona run --benchmark swe-local            # offline: embedded runtime, oracle model, pi

The default model is `oracle`: the proxy's scripted model replaying the task's gold solution
(apply the gold patch, run solve.sh) through the harness's own shell tool, so every harness's
real loop can solve every local task with no model at all. Episodes go through
`pomona.gym.rollout`; this module adds the benchmark names, the run's columns (the model as the
user named it, the runtime), live pass counts, SWE-bench predictions and run report, and tables.

An attempt that could not be scored keeps its typed failure (sandbox, harness, proxy,
verifier...) in its row: excluded from every rate, never a reward of 0.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pomona.benchmarks import metrics, registry, resume, swebench
from pomona.benchmarks.task import Task
from pomona.errors import UsageError
from pomona.orchestrator.runtimes import runtime_kind

DEFAULT_MODEL = "oracle"
DEFAULT_TRAJECTORIES = Path("pomona-runs")
DEFAULT_TIMEOUT = 600.0


@dataclass
class RunResult:
    run_id: str
    records: list[Any]
    summaries: list[metrics.Summary]
    trajectories: Path
    swe_report: dict[str, Any] | None = None
    rows: list[dict[str, Any]] = field(default_factory=list)
    benchmark: str = ""
    k: int = 1
    lines: list[str] = field(default_factory=list)  # what the benchmark wrote after the run
    unavailable: dict[str, str] = field(default_factory=dict)  # task -> why it cannot run here


def in_image(tasks: list[Task], image: str | None, runtime: str) -> list[Task]:
    """The tasks with `image` for those that name none of their own (image "host"; a browser
    task runs in the browser's image). Only an embedded runtime has a host filesystem to give:
    elsewhere such tasks need an image, said before any sandbox starts, not once per episode."""
    hosted = [t for t in tasks if t.environment.image == "host" and not t.environment.browser]
    if image:
        return [
            dataclasses.replace(t, environment=dataclasses.replace(t.environment, image=image))
            if t in hosted
            else t
            for t in tasks
        ]
    if hosted and "://" not in runtime and not runtime_kind(runtime).host_filesystem:
        ids = [t.id for t in hosted]
        raise UsageError(
            f"{len(ids)} task(s) ({', '.join(ids[:3])}{', ...' if len(ids) > 3 else ''})"
            f" run in the host's filesystem, which only the local runtime has; give --image REF"
            f" (an OCI image with /bin/sh) to run them on {runtime}"
        )
    return tasks


def row_of(record: Any, model: str) -> dict[str, Any]:
    """An EpisodeRecord in the `episodes` columns metrics read."""
    return {
        "episode": record.episode,
        "benchmark": record.benchmark,
        "task": record.task,
        "harness": record.harness,
        "model": model,
        "reward": record.reward,
        "resolved": record.resolved,
        "failure_kind": record.failure_kind,
        "failure_message": record.failure_message,
    }


def new_run_id() -> str:
    return f"run-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"


def choose_tasks(
    benchmark: str, run_id: str, trajectories: Path, swe_model: str, task_ids: list[str] | None
) -> list[Task]:
    """The benchmark's tasks a run plays (`task_ids`: only those), graded into its SWE logs."""
    only = frozenset(task_ids) if task_ids else None
    tasks = registry.load(
        benchmark, logs=trajectories / "swebench", run_id=run_id, model=swe_model, only=only
    )
    if task_ids:  # an id with or without its benchmark's prefix (`claw-eval/T003...` or `T003...`)
        tasks = [t for t in tasks if t.id in task_ids or t.id.split("/", 1)[-1] in task_ids]
        if not tasks:
            raise UsageError(f"none of {task_ids} is in {benchmark}")
    return tasks


def playable(
    benchmark: str, model: str, image: str | None, runtime: str, tasks: list[Task]
) -> tuple[list[Task], dict[str, str]]:
    """The tasks a run plays, in their image, and why each other one cannot run here (a loader
    sets metadata["unavailable"]: the live web, a fixture missing from a checkout...). What does
    not fit together is said before anything starts."""
    bench, _ = registry.get(benchmark)
    unavailable = {t.id: t.metadata["unavailable"] for t in tasks if t.metadata.get("unavailable")}
    kept = [t for t in tasks if t.id not in unavailable]
    if not kept:
        raise UsageError(f"no task of {benchmark} can run here:\n{not_run(unavailable)}")
    if model == DEFAULT_MODEL and not bench.browser and all(t.solution is None for t in kept):
        raise UsageError(
            f"{benchmark} ships no gold solutions for the oracle model to replay: give --model "
            "(a model from --models, or scripted)"
        )
    if bench.browser and image:
        raise UsageError(
            f"--image does not apply to {benchmark}: its episodes run in the browser's own "
            "image (`pomona browser image` on docker)"
        )
    return in_image(kept, image, runtime), unavailable


def refuse_foreign_loop(benchmark: str, harness: str) -> None:
    """A benchmark's own loop (a harness that is not standalone: claw-eval) plays only the
    benchmarks whose agent it is; anywhere else it is refused before a sandbox starts, not
    found missing inside each episode."""
    from pomona.harnesses import registry as harnesses

    try:
        loop = harnesses.get(harness)
    except UsageError:
        return  # not a harness (the built-in WebVoyager loop): the engine's agent_for says
    if loop.standalone:
        return
    own = [b.name for b in registry.benchmarks() if b.agent == harness]
    if registry.get(benchmark)[0].name not in own:
        raise UsageError(
            f"{harness} is a benchmark's own loop: it plays {' and '.join(own)} only, "
            f"not {benchmark}; give another --harness"
        )


def run_tasks(
    benchmark: str,
    harness: str,
    model: str,
    run_id: str,
    trajectories: Path,
    task_ids: list[str] | None,
    image: str | None,
    runtime: str,
) -> tuple[list[Task], dict[str, str]]:
    """The tasks run `run_id` plays (choose_tasks, then playable) and why the others cannot."""
    refuse_foreign_loop(benchmark, harness)
    swe_model = swebench.model_name(harness, model)
    chosen = choose_tasks(benchmark, run_id, trajectories, swe_model, task_ids)
    return playable(benchmark, model, image, runtime, chosen)


def new_manifest(
    benchmark: str,
    harness: str | None = None,
    model: str = DEFAULT_MODEL,
    *,
    k: int = 1,
    runtime: str = "local",
    trajectories: str | Path = DEFAULT_TRAJECTORIES,
    concurrency: int = 4,
    timeout: float = DEFAULT_TIMEOUT,
    models: str | None = None,
    task_ids: list[str] | None = None,
    judge: str | None = None,
    judge_prompts: str | None = None,
    image: str | None = None,
    run_id: str | None = None,
) -> tuple[resume.RunManifest, list[Task], dict[str, str]]:
    """A new run, saved before its first attempt (what --resume and a Slurm array read): its
    manifest, the tasks it plays and why the others cannot run here."""
    harness = harness or registry.get(benchmark)[0].agent
    trajectories = Path(trajectories).resolve()
    run_id = run_id or new_run_id()
    tasks, unavailable = run_tasks(
        benchmark, harness, model, run_id, trajectories, task_ids, image, runtime
    )
    manifest = resume.RunManifest(
        run_id, benchmark, harness, model, k, [t.id for t in tasks], runtime, timeout, models,
        judge, judge_prompts, image, concurrency,
    )  # fmt: skip
    manifest.save(trajectories)
    return manifest, tasks, unavailable


def run_benchmark(
    benchmark: str,
    harness: str | None = None,
    model: str = DEFAULT_MODEL,
    *,
    k: int = 1,
    runtime: str = "local",
    trajectories: str | Path = DEFAULT_TRAJECTORIES,
    concurrency: int = 4,
    timeout: float = DEFAULT_TIMEOUT,
    models: str | None = None,
    task_ids: list[str] | None = None,
    state_dir: str | None = None,
    progress: bool = True,
    judge: str | None = None,
    judge_prompts: str | None = None,
    image: str | None = None,
    run_id: str | None = None,
    only: list[resume.Attempt] | None = None,
) -> RunResult:
    """Run `k` attempts of `harness` (default: the benchmark's natural one) with `model` on every
    task of `benchmark`. `timeout` is the agent's budget for tasks that set none of their own
    (task.toml, an instance field). `judge` names a model for the browser benchmarks' LLM judges.
    `image` is where tasks that name no image of their own run (on `local`, the host's
    filesystem; the container runtimes have none). A new run writes its manifest first (what
    `--resume` reads); `run_id` with `only` plays just those (task, attempt) of that run, and
    the result covers the whole run (pomona.resume)."""
    # the engine, the proxy and the browser stack load here: `pomona run --help` stays light
    from pomona.benchmarks.browser import judges
    from pomona.benchmarks.browser.stage import Judging
    from pomona.episodes.rollouts import Progress, blocking, rollout
    from pomona.proxy.shared import shared_proxy

    bench, _ = registry.get(benchmark)
    harness = harness or bench.agent
    trajectories = Path(trajectories).resolve()
    if only is None:
        manifest, tasks, unavailable = new_manifest(
            benchmark, harness, model, k=k, runtime=runtime, trajectories=trajectories,
            concurrency=concurrency, timeout=timeout, models=models, task_ids=task_ids,
            judge=judge, judge_prompts=judge_prompts, image=image, run_id=run_id,
        )  # fmt: skip
        run_id = manifest.run_id
    elif bench.browser:
        raise UsageError(f"--resume does not cover the browser benchmarks ({benchmark}) yet")
    else:
        run_id = run_id or new_run_id()
        tasks, unavailable = run_tasks(
            benchmark, harness, model, run_id, trajectories, task_ids, image, runtime
        )
    swe_model = swebench.model_name(harness, model)
    judging = Judging(judge, judges.load_prompts(judge_prompts), trajectories / "browser" / run_id)
    total = len(tasks) * k if only is None else len(only)
    bar = Progress(total, f"{benchmark} · {harness} · {model}", progress)
    try:
        records = blocking(
            rollout(
                tasks, harness, model, n=k, concurrency=concurrency,
                proxy=shared_proxy(trajectories, models), runtime=runtime, state_dir=state_dir,
                timeout=timeout, run_id=run_id, progress=False, on_episode=bar.update,
                columns={"model": model, "runtime": runtime}, judging=judging,
                only=None if only is None else set(only),
            )
        )  # fmt: skip
    finally:
        bar.close()
    kept = [] if only is None else resume.kept(trajectories, run_id, only)
    rows = kept + [row_of(r, model) for r in records]
    context = registry.LoadContext(logs=trajectories / "swebench", run_id=run_id, model=swe_model)
    done = registry.Finished(records, tasks, context, trajectories, bool(judge), kept)
    outputs = bench.finish(done) if bench.finish else registry.Outputs()
    return RunResult(
        run_id, records, metrics.summarize(rows, range(1, k + 1)), trajectories,
        outputs.results.get("swe_report"), rows, benchmark, k, outputs.lines, unavailable,
    )  # fmt: skip


def not_run(unavailable: dict[str, str]) -> str:
    """The tasks that cannot run on this machine, each with its reason."""
    return "\n".join(f"  {task}: {why}" for task, why in sorted(unavailable.items()))
