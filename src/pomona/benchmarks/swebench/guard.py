"""The patch's reach into its own testing, read from the verifier's tree.

After the patch is applied in the fresh sandbox, every path it changed, added or deleted is
listed from git (tracked and new files against the base, with a throwaway index so the tree's
own index is untouched), plus the ignored files it created (listed against the pristine tree,
taken before the patch) and every path its text names (which catches what `patch` may write
where git would not, such as .git/). `pomona.benchmarks.verification.spoof` then says which of
them reach into how the tests run; any one makes the verdict `spoof`. Judged on the tree, not on
the patch text alone, so renames, `patch` fuzz and ignored directories cannot slip past.
"""

from __future__ import annotations

import shlex
from pathlib import PurePosixPath

from pomona.benchmarks.swebench.instances import TESTBED, SweInstance, base_ref, patch_files
from pomona.benchmarks.task import VerifierError
from pomona.benchmarks.verification.spoof import (
    SECTION_FILES,
    Change,
    Finding,
    findings,
    test_files_of,
)
from pomona.orchestrator.sdk.client import Sandbox
from pomona.orchestrator.types import ExecResult

INDEX = "/tmp/pomona-verify.index"  # a scratch index: the tree's own stays as the patch left it
_IGNORED = "git ls-files -z --others --ignored --exclude-standard"


def _run(sandbox: Sandbox, command: str, timeout: float = 120) -> ExecResult:
    return sandbox.exec(command, cwd=TESTBED, timeout=timeout)


def _checked(sandbox: Sandbox, command: str, what: str) -> str:
    result = _run(sandbox, command)
    if result.exit_code != 0:
        raise VerifierError(f"could not {what}: {result.stderr.strip()[-500:]}")
    return result.stdout


def ignored(sandbox: Sandbox) -> set[str]:
    """The ignored files in the tree (build output and the like): taken before the patch, so
    the ignored files the patch creates are told apart."""
    return set(filter(None, _checked(sandbox, _IGNORED, "list ignored files").split("\0")))


def conftests(sandbox: Sandbox) -> list[str]:
    """The base tree's conftest.py files, as absolute paths (the witness allows their hooks)."""
    out = _checked(sandbox, "git ls-files -z -- '*conftest.py'", "list the conftest files")
    return [f"{TESTBED}/{p}" for p in out.split("\0") if p]


def _changed(sandbox: Sandbox, base: str) -> list[tuple[str, str, str]]:
    """(status, new mode, path) of every tracked or new (not ignored) path against `base`."""
    out = _checked(
        sandbox,
        f"export GIT_INDEX_FILE={INDEX}; git read-tree {base} && git add -A . && "
        f"git diff --cached --raw -z --no-renames {base}; status=$?; rm -f {INDEX}; exit $status",
        "list the changed files",
    )
    tokens = out.split("\0")
    entries = []
    for meta, path in zip(tokens[0::2], tokens[1::2], strict=False):
        fields = meta.lstrip(":").split()
        if len(fields) == 5 and path:
            entries.append((fields[4][0], fields[1], path))
    return entries


def _read(sandbox: Sandbox, command: str) -> str | None:
    result = _run(sandbox, command)
    return result.stdout if result.exit_code == 0 else None


def changes(sandbox: Sandbox, instance: SweInstance, patch: str, before: set[str]) -> list[Change]:
    """Every path the applied patch touched, with what the spoof rules read about it."""
    base = shlex.quote(base_ref(instance))
    listed = {path: (status, mode) for status, mode, path in _changed(sandbox, base)}
    for path in ignored(sandbox) - before:
        listed.setdefault(path, ("A", ""))
    for path in patch_files(patch):
        listed.setdefault(path, ("M", ""))
    out = []
    for path, (status, mode) in sorted(listed.items()):
        q = shlex.quote(path)
        target = _read(sandbox, f"readlink -- {q}") if mode == "120000" else None
        old = new = None
        if PurePosixPath(path).name in SECTION_FILES:
            old, new = _read(sandbox, f"git show {base}:{q}"), _read(sandbox, f"cat -- {q}")
        out.append(Change(path, status, target and target.strip(), old, new))
    return out


def packages(sandbox: Sandbox) -> set[str]:
    """Directories of the tree that are Python packages (hold an __init__.py)."""
    out = _run(sandbox, "git ls-files -z --cached --others --exclude-standard -- '*__init__.py'")
    return {str(PurePosixPath(p).parent) for p in out.stdout.split("\0") if p}


def spoofs(sandbox: Sandbox, instance: SweInstance, patch: str, before: set[str]) -> list[Finding]:
    """What in the applied patch reaches into how the task is tested."""
    touched = patch_files(instance.get("test_patch") or "")
    tests = test_files_of(touched, instance["FAIL_TO_PASS"] + instance["PASS_TO_PASS"])
    return findings(changes(sandbox, instance, patch, before), tests, packages(sandbox))
