"""`pomona grade`: swebench's `run_evaluation`, on Pomona's sandboxes.

    pomona grade --dataset verified --predictions preds.jsonl --run-id my-run
    pomona grade --dataset path/to/task-repo --predictions gold --build-images

Same inputs as `python -m swebench.harness.run_evaluation` (the dataset by name or path, any
SWE-bench-format shape `pomona.benchmarks.swebench.datasets` reads; predictions as .jsonl, a .json
list or {instance_id: prediction} dict, or `gold`; run id, workers, instance ids, timeout,
report directory; its underscore spellings are accepted too) and the same outputs:
`logs/run_evaluation/<run_id>/<model>/<instance_id>/{patch.diff, eval.sh, test_output.txt,
report.json, run_instance.log}`, `logs/run_evaluation/<run_id>/run.json`, and swebench's own run
report `<model>.<run_id>.json` in the report directory. Like swebench, an instance whose report
exists is not graded again under the same run id.

Unlike swebench, each instance that did not resolve is printed with its verdict and reason
(`spoof` and `suspect` among them: see pomona.benchmarks.verification), and infrastructure
failures (environment, image, engine, verifier) are told apart from unresolved patches in the
console, in report.json and in the run report alike. The exit status follows run_evaluation's:
0 once the evaluation ran (whatever the patches scored), 2 when some instance could not be
graded, the input was bad or the engine cannot be reached (one line on stderr).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pomona.benchmarks import swebench
from pomona.benchmarks.resume import OutcomeLog, ResumeError
from pomona.benchmarks.swebench import Prediction, SweInstance
from pomona.benchmarks.swebench import datasets as swe_datasets
from pomona.benchmarks.swebench import images as swe_images
from pomona.benchmarks.verification import record
from pomona.benchmarks.verification.record import Verification
from pomona.errors import PomonaError, Unknown, UsageError
from pomona.orchestrator.sdk.client import SandboxClient

# what the patch itself earned, never graded again on --resume: every verdict but the failures
GRADED = tuple(v for v in record.VERDICTS if v not in (record.ERROR, record.TIMEOUT))

EXIT_EVALUATED, EXIT_NOT_GRADED = 0, 2


@dataclass
class Outcome:
    instance_id: str
    status: str  # a verdict (record.VERDICTS; `error`: could not be graded), or cached
    message: str


@dataclass
class GradeRun:
    run_id: str
    report: dict[str, Any]
    report_path: Path
    outcomes: list[Outcome] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        not_graded = (record.ERROR, record.TIMEOUT)
        return (
            EXIT_NOT_GRADED
            if any(o.status in not_graded for o in self.outcomes)
            else EXIT_EVALUATED
        )


def gold_predictions(instances: list[SweInstance]) -> dict[str, Prediction]:
    return {
        i["instance_id"]: swebench.prediction(i["instance_id"], "gold", i["patch"])
        for i in instances
    }


def run_dir(root: Path, run_id: str) -> Path:
    from swebench.harness.constants import RUN_EVALUATION_LOG_DIR

    return root / RUN_EVALUATION_LOG_DIR / run_id


def write_run_metadata(
    root: Path,
    run_id: str,
    dataset: str,
    split: str,
    predictions: str | None = None,
    instance_ids: list[str] | None = None,
) -> Path:
    """`run.json`, as swebench records what a run graded against (and what `--resume` reads)."""
    from swebench.harness.constants import LOG_RUN_METADATA, RUN_EVALUATION_LOG_DIR

    path = root / RUN_EVALUATION_LOG_DIR / run_id / LOG_RUN_METADATA
    path.parent.mkdir(parents=True, exist_ok=True)
    task_repo = dataset if (Path(dataset) / "tasks").is_dir() else None
    path.write_text(
        json.dumps(
            {
                "dataset": dataset,
                "split": split,
                "task_repo": task_repo,
                "predictions": predictions
                if predictions in (None, "gold")
                else str(Path(predictions).resolve()),
                "instance_ids": instance_ids,
                "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
            },
            indent=2,
        )
        + "\n"
    )
    return path


def _grade_one(
    client: SandboxClient,
    instance: SweInstance,
    pred: Prediction,
    root: Path,
    run_id: str,
    timeout: float,
) -> Outcome:
    iid = instance["instance_id"]
    try:
        g = swebench.grade(client, instance, pred, root, run_id, timeout)
    except Exception as e:  # noqa: BLE001 - one instance's failure is its outcome
        return Outcome(iid, record.ERROR, f"{record.VERIFIER} failure: {e}")
    return Outcome(iid, g.verdict, g.message)


def _with_images(
    todo: list[tuple[SweInstance, Prediction]],
    build: bool,
    say: Callable[[str], object],
    root: Path,
    run_id: str,
    outcomes: list[Outcome],
) -> list[tuple[SweInstance, Prediction]]:
    """The jobs whose image is there (found, pulled or built); the others are image failures,
    recorded in their log directory as the run report reads them."""
    unavailable = swe_images.ensure([inst for inst, _ in todo], build, say)
    for inst, pred in todo:
        iid = inst["instance_id"]
        if iid in unavailable:
            failed = Verification(
                record.ERROR, unavailable[iid], image=inst.get("image"), failure_kind=record.IMAGE
            )
            failed.write(swebench.log_dir_for(root, run_id, pred["model_name_or_path"], iid))
            outcomes.append(
                Outcome(iid, record.ERROR, f"{record.IMAGE} failure: {unavailable[iid]}")
            )
    return [(inst, p) for inst, p in todo if inst["instance_id"] not in unavailable]


def evaluate(
    dataset: str,
    predictions: str,
    run_id: str,
    *,
    split: str = "test",
    instance_ids: list[str] | None = None,
    max_workers: int = 4,
    timeout: float = 1800,
    report_dir: str | Path = ".",
    log_root: str | Path = ".",
    runtime: str | None = "local",  # None: the service at POMONA_URL
    state_dir: str | None = None,
    build_images: bool = False,
    say: Callable[[str], object] | None = None,
    resume: bool = False,
) -> GradeRun:
    """Grade a predictions file against a dataset, writing swebench's logs and run report. Each
    outcome is appended to the run's `outcomes.jsonl` as it ends; with `resume`, an instance
    whose last outcome there is a result of its patch (resolved, unresolved, empty) is not
    graded again, and every other one is, whatever its logs hold."""
    from pomona.orchestrator.sdk.shared import shared_client

    say = say or (lambda text: print(text, file=sys.stderr))
    root = Path(log_root).resolve()
    data = swe_datasets.load(dataset, split)
    preds = (
        gold_predictions(data.instances)
        if predictions == "gold"
        else swebench.load_predictions(predictions)
    )
    if not preds:
        raise UsageError(f"{predictions} holds no predictions")
    unknown = sorted(set(preds) - {i["instance_id"] for i in data.instances})
    if unknown:
        raise Unknown(f"predictions for instances not in {data.name}: {' '.join(unknown)}")
    if instance_ids:
        data.instances = swebench.select(data.instances, instance_ids, data.name)
    by_id = {i["instance_id"]: i for i in data.instances}
    preds = {k: v for k, v in preds.items() if k in by_id}
    write_run_metadata(root, run_id, data.name, split, predictions, instance_ids)
    ledger = OutcomeLog(run_dir(root, run_id) / "outcomes.jsonl")
    earlier = ledger.latest() if resume else {}

    outcomes: list[Outcome] = []
    todo: list[tuple[SweInstance, Prediction]] = []
    for iid, pred in sorted(preds.items()):
        done = swebench.log_dir_for(root, run_id, pred["model_name_or_path"], iid) / "report.json"
        if not (pred.get("model_patch") or "").strip():
            outcomes.append(Outcome(iid, record.EMPTY, "empty patch: not run"))
        elif earlier.get(iid) in GRADED:
            outcomes.append(Outcome(iid, "cached", f"graded earlier in run {run_id}"))
        elif done.exists() and not resume:
            outcomes.append(Outcome(iid, "cached", f"already graded in run {run_id} ({done})"))
        else:
            todo.append((by_id[iid], pred))
    todo = _with_images(todo, build_images, say, root, run_id, outcomes)
    if todo:
        client = shared_client(runtime, state_dir)

        def grade_one(job: tuple[SweInstance, Prediction]) -> Outcome:
            outcome = _grade_one(client, *job, root, run_id, timeout)
            ledger.append(outcome.instance_id, outcome.status, outcome.message)
            return outcome

        say(f"grading {len(todo)} instance(s) with {min(max_workers, len(todo))} worker(s)")
        t0 = time.monotonic()
        with ThreadPoolExecutor(max_workers=max(1, max_workers)) as pool:
            outcomes += pool.map(grade_one, todo)
        say(f"graded in {time.monotonic() - t0:.1f} s")
    report = swebench.run_report(
        list(preds.values()), data.instances, run_id, root, Path(report_dir).resolve()
    )
    model = next(iter(preds.values()))["model_name_or_path"]
    report_path = Path(report_dir).resolve() / f"{model.replace('/', '__')}.{run_id}.json"
    return GradeRun(run_id, report, report_path, sorted(outcomes, key=lambda o: o.instance_id))


def summary(run: GradeRun) -> str:
    r = run.report
    lines = [
        f"{o.instance_id}: {o.status} - {o.message}"
        for o in run.outcomes
        if o.status not in ("resolved",)
    ]
    lines.append(
        f"run {run.run_id}: {r['resolved_instances']}/{r['total_instances']} resolved, "
        f"{r['unresolved_instances']} unresolved ({r['spoof_instances']} spoof, "
        f"{r['suspect_instances']} suspect), {r['empty_patch_instances']} empty, "
        f"{r['error_instances']} errors, {r['infra_failure_instances']} infrastructure "
        f"failures; report {run.report_path}"
    )
    return "\n".join(lines)


# --- CLI -----------------------------------------------------------------------------------------


def add_grade_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register `grade` on a `pomona` subparsers object."""
    p = subparsers.add_parser(
        "grade", help="grade SWE-bench predictions like swebench's run_evaluation"
    )
    p.add_argument(
        "-d",
        "--dataset",
        "--dataset_name",
        dest="dataset",
        help="a dataset name (verified, lite, multilingual, swe-gym, swe-smith, "
        "swe-rebench, or any hub id) or a path: task repo, .parquet, .jsonl, "
        ".json, saved dataset",
    )
    p.add_argument(
        "-p",
        "--predictions",
        "--predictions_path",
        dest="predictions",
        help="predictions .jsonl / .json, or gold",
    )
    p.add_argument(
        "--resume",
        metavar="RUN_ID",
        help="grade again what run RUN_ID has no result for (killed mid-way, or the "
        "environment failed), with its own dataset and predictions",
    )
    p.add_argument("-s", "--split", default="test")
    p.add_argument(
        "--run-id",
        "--run_id",
        "-id",
        dest="run_id",
        help="names the log directory (default: a new one)",
    )
    p.add_argument("--max-workers", "--max_workers", dest="max_workers", type=int, default=4)
    p.add_argument("-i", "--instance-ids", "--instance_ids", dest="instance_ids", nargs="+")
    p.add_argument("-t", "--timeout", type=float, default=1800, help="seconds per instance's tests")
    p.add_argument("--report-dir", "--report_dir", dest="report_dir", default=".")
    p.add_argument("--log-root", default=".", help="where logs/run_evaluation goes (default: here)")
    p.add_argument("--runtime", default="local", help="local, docker, or an orchestrator URL")
    p.add_argument("--state-dir", help="sandbox state directory (local runtime)")
    p.add_argument(
        "--build-images",
        action="store_true",
        help="build each image from its task repo's Dockerfile (needs a Docker engine)",
    )
    p.set_defaults(func=_run_grade)
    return p


