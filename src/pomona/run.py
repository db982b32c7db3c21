"""`pomona run`: the main job. Run a harness with a model on a benchmark, record every call and
episode into the trajectory store, grade each attempt the benchmark's official way, and print a
summary and the leaderboard.

    pomona run --benchmark swe-local            # offline: embedded runtime, oracle model, pi

The default model is `oracle`: the proxy's scripted model replaying the task's gold solution
(apply the gold patch, run solve.sh) through the harness's own shell tool, so every harness's
real loop can solve every local task with no model at all. Episodes go through
`pomona.gym.rollout`; this module adds the benchmark names, the run's columns (the model as the
user named it, the runtime), live pass counts, SWE-bench predictions and run report, and tables.

Every attempt that could not be scored is printed with its reason; the exit status is 0 when
every attempt resolved, 1 when all were scored but some did not resolve, 2 when some could not
run (an infrastructure failure: sandbox, harness, proxy, verifier...).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pomona.benchmarks import leaderboard, metrics, registry, resume, swebench
from pomona.benchmarks.task import Task
from pomona.errors import UsageError
from pomona.orchestrator.runtimes import runtime_kind
from pomona.slurm import cluster as slurm_cluster

DEFAULT_MODEL = "oracle"
DEFAULT_TRAJECTORIES = Path("pomona-runs")
DEFAULT_TIMEOUT = 600.0
EXIT_RESOLVED, EXIT_UNRESOLVED, EXIT_NOT_RUN = 0, 1, 2


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
    from pomona.episodes.rollouts import Progress, rollout
    from pomona.proxy.shared import shared_proxy

    bench, _ = registry.get(benchmark)
    harness = harness or bench.agent
    trajectories = Path(trajectories).resolve()
    run_id = run_id or new_run_id()
    swe_model = swebench.model_name(harness, model)
    tasks, unavailable = playable(
        benchmark, model, image, runtime,
        choose_tasks(benchmark, run_id, trajectories, swe_model, task_ids),
    )  # fmt: skip
    if only is None:
        resume.RunManifest(
            run_id, benchmark, harness, model, k, [t.id for t in tasks], runtime, timeout,
            models, judge, judge_prompts, image, concurrency,
        ).save(trajectories)  # fmt: skip
    elif bench.browser:
        raise UsageError(f"--resume does not cover the browser benchmarks ({benchmark}) yet")
    judging = Judging(judge, judges.load_prompts(judge_prompts), trajectories / "browser" / run_id)
    total = len(tasks) * k if only is None else len(only)
    bar = Progress(total, f"{benchmark} · {harness} · {model}", progress)
    try:
        records = asyncio.run(
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


def task_table(rows: list[dict[str, Any]]) -> str:
    """Per task: attempts, passes, and what failed."""
    by_task: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_task.setdefault(row["task"], []).append(row)
    width = max((len(t) for t in by_task), default=4)
    lines = [f"{'task'.ljust(width)}  passed  failures"]
    for task, rs in sorted(by_task.items()):
        passed = sum(bool(r["resolved"]) for r in rs if r["failure_kind"] == "none")
        fails = (
            ", ".join(sorted({r["failure_kind"] for r in rs if r["failure_kind"] != "none"})) or "-"
        )
        lines.append(f"{task.ljust(width)}  {passed}/{len(rs):<5} {fails}")
    return "\n".join(lines)


def not_run(unavailable: dict[str, str]) -> str:
    """The tasks that cannot run on this machine, each with its reason."""
    return "\n".join(f"  {task}: {why}" for task, why in sorted(unavailable.items()))


def failures(rows: list[dict[str, Any]]) -> str:
    """Every attempt that could not be scored, with its reason: what a user acts on."""
    failed = [r for r in rows if r["failure_kind"] != "none"]
    return "\n".join(
        f"  {r['task']} [{r['failure_kind']}]: {r.get('failure_message') or '-'}" for r in failed
    )


def exit_status(rows: list[dict[str, Any]]) -> int:
    """0 every attempt resolved; 1 all ran and were scored, some unresolved; 2 some could not run."""
    if any(r["failure_kind"] != "none" for r in rows):
        return EXIT_NOT_RUN
    return EXIT_RESOLVED if rows and all(r["resolved"] for r in rows) else EXIT_UNRESOLVED


def add_run_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register `run` on a `pomona` subparsers object."""
    p = subparsers.add_parser(
        "run", help="run a harness with a model on a benchmark, graded and recorded"
    )
    p.add_argument(
        "--benchmark",
        help=", ".join(
            f"{b.name}:PATH ({b.summary})" if b.takes_path else b.name
            for b in registry.benchmarks()
        ),
    )
    p.add_argument(
        "--resume",
        metavar="RUN",
        help="run again what run RUN (in --trajectories) has no model result for: attempts "
        "missing or ended in an infrastructure failure, with the run's own settings",
    )
    p.add_argument(
        "--harness",
        help="who plays; default: the benchmark's own (pi; webvoyager, the built-in WebVoyager "
        "loop, for browser benchmarks; claw-eval's own loop, openclaw for the Claw sets)",
    )
    p.add_argument(
        "--model",
        default=DEFAULT_MODEL,
        help="oracle (gold solution, offline), scripted, or a name from --models",
    )
    p.add_argument("-k", type=int, default=1, help="attempts per task (for pass@k / pass^k)")
    p.add_argument("--runtime", default="local", help="local, docker, or an orchestrator URL")
    p.add_argument("--trajectories", type=Path, default=DEFAULT_TRAJECTORIES)
    p.add_argument("--models", help="LiteLLM-style model list YAML for real upstreams")
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        help="seconds per harness run, for tasks that set no time of their own",
    )
    p.add_argument("--tasks", nargs="*", help="only these task ids")
    p.add_argument(
        "--judge",
        help="browser benchmarks: a model (from --models) for the official "
        "judge procedure, reported beside the oracle with their agreement",
    )
    p.add_argument(
        "--judge-prompts",
        help="a directory of judge prompt files replacing Pomona's wording (see docs/browser.md)",
    )
    p.add_argument(
        "--image",
        help="an OCI image for tasks that name none of their own (on local they run in the "
        "host's filesystem; docker, podman and kubernetes need one)",
    )
    p.add_argument("--state-dir", help="sandbox state directory (local runtime)")
    slurm_cluster.add_arguments(p)
    p.add_argument("--html", type=Path, help="also write the leaderboard as an HTML page")
    p.add_argument("--json", action="store_true", help="print the run's summary as JSON too")
    p.set_defaults(func=_run)
    return p


