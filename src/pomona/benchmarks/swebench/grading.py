"""Grading one prediction: the session in a fresh sandbox (session.py), then swebench's own
`get_eval_report` on its log, so swebench's parsers and resolved rule decide what the tests say
and its tools can re-grade Pomona's logs, which land in the official layout:
`<root>/logs/run_evaluation/<run_id>/<model>/<instance_id>/{report.json, test_output.txt, ...}`.

Then the verdict (verification/record.py): `resolved` only when swebench's report says so and
the witness shows the run's integrity, and every test the log counts as passing passed as the
witness saw it; else `suspect`. A spoof is never run. report.json is swebench's, with
`resolved` false for a spoof or a suspect run and `pomona_verdict` added; an environment failure
sets its `infra_failure` and `infra_failure_reason`. Like `run_instance`, a patch that does not
apply or tests that time out leave no report.json. verification.json holds the evidence.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pomona.benchmarks.swebench.faults import apply_fault, environment_fault
from pomona.benchmarks.swebench.images import digest_of
from pomona.benchmarks.swebench.instances import (
    TESTBED,
    Prediction,
    SweInstance,
    image_of,
    prediction,
    user_of,
)
from pomona.benchmarks.swebench.session import (
    EVAL_COMMAND,
    Session,
    TestbedMissing,
    evaluate,
)
from pomona.benchmarks.swebench.testbed import sandbox_options
from pomona.benchmarks.task import Score, VerifierError
from pomona.benchmarks.verification import record
from pomona.benchmarks.verification.integrity import Integrity, judge
from pomona.benchmarks.verification.record import Verification
from pomona.orchestrator.sdk.client import SandboxClient


@dataclass
class Grade:
    instance_id: str
    resolved: bool
    report: dict[str, Any] | None  # the official report.json content, when one is written
    log_dir: Path
    verification: Verification
    empty_patch: bool = False
    applied: bool = False
    timed_out: bool = False

    @property
    def verdict(self) -> str:
        return self.verification.verdict

    @property
    def infra_failure(self) -> str | None:
        """Why the environment, not the patch, failed (None: it did not)."""
        v = self.verification
        return v.reason if v.failure_kind else None

    @property
    def message(self) -> str:
        """One line a user can act on."""
        v = self.verification
        if v.failure_kind:
            return f"{v.failure_kind} failure: {v.reason}"
        return {
            record.EMPTY: "empty patch: not run",
            record.UNAPPLIED: "the patch does not apply",
            record.TIMEOUT: "the tests timed out",
            record.RESOLVED: "resolved",
            record.UNRESOLVED: "unresolved: tests still fail",
        }.get(v.verdict, f"{v.verdict}: {v.reason}")

    def score(self) -> Score:
        return Score(
            reward=1.0 if self.resolved else 0.0,
            resolved=self.resolved,
            details={
                "verdict": self.verdict,
                "report": self.report,
                "log_dir": str(self.log_dir),
                "empty_patch": self.empty_patch,
                "patch_applied": self.applied,
                "timed_out": self.timed_out,
                "spoof": [f.to_dict() for f in self.verification.spoof],
                "integrity": self.verification.to_dict()["integrity"],
                "message": self.message,
                "model_patch": (self.log_dir / "patch.diff").read_text(),
            },
        )


def log_dir_for(root: str | Path, run_id: str, model: str, instance_id: str) -> Path:
    from swebench.harness.constants import RUN_EVALUATION_LOG_DIR

    return Path(root) / RUN_EVALUATION_LOG_DIR / run_id / model.replace("/", "__") / instance_id


def claim_run_id(root: str | Path, run_id: str, model: str, instance_id: str) -> str:
    """`run_id`, or `run_id.1`, `run_id.2`... for the next attempt at the same instance: each
    attempt gets its own official log directory, claimed atomically (attempts run at once)."""
    for n in range(10_000):
        candidate = run_id if n == 0 else f"{run_id}.{n}"
        path = log_dir_for(root, candidate, model, instance_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            path.mkdir()
            return candidate
        except FileExistsError:
            continue
    raise VerifierError(f"too many attempts at {instance_id} in run {run_id}")


def witnessed_statuses(found: Integrity, spec: Any) -> dict[str, str]:
    """Each test's status as the witness saw it: pytest's per node id, a Node run's TAP lines
    read by the instance's own log parser (what the log's lines are read with)."""
    from swebench.harness.log_parsers import PARSER_REGISTRY

    statuses = dict(found.statuses)
    if found.tap:
        statuses.update(PARSER_REGISTRY[spec.log_parser]("\n".join(found.tap), spec))
    return statuses


def disagreements(report: dict[str, Any], seen: dict[str, str], spec: Any) -> list[str]:
    """Tests the log counts as succeeding that, by the witness's account, did not."""
    from swebench.harness.constants import FAIL_TO_PASS, PASS_TO_PASS, EvalType
    from swebench.harness.grading import get_eval_tests_report

    ref = {
        "instance_id": spec.instance_id,
        FAIL_TO_PASS: spec.FAIL_TO_PASS,
        PASS_TO_PASS: spec.PASS_TO_PASS,
    }
    witnessed = get_eval_tests_report(seen, ref, eval_type=EvalType(spec.eval_type))
    logged = report.get("tests_status") or {}
    out = []
    for kind in (FAIL_TO_PASS, PASS_TO_PASS):
        for test in logged.get(kind, {}).get("success", []):
            if test not in witnessed[kind]["success"]:
                out.append(
                    f"the log reports {test} succeeding; the witness saw "
                    f"{seen.get(test, 'no outcome for it')}"
                )
    return out


