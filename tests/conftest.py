"""Shared test fixtures: machine checks, and a session-end check that this test session left
nothing of its own behind.

Every temporary directory of the session (and so every state directory a test makes with
`tempfile`) lives under one directory named after the session's id, and subprocesses inherit the
id and that directory (POMONA_TEST_SESSION, TMPDIR). What the session owns is then found by that
name alone, so tests other people run on the same machine at the same time are never counted:
processes, mounts, loop devices, cgroups (named after their state directory) and containers
(labelled with a hash of it).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

# Under pytest-xdist each worker is a session of its own (the run's id plus the worker's name), so
# a worker's end-of-session check counts only what it made, and it removes only its own directory
# while the others still run. A worker's directory sits beside the run's, not inside it (sockets
# made under it must keep short paths). A session id given from outside is kept as it is.
SESSION = os.environ.setdefault("POMONA_TEST_SESSION", secrets.token_hex(4))
TMP_ROOT = os.environ.setdefault("POMONA_TEST_TMP_ROOT", tempfile.gettempdir())
WORKER = os.environ.get("PYTEST_XDIST_WORKER")
if WORKER and not SESSION.endswith(f"-{WORKER}"):
    SESSION = os.environ["POMONA_TEST_SESSION"] = f"{SESSION}-{WORKER}"
SESSION_TMP = Path(TMP_ROOT) / f"pomona-test-{SESSION}"
SESSION_TMP.mkdir(mode=0o700, exist_ok=True)
os.environ["TMPDIR"] = tempfile.tempdir = str(SESSION_TMP)


def docker_available() -> bool:
    if not shutil.which("docker"):
        return False
    return subprocess.run(["docker", "info"], capture_output=True).returncode == 0


@pytest.fixture(scope="module", autouse=True)
def no_event_loop_left_running(request: pytest.FixtureRequest) -> Iterator[None]:
    """A module must not leave an asyncio loop running in the thread (sync Playwright left
    started, a BrowserEnv not closed): every later test in the process that runs a loop of its
    own would fail, far from the cause, in whatever order the files reach this worker."""
    yield
    if asyncio._get_running_loop() is not None:
        asyncio.events._set_running_loop(None)
        pytest.fail(f"{request.module.__name__} left an asyncio event loop running in its thread")


# -- what this session left behind -------------------------------------------------------------


def _ours(text: str, roots: list[str]) -> bool:
    return any(root in text for root in roots)


def _processes(roots: list[str]) -> list[str]:
    mine = {os.getpid(), os.getppid()}
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        if int(pid) in mine:
            continue
        try:
            cmdline = (
                Path(f"/proc/{pid}/cmdline")
                .read_bytes()
                .replace(b"\0", b" ")
                .decode(errors="replace")
            )
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        if _ours(cmdline, roots) or f"POMONA_TEST_SESSION={SESSION}".encode() in environ.split(
            b"\0"
        ):
            found.append(f"process {pid}: {cmdline[:200]}")
    return found


def _mounts(roots: list[str]) -> list[str]:
    lines = Path("/proc/self/mountinfo").read_text().splitlines()
    return [f"mount {line.split()[4]}" for line in lines if _ours(line.split()[4], roots)]


def _loop_devices(roots: list[str]) -> list[str]:
    found = []
    for backing in Path("/sys/block").glob("loop*/loop/backing_file"):
        text = backing.read_text().strip()
        if _ours(text, roots):
            found.append(f"loop device {backing.parts[3]} -> {text}")
    return found


def _state_dirs(roots: list[str]) -> list[Path]:
    """Directories that may have been state dirs of this session (up to three levels down)."""
    found: list[Path] = []
    for root in map(Path, roots):
        if root.is_dir():
            found += [
                root,
                *(p for p in root.glob("*") if p.is_dir()),
                *(p for p in root.glob("*/*") if p.is_dir()),
                *(p for p in root.glob("*/*/*") if p.is_dir()),
            ]
    return found


def _cgroups(state_dirs: list[Path]) -> list[str]:
    groups = {"pomona-" + hashlib.sha256(str(d).encode()).hexdigest()[:10] for d in state_dirs}
    cgroup = Path("/sys/fs/cgroup")
    parents = (
        [cgroup]
        if (cgroup / "cgroup.controllers").exists()
        else [cgroup / c for c in ("memory", "pids", "cpu")]
    )
    return [f"cgroup {p / g}" for p in parents for g in groups if (p / g).exists()]


def _containers(state_dirs: list[Path]) -> list[str]:
    if not shutil.which("docker"):
        return []
    owners = {hashlib.sha256(f"pomona:{d}".encode()).hexdigest()[:16] for d in state_dirs}
    listed = subprocess.run(
        ["docker", "ps", "-a", "--format", '{{.Names}} {{.Label "pomona.owner"}}'],
        capture_output=True,
        text=True,
    )
    return [
        f"container {line.split()[0]}"
        for line in listed.stdout.splitlines()
        if len(line.split()) == 2 and line.split()[1] in owners
    ]


def leftovers(roots: list[str]) -> list[str]:
    """Everything of this session's still on the machine."""
    state_dirs = _state_dirs(roots)
    return [
        *_processes(roots),
        *_mounts(roots),
        *_loop_devices(roots),
        *_cgroups(state_dirs),
        *_containers(state_dirs),
    ]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    from pomona.orchestrator.linux.statedirs import registered

    roots = [str(SESSION_TMP), *(str(p) for p in registered() if SESSION in str(p))]
    factory = getattr(session.config, "_tmp_path_factory", None)
    if factory is not None and factory._basetemp is not None:
        roots.append(str(factory._basetemp))
    found = leftovers(roots)
    if found:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        text = "\n".join(["this test session left resources of its own behind:", *found])
        if reporter:
            reporter.write_line(text, red=True)
        else:
            print(text)
        return
    subprocess.run(["rm", "-rf", "--one-file-system", str(SESSION_TMP)], capture_output=True)
