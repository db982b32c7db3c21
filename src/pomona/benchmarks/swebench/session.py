"""One verification in a fresh sandbox of the instance's pristine image: swebench's
`run_instance` step by step, with the witness in place before the patch arrives.

    1. /testbed at the base commit (a bundle cloned, or the image's own), checked readable;
    2. the witness installed and started, the pristine tree's ignored files listed;
    3. the patch (the agent's diff, nothing else of its sandbox) applied by swebench's
       `git apply` fallback chain, a clean tree between attempts;
    4. the tree's changes read: any reach into the testing (guard.spoofs) ends it here, `spoof`;
    5. /eval.sh (the row's eval script) run with stderr merged, under the witness's
       environment: the witness loaded by name, nothing autoloaded, no user site, git hooks off;
    6. the witness stopped and its record kept.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pomona.benchmarks.swebench import guard
from pomona.benchmarks.swebench.guard import _run
from pomona.benchmarks.swebench.instances import TESTBED, SweInstance, patch_files
from pomona.benchmarks.swebench.testbed import prepare_testbed
from pomona.benchmarks.verification import witness
from pomona.benchmarks.verification.spoof import Finding
from pomona.errors import EpisodeFailure
from pomona.orchestrator.sdk.client import Sandbox

PATCH_FILE = "/tmp/patch.diff"  # swebench's CONTAINER_PATCH_FILE
EVAL_COMMAND = "/bin/bash /eval.sh 2>&1"


class TestbedMissing(EpisodeFailure):
    """/testbed is not there, or not a readable git work tree: the environment's fault."""

    kind = "sandbox"


@dataclass
class Session:
    """What one verification sandbox did."""

    output: str = ""  # the test log ("" when the tests never ran)
    applied: bool = False
    apply_output: str = ""
    timed_out: bool = False
    spoof: list[Finding] = field(default_factory=list)
    installed: witness.Installed | None = None
    records: list[dict[str, Any]] = field(default_factory=list)
    environment: dict[str, str] = field(default_factory=dict)  # the eval's variables


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


def check_testbed(sandbox: Sandbox) -> None:
    result = sandbox.exec(
        f"test -d {TESTBED} && git -C {TESTBED} rev-parse --verify -q HEAD", timeout=60
    )
    if result.exit_code != 0:
        why = (result.stderr or result.stdout).strip()[-300:]
        raise TestbedMissing(
            f"{TESTBED} is missing or unreadable in the image{': ' + why if why else ''}"
        )


def _into_git(patch: str) -> list[Finding]:
    """Paths the patch text sends into .git: refused before anything touches the tree (git
    would refuse them, `patch` would not, and the tree's git config then runs commands)."""
    return [
        Finding(p, "git's own files (hooks, configuration)")
        for p in patch_files(patch)
        if ".git" in p.split("/")
    ]


def evaluate(
    sandbox: Sandbox,
    instance: SweInstance,
    spec: Any,
    patch: str | None,
    log: list[str],
    timeout: float,
) -> Session:
    """Verify `patch` (None: the base itself) in `sandbox`, fresh from the instance's image."""
    from swebench.harness.constants import TESTS_TIMEOUT

    prepare_testbed(sandbox, instance)
    check_testbed(sandbox)
    run = Session(applied=True)
    before = guard.ignored(sandbox)
    run.installed = witness.install(sandbox, [TESTBED], guard.conftests(sandbox))
    if patch is not None:
        run.spoof = _into_git(patch)
        if run.spoof:
            return run
        run.applied, run.apply_output = _apply_chain(sandbox, patch, log)
        if not run.applied:
            return run
        run.spoof = guard.spoofs(sandbox, instance, patch, before)
        if run.spoof:
            log.append(f"Spoof: {[f.to_dict() for f in run.spoof]}")
            return run
    sandbox.write_file("/eval.sh", spec.eval_script)
    run.environment = run.installed.environment()
    result = sandbox.exec(
        EVAL_COMMAND, cwd=TESTBED, timeout=timeout, output_cap=64 * 2**20, env=run.environment
    )
    run.records = witness.collect(sandbox)
    run.output = result.stdout + result.stderr
    if result.timed_out:
        run.timed_out = True
        run.output += f"\n\nTimeout error: {timeout:g} seconds exceeded.\n{TESTS_TIMEOUT}\n"
        log.append(f"Test timed out after {timeout:g} seconds.")
    return run
