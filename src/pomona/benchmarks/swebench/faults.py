"""Environment faults: an eval that cannot run (command not found, test framework missing,
permission denied, git's "dubious ownership") is the environment's fault, not the patch's. The
grade carries it as `infra_failure` and the episode is a `verifier` failure, never a 0.
"""

from __future__ import annotations

import re

_NOT_RUNNABLE = re.compile(r"^.*(?:command not found|: not found|Permission denied).*$", re.M)
_NO_FRAMEWORK = re.compile(
    r"^.*(?:No module named '?pytest'?|pytest: (?:command )?not found).*$", re.M
)


def environment_fault(log: str) -> str | None:
    """Why an eval log shows the environment, not the patch, failing; None when it does not.

    Read only where a patch cannot plausibly be the cause: git refusing the repository, the test
    framework missing, the test command itself not runnable (exit 126/127), a failure before the
    tests start, no test phase at all, and swebench's own environment signatures."""
    from swebench.harness.constants import END_TEST_OUTPUT, START_TEST_OUTPUT, TEST_EXIT_CODE
    from swebench.harness.infra_failure import TIER_ENVIRONMENT, classify_text

    if "detected dubious ownership in repository" in log:
        return (
            "git refused /testbed as owned by another user (dubious ownership): the eval "
            "must run as the repository's owner"
        )
    setup, started, rest = log.partition(START_TEST_OUTPUT)
    if not started:
        return "the eval script never reached its tests (no start marker in the log)"
    tests = rest.partition(END_TEST_OUTPUT)[0]
    if m := _NO_FRAMEWORK.search(tests):
        return f"the test framework is missing: {m.group(0).strip()}"
    code = re.search(rf"{re.escape(TEST_EXIT_CODE)}: (\d+)", rest)
    if code and code.group(1) in ("126", "127"):
        lines = _NOT_RUNNABLE.findall(tests)
        why = lines[-1].strip() if lines else "no reason printed"
        return f"the test command could not run (exit {code.group(1)}): {why}"
    if m := _NOT_RUNNABLE.search(setup):
        return f"the eval script's set-up failed before the tests: {m.group(0).strip()}"
    found = classify_text(log)
    if found and found[1] == TIER_ENVIRONMENT:
        return f"environment failure ({found[0]}), by swebench's own log signatures"
    return None


def apply_fault(output: str) -> str | None:
    """Why applying a patch failed for reasons of the environment (not of the patch)."""
    if "detected dubious ownership" in output:
        return "git refused /testbed as owned by another user (dubious ownership)"
    if m := re.search(r"^.*(?:Permission denied|Read-only file system).*$", output, re.M):
        return f"the patch could not be written: {m.group(0).strip()}"
    return None
