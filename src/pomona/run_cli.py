"""`pomona run`: the main job's command line. It runs pomona.run.run_benchmark (or the rest of
a run: --resume; or a Slurm job array: --slurm), then prints the tasks, the attempts that could
not be scored with their reasons, the run's summary and the leaderboard.

    pomona run --benchmark swe-local            # offline: embedded runtime, oracle model, pi

The default model is `oracle`: the proxy's scripted model replaying the task's gold solution
(apply the gold patch, run solve.sh) through the harness's own shell tool, so every harness's
real loop can solve every local task with no model at all.

The exit status is 0 when every attempt resolved, 1 when all were scored but some did not
resolve, 2 when some could not run (an infrastructure failure: sandbox, harness, proxy,
verifier...).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from pomona.benchmarks import leaderboard, registry, resume
from pomona.run import (
    DEFAULT_MODEL,
    DEFAULT_TIMEOUT,
    DEFAULT_TRAJECTORIES,
    RunResult,
    new_manifest,
    not_run,
    run_benchmark,
)
from pomona.slurm import cluster as slurm_cluster

EXIT_RESOLVED, EXIT_UNRESOLVED, EXIT_NOT_RUN = 0, 1, 2


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
        manifest = new_manifest(
            args.benchmark, args.harness, args.model, k=args.k, runtime=args.runtime,
            trajectories=args.trajectories, concurrency=args.concurrency, timeout=args.timeout,
            models=args.models, task_ids=args.tasks, judge=args.judge,
            judge_prompts=args.judge_prompts, image=args.image,
        )[0]  # fmt: skip
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
