"""Grading one prediction the official way: swebench's `run_instance` step by step in a fresh
sandbox (the `git apply` fallback chain, `/eval.sh` with the exit-code marker, stderr merged into
the log), then swebench's own `get_eval_report`, so its parsers and resolved rule decide and its
tools can re-grade Pomona's logs, which land in the official layout:
`<root>/logs/run_evaluation/<run_id>/<model>/<instance_id>/{report.json, test_output.txt, ...}`.
Like `run_instance`, a patch that does not apply or tests that time out leave no report.json.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pomona.benchmarks.swebench import guard
from pomona.benchmarks.swebench.faults import apply_fault, environment_fault
from pomona.benchmarks.swebench.guard import _run
from pomona.benchmarks.swebench.instances import (
    TESTBED,
    Prediction,
    SweInstance,
    image_of,
    prediction,
)
from pomona.benchmarks.swebench.testbed import prepare_testbed, sandbox_options
from pomona.benchmarks.task import Score, VerifierError
from pomona.orchestrator.sdk.client import Sandbox, SandboxClient

PATCH_FILE = "/tmp/patch.diff"  # swebench's CONTAINER_PATCH_FILE


@dataclass
class Grade:
    instance_id: str
    resolved: bool
    report: dict[str, Any] | None  # the official report.json content, when swebench writes one
    log_dir: Path
    empty_patch: bool = False
    applied: bool = False
    timed_out: bool = False
    guard_restored: list[str] = field(default_factory=list)
    infra_failure: str | None = None  # why the environment, not the patch, failed

    @property
    def message(self) -> str:
        """One line a user can act on."""
        if self.infra_failure:
            return f"environment failure: {self.infra_failure}"
        if self.empty_patch:
            return "empty patch: not run"
        if not self.applied:
            return "the patch does not apply"
        if self.timed_out:
            return "the tests timed out"
        return "resolved" if self.resolved else "unresolved: tests still fail"

    def score(self) -> Score:
        return Score(
            reward=1.0 if self.resolved else 0.0,
            resolved=self.resolved,
            details={
                "report": self.report,
                "log_dir": str(self.log_dir),
                "empty_patch": self.empty_patch,
                "patch_applied": self.applied,
                "timed_out": self.timed_out,
                "guard_restored": self.guard_restored,
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
    raise RuntimeError(f"too many attempts at {instance_id} in run {run_id}")


def _apply_chain(sandbox: Sandbox, patch: str, log: list[str]) -> tuple[bool, str]:
    """swebench's fallback chain, a clean tree between attempts, then the already-applied check;
    whether it applied, and the last attempt's output."""
    from swebench.harness.constants import APPLY_PATCH_FAIL, APPLY_PATCH_PASS
    from swebench.harness.run_evaluation import GIT_APPLY_CMDS

    sandbox.write_file(PATCH_FILE, patch)
    output = ""
    for attempt, command in enumerate(GIT_APPLY_CMDS):
        if attempt:
            _run(sandbox, "git checkout -- . ; git clean -fd")
        result = _run(sandbox, f"{command} {PATCH_FILE}")
        output = f"{result.stdout}{result.stderr}"
        if result.exit_code == 0:
            log.append(f"{APPLY_PATCH_PASS}:\n{output}")
            return True, output
        log.append(f"Failed to apply patch to container: {command}")
    if _run(sandbox, f"git apply --check --reverse {PATCH_FILE}").exit_code == 0:
        log.append(f"{APPLY_PATCH_PASS}: verified already applied")
        return True, output
    log.append(f"{APPLY_PATCH_FAIL}:\n{output}")
    return False, output


@dataclass
class _Run:
    output: str = ""  # the test log ("" when the tests never ran)
    applied: bool = False
    apply_output: str = ""
    timed_out: bool = False
    restored: list[str] = field(default_factory=list)


def _evaluate(
    sandbox: Sandbox,
    instance: SweInstance,
    spec: Any,
    patch: str | None,
    log: list[str],
    timeout: float,
) -> _Run:
    """Apply (unless `patch` is None: the base itself), guard, run /eval.sh."""
    from swebench.harness.constants import TESTS_TIMEOUT

    prepare_testbed(sandbox, instance)
    run = _Run(applied=True)
    if patch is not None:
        run.applied, run.apply_output = _apply_chain(sandbox, patch, log)
        if not run.applied:
            return run
    run.restored = guard.guard_test_infra(sandbox, instance)
    if run.restored:
        log.append(f"Guard: restored test infrastructure from the base commit: {run.restored}")
    sandbox.write_file("/eval.sh", spec.eval_script)
    result = sandbox.exec(
        "/bin/bash /eval.sh 2>&1", cwd=TESTBED, timeout=timeout, output_cap=64 * 2**20
    )
    run.output = result.stdout + result.stderr
    if result.timed_out:
        run.timed_out = True
        run.output += f"\n\nTimeout error: {timeout:g} seconds exceeded.\n{TESTS_TIMEOUT}\n"
        log.append(f"Test timed out after {timeout:g} seconds.")
    return run


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
        return Grade(iid, False, None, log_dir, empty_patch=True)
    spec = make_test_spec(instance)
    log: list[str] = []
    try:
        with client.create_sandbox(
            image_of(instance),
            network="none",
            timeout=timeout + 600,
            labels={"purpose": "swebench-grade", "task": iid[:63]},
            **sandbox_options(instance),
        ) as sb:
            run = _evaluate(sb, instance, spec, patch, log, timeout)
    except Exception as e:  # noqa: BLE001 - any failure of the grading environment is the verifier's
        (log_dir / LOG_INSTANCE).write_text("\n".join([*log, f"verifier failure: {e!r}"]) + "\n")
        raise VerifierError(f"{iid}: grading sandbox failed: {e}") from e
    (log_dir / LOG_INSTANCE).write_text("\n".join(log) + "\n")
    grade = Grade(
        iid,
        False,
        None,
        log_dir,
        applied=run.applied,
        timed_out=run.timed_out,
        guard_restored=run.restored,
    )
    if not run.applied:
        grade.infra_failure = apply_fault(run.apply_output)
        return grade
    (log_dir / "eval.sh").write_text(spec.eval_script)
    (log_dir / LOG_TEST_OUTPUT).write_text(run.output)
    if run.timed_out:
        return grade
    grade.report = get_eval_report(
        spec, pred, str(log_dir / LOG_TEST_OUTPUT), include_tests_status=True
    )
    (log_dir / LOG_REPORT).write_text(json.dumps(grade.report, indent=4))
    grade.resolved = bool(grade.report[iid]["resolved"])
    if not grade.resolved:
        grade.infra_failure = environment_fault(run.output)
    return grade


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
        run = _evaluate(sb, instance, spec, patch, [], timeout)
    if not run.applied:
        raise RuntimeError(f"{instance['instance_id']}: the patch does not apply")
    if fault := environment_fault(run.output):
        raise RuntimeError(f"{instance['instance_id']}: {fault}")
    return PARSER_REGISTRY[spec.log_parser](run.output, spec)


def regrade(instance: SweInstance, log_dir: str | Path) -> dict[str, Any]:
    """swebench's own verdict on a written log directory, for checking Pomona's."""
    from swebench.harness.constants import LOG_TEST_OUTPUT
    from swebench.harness.grading import get_eval_report
    from swebench.harness.utils import make_test_spec

    log_dir = Path(log_dir)
    pred = prediction(
        instance["instance_id"], log_dir.parent.name, (log_dir / "patch.diff").read_text()
    )
    return get_eval_report(make_test_spec(instance), pred, str(log_dir / LOG_TEST_OUTPUT), True)
