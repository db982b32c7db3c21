"""The test-infrastructure guard: between applying the patch and running the tests, every
test-infrastructure path the patch touched (conftest.py, pytest configuration, sitecustomize,
*.pth, the task's test files) is restored from the base commit. Without it a six-line
conftest.py that forces every outcome to "passed" is graded resolved.
"""

from __future__ import annotations

import configparser
import shlex
import tomllib
from pathlib import PurePosixPath
from typing import Any

from pomona.benchmarks.swebench.instances import TESTBED, SweInstance, base_ref, patch_files
from pomona.benchmarks.task import VerifierError
from pomona.orchestrator.sdk.client import Sandbox
from pomona.orchestrator.types import ExecResult

INFRA_NAMES = {
    "conftest.py",
    "pytest.ini",
    ".pytest.ini",
    "tox.ini",
    "sitecustomize.py",
    "usercustomize.py",
}
SECTION_FILES = {"setup.cfg", "pyproject.toml"}  # guarded only where their pytest section changed


def is_infra(path: str, test_files: set[str]) -> bool:
    name = PurePosixPath(path).name
    return (
        path in test_files or name in INFRA_NAMES or name.endswith(".pth") or name in SECTION_FILES
    )


def pytest_section(name: str, text: str | None) -> Any:
    """The pytest configuration a setup.cfg or pyproject.toml holds; unreadable text is its own
    value, so breaking the file counts as changing it."""
    if text is None:
        return None
    try:
        if name == "pyproject.toml":
            return tomllib.loads(text).get("tool", {}).get("pytest")
        parser = configparser.ConfigParser(interpolation=None)
        parser.read_string(text)
        return {s: dict(parser[s]) for s in ("tool:pytest", "pytest") if parser.has_section(s)}
    except (tomllib.TOMLDecodeError, configparser.Error):
        return ("unreadable", text)


def _run(sandbox: Sandbox, command: str, timeout: float = 120) -> ExecResult:
    return sandbox.exec(command, cwd=TESTBED, timeout=timeout)


def guard_test_infra(sandbox: Sandbox, instance: SweInstance) -> list[str]:
    """Restore every test-infrastructure path the patch changed, added or deleted to its state at
    the base commit; return those paths. Judged on the tree, not on the patch text, so renames,
    `patch` fuzz and ignored directories cannot slip past."""
    base = shlex.quote(base_ref(instance))
    listed = _run(sandbox, f"git diff --name-only --no-renames {base} && git ls-files --others")
    if listed.exit_code != 0:
        raise VerifierError(f"could not list the changed files: {listed.stderr.strip()}")
    test_files = set(patch_files(instance.get("test_patch") or ""))
    restored = []
    for path in sorted(set(listed.stdout.split())):
        if not is_infra(path, test_files):
            continue
        q = shlex.quote(path)
        at_base = _run(sandbox, f"git show {base}:{q}")
        old = at_base.stdout if at_base.exit_code == 0 else None
        name = PurePosixPath(path).name
        if name in SECTION_FILES and path not in test_files:
            now = _run(sandbox, f"cat -- {q}")
            new = now.stdout if now.exit_code == 0 else None
            if pytest_section(name, old) == pytest_section(name, new):
                continue
        fix = f"git checkout {base} -- {q}" if old is not None else f"rm -f -- {q}"
        if _run(sandbox, fix).exit_code != 0:
            raise VerifierError(f"could not restore {path} from the base commit")
        restored.append(path)
    return restored