def _judged(run: Session, report: dict[str, Any], spec: Any) -> Verification:
    """The verdict on tests that ran and a report that exists."""
    installed = run.installed
    found = judge(run.records, installed.sites if installed else [], [TESTBED])
    v = Verification(record.UNRESOLVED, "tests still fail", integrity=found, records=run.records)
    if not found.witnessed:
        found.problems.append(
            "no test runner reported to the witness: the runner was not started, was shadowed, "
            "or is one Pomona has no witness for (pytest and node --test)"
        )
    found.problems += disagreements(report, witnessed_statuses(found, spec), spec)
    if report["resolved"]:
        if found.shown:
            v.verdict, v.reason = record.RESOLVED, "the tests pass, and the witness agrees"
        else:
            v.verdict, v.reason = record.SUSPECT, "; ".join(found.problems)
    return v


def _verification(run: Session | None, instance: SweInstance, error: str | None) -> Verification:
    """The verdict on everything but a report: spoof, not applied, timed out, infra."""
    if run is None:
        kind = record.ENVIRONMENT if error and "/testbed" in error else record.VERIFIER
        return Verification(record.ERROR, error or "", failure_kind=kind)
    if run.spoof:
        why = "; ".join(f"{f.path}: {f.why}" for f in run.spoof)
        return Verification(
            record.SPOOF, f"the patch reaches into its testing: {why}", spoof=run.spoof
        )
    if not run.applied:
        fault = apply_fault(run.apply_output)
        if fault:
            return Verification(record.ERROR, fault, failure_kind=record.ENVIRONMENT)
        return Verification(record.UNAPPLIED, "the patch does not apply")
    return Verification(record.TIMEOUT, "the tests timed out", records=run.records)


def _evidence(v: Verification, run: Session | None, instance: SweInstance) -> Verification:
    v.command = EVAL_COMMAND if run is not None and run.output else None
    v.environment = run.environment if run is not None else {}
    v.image = image_of(instance)
    v.image_digest = digest_of(instance)
    v.sandbox = {"user": user_of(instance), "network": "none", "workdir": TESTBED}
    if run is not None and run.installed is not None:
        v.witness = run.installed.to_dict()
    return v


def _official_report(
    iid: str, report: dict[str, Any] | None, v: Verification
) -> dict[str, Any] | None:
    """report.json: swebench's, with Pomona's verdict on it (None: swebench would write none)."""
    if report is None and v.verdict != record.SPOOF:
        return None
    entry = dict(
        (report or {}).get(iid)
        or {
            "patch_is_None": False,
            "patch_exists": True,
            "patch_successfully_applied": True,
            "resolved": False,
            "infra_failure": False,
        }
    )
    entry["resolved"] = v.resolved
    entry["pomona_verdict"] = v.verdict
    if v.verdict in (record.SPOOF, record.SUSPECT):
        entry["pomona_reason"] = v.reason
    if v.failure_kind:
        entry["infra_failure"], entry["infra_failure_reason"] = True, v.reason
    return {iid: entry}


def _sandbox_session(
    client: SandboxClient, instance: SweInstance, spec: Any, patch: str, timeout: float
) -> tuple[Session | None, str | None, list[str]]:
    """The session, or why it could not be had (a missing /testbed: the environment's fault;
    anything else failing: the verifier's, raised)."""
    iid = instance["instance_id"]
    log: list[str] = []
    try:
        with client.create_sandbox(
            image_of(instance),
            network="none",
            timeout=timeout + 600,
            labels={"purpose": "swebench-grade", "task": iid[:63]},
            **sandbox_options(instance),
        ) as sb:
            return evaluate(sb, instance, spec, patch, log, timeout), None, log
    except TestbedMissing as e:
        return None, str(e), log
    except Exception as e:  # noqa: BLE001 - any failure of the grading environment is the verifier's
        raise _Lost(f"{iid}: grading sandbox failed: {e}", log) from e