def resumed(args: argparse.Namespace) -> argparse.Namespace:
    """The arguments of the run `--resume` names, from its run.json, where not given again."""
    from swebench.harness.constants import LOG_RUN_METADATA

    path = run_dir(Path(args.log_root).resolve(), args.resume) / LOG_RUN_METADATA
    try:
        recorded = json.loads(path.read_text())
    except (OSError, ValueError):
        raise ResumeError(f"no graded run {args.resume} under {path.parent.parent}") from None
    for name in ("dataset", "predictions", "split", "instance_ids"):
        if getattr(args, name) in (None, "test") and recorded.get(name):
            setattr(args, name, recorded[name])
    args.run_id = args.resume
    return args


def _run_grade(args: argparse.Namespace) -> int:
    try:
        args = resumed(args) if args.resume else args
    except ResumeError as e:
        print(f"pomona grade: {e}", file=sys.stderr)
        return EXIT_NOT_GRADED
    if not args.dataset or not args.predictions:
        print(
            "pomona grade: give --dataset and --predictions (or --resume RUN_ID)", file=sys.stderr
        )
        return EXIT_NOT_GRADED
    run_id = args.run_id or f"grade-{time.strftime('%Y%m%d-%H%M%S')}"
    try:
        run = evaluate(
            args.dataset,
            args.predictions,
            run_id,
            split=args.split,
            instance_ids=args.instance_ids,
            max_workers=args.max_workers,
            timeout=args.timeout,
            report_dir=args.report_dir,
            log_root=args.log_root,
            runtime=args.runtime,
            state_dir=args.state_dir,
            build_images=args.build_images,
            resume=bool(args.resume),
        )
    except (KeyError, ValueError, FileNotFoundError, PomonaError) as e:
        print(f"pomona grade: {str(e).strip(chr(39))}", file=sys.stderr)
        return EXIT_NOT_GRADED
    print(summary(run))
    return run.exit_code