def _start(args: argparse.Namespace) -> RunResult:
    """The run the command line asks for: a new one, or the rest of one (--resume)."""
    if args.slurm:
        return _on_slurm(args)
    if args.resume:
        from pomona.resume import resume_run

        return resume_run(
            args.resume, args.trajectories, state_dir=args.state_dir, concurrency=args.concurrency
        )
    return run_benchmark(
        args.benchmark, args.harness, args.model, k=args.k, runtime=args.runtime,
        trajectories=args.trajectories, concurrency=args.concurrency, timeout=args.timeout,
        models=args.models, task_ids=args.tasks, state_dir=args.state_dir, judge=args.judge,
        judge_prompts=args.judge_prompts, image=args.image,
    )  # fmt: skip


def _on_slurm(args: argparse.Namespace) -> RunResult:
    """The run (new, or the rest of one) as a Slurm job array (pomona.slurm)."""
    from pomona.slurm.executor import run_on_slurm

    if args.resume:
        manifest = resume.RunManifest.load(args.trajectories, args.resume)
    else:
        harness = args.harness or registry.get(args.benchmark)[0].agent
        run_id, trajectories = new_run_id(), Path(args.trajectories).resolve()
        swe_model = swebench.model_name(harness, args.model)
        tasks, _ = playable(
            args.benchmark, args.model, args.image, args.runtime,
            choose_tasks(args.benchmark, run_id, trajectories, swe_model, args.tasks),
        )  # fmt: skip
        manifest = resume.RunManifest(
            run_id, args.benchmark, harness, args.model, args.k, [t.id for t in tasks],
            args.runtime, args.timeout, args.models, args.judge, args.judge_prompts, args.image,
            args.concurrency,
        )  # fmt: skip
        manifest.save(trajectories)
    return run_on_slurm(manifest, args.trajectories, slurm_cluster.settings_of(args))


def _run(args: argparse.Namespace) -> int:
    if (args.benchmark is None) == (args.resume is None):
        print("pomona run: give --benchmark B, or --resume RUN", file=sys.stderr)
        return EXIT_NOT_RUN
    try:
        result = _start(args)
    except (
        KeyError,
        ValueError,
        resume.ResumeError,
        slurm_cluster.SlurmError,
    ) as e:  # bad input: said, not a traceback
        print(f"pomona run: {e.args[0] if e.args else e}", file=sys.stderr)
        return EXIT_NOT_RUN
    args.benchmark, args.k = result.benchmark, result.k
    print(f"\nrun {result.run_id}: {len(result.rows)} attempts recorded in {result.trajectories}\n")
    print(task_table(result.rows))
    if result.unavailable:
        print(f"\nnot run, unavailable here ({len(result.unavailable)}):")
        print(not_run(result.unavailable))
    if failed := failures(result.rows):
        print(f"\nnot scored (infrastructure failures, excluded from every rate):\n{failed}")
    print("\nthis run:")
    print(leaderboard.format_table(result.summaries))
    for line in result.lines:
        print(f"\n{line}")
    board = leaderboard.leaderboard(result.trajectories, range(1, args.k + 1))
    print(f"\nleaderboard ({result.trajectories}):")
    print(leaderboard.format_table(board))
    if args.html:
        print(f"wrote {leaderboard.write_html(board, args.html)}")
    if args.json:
        print(json.dumps([s.__dict__ for s in result.summaries], default=str, indent=2))
    return exit_status(result.rows)