class _Lost(VerifierError):
    def __init__(self, message: str, log: list[str]):
        super().__init__(message)
        self.log = log


def grade(
    client: SandboxClient,
    instance: SweInstance,
    pred: Prediction,
    root: str | Path,
    run_id: str,
    timeout: float = 1800,
) -> Grade:
    """Grade one prediction in a fresh sandbox and write the official per-instance logs."""
    from swebench.harness.constants import LOG_INSTANCE, LOG_REPORT, LOG_TEST_OUTPUT
    from swebench.harness.grading import get_eval_report
    from swebench.harness.utils import make_test_spec

    iid = instance["instance_id"]
    log_dir = log_dir_for(root, run_id, pred["model_name_or_path"], iid)
    log_dir.mkdir(parents=True, exist_ok=True)
    patch = pred.get("model_patch")
    (log_dir / "patch.diff").write_text(patch or "")
    if not patch or not patch.strip():
        (log_dir / LOG_INSTANCE).write_text("empty patch: not run\n")
        v = _evidence(Verification(record.EMPTY, "empty patch: not run"), None, instance)
        v.write(log_dir)
        return Grade(iid, False, None, log_dir, v, empty_patch=True)
    spec = make_test_spec(instance)
    try:
        run, error, log = _sandbox_session(client, instance, spec, patch, timeout)
    except _Lost as e:
        (log_dir / LOG_INSTANCE).write_text("\n".join([*e.log, f"verifier failure: {e}"]) + "\n")
        Verification(record.ERROR, str(e), failure_kind=record.VERIFIER).write(log_dir)
        raise
    (log_dir / LOG_INSTANCE).write_text("\n".join([*log, *([error] if error else [])]) + "\n")
    report = None
    if run is not None and run.applied and not run.spoof:
        (log_dir / "eval.sh").write_text(spec.eval_script)
        (log_dir / LOG_TEST_OUTPUT).write_text(run.output)
    if run is not None and run.applied and not run.spoof and not run.timed_out:
        report = get_eval_report(
            spec, pred, str(log_dir / LOG_TEST_OUTPUT), include_tests_status=True
        )
        v = _judged(run, report[iid], spec)
        if fault := (None if v.resolved else environment_fault(run.output)):
            v.verdict, v.reason, v.failure_kind = record.ERROR, fault, record.ENVIRONMENT
    else:
        v = _verification(run, instance, error)
    _evidence(v, run, instance).write(log_dir)
    written = _official_report(iid, report, v)
    if written is not None:
        (log_dir / LOG_REPORT).write_text(json.dumps(written, indent=4))
    return Grade(
        iid,
        v.resolved,
        written,
        log_dir,
        v,
        applied=bool(run and run.applied),
        timed_out=bool(run and run.timed_out),
    )


def test_statuses(
    client: SandboxClient, instance: SweInstance, patch: str | None, timeout: float = 1800
) -> dict[str, str]:
    """Run the task's eval script on the base (patch None) or base + patch, and parse it with
    the instance's own log parser: how validation derives FAIL_TO_PASS and PASS_TO_PASS."""
    from swebench.harness.log_parsers import PARSER_REGISTRY
    from swebench.harness.utils import make_test_spec

    spec = make_test_spec(instance)
    with client.create_sandbox(
        image_of(instance), network="none", timeout=timeout + 600, **sandbox_options(instance)
    ) as sb:
        run = evaluate(sb, instance, spec, patch, [], timeout)
    if not run.applied or run.spoof:
        raise VerifierError(f"{instance['instance_id']}: the patch does not apply cleanly")
    if fault := environment_fault(run.output):
        raise VerifierError(f"{instance['instance_id']}: {fault}")
    return PARSER_REGISTRY[spec.log_parser](run.output, spec)


def regrade(instance: SweInstance, log_dir: str | Path) -> dict[str, Any]:
    """swebench's own verdict on a written log directory (what the log alone says)."""
    from swebench.harness.constants import LOG_TEST_OUTPUT
    from swebench.harness.grading import get_eval_report
    from swebench.harness.utils import make_test_spec

    log_dir = Path(log_dir)
    pred = prediction(
        instance["instance_id"], log_dir.parent.name, (log_dir / "patch.diff").read_text()
    )
    return get_eval_report(make_test_spec(instance), pred, str(log_dir / LOG_TEST_OUTPUT), True)
