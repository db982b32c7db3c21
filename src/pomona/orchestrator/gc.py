"""`pomona gc`: release what a state directory holds that no live process owns.

A runtime holds a shared flock on its state directory's `lock` file while it runs. When gc gets
the lock exclusively, nobody uses the directory, so everything of it goes: sandbox processes
(found by the cgroups and the command lines that name the directory), mounts under it (deepest
first), the loop devices behind them, the runtime's cgroups, the host id ranges its sandboxes
held and the Docker containers labelled with it. When someone does use it, only sandboxes whose init and creator are both dead go.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from pomona.orchestrator.linux.cgroups import ROOT as CGROUP_ROOT
from pomona.orchestrator.linux.idranges import release_all
from pomona.orchestrator.linux.statedirs import registered
from pomona.orchestrator.linux.syscalls import (
    alive,
    processes_naming,
    unmount,
    wait_loops_released,
)


def _cgroup_dirs(root: Path) -> list[Path]:
    """The runtime's parent cgroups (one per v1 controller, or one on v2)."""
    group = "pomona-" + hashlib.sha256(str(root).encode()).hexdigest()[:10]
    if (CGROUP_ROOT / "cgroup.controllers").exists():
        return [CGROUP_ROOT / group]
    return [CGROUP_ROOT / c / group for c in ("memory", "pids", "cpu")]


def _kill_cgroups(parents: list[Path]) -> list[str]:
    released = []
    for parent in parents:
        if not parent.is_dir():
            continue
        for child in [p for p in parent.iterdir() if p.is_dir()]:
            with contextlib.suppress(OSError):
                for pid in (child / "cgroup.procs").read_text().split():
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(int(pid), signal.SIGKILL)
            released.append(f"cgroup {child}")
    return released


def _remove_cgroups(parents: list[Path], limit: float = 10.0) -> None:
    """A cgroup can go once its killed processes have left it: within moments, or later on a
    loaded machine, so each is retried for up to `limit` seconds."""
    deadline = time.monotonic() + limit
    for parent in parents:
        if parent.is_dir():
            for child in [p for p in parent.iterdir() if p.is_dir()]:
                while True:
                    try:
                        child.rmdir()
                        break
                    except FileNotFoundError:
                        break
                    except OSError:
                        if time.monotonic() > deadline:
                            break
                        time.sleep(0.01)
            with contextlib.suppress(OSError):
                parent.rmdir()


def _mounts_under(root: Path) -> list[str]:
    points = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    prefix = str(root) + "/"
    return sorted(
        {p for p in points if p.startswith(prefix)}, key=lambda p: p.count("/"), reverse=True
    )


def _containers(root: Path) -> list[str]:
    if not shutil.which("docker"):
        return []
    owner = hashlib.sha256(f"pomona:{root}".encode()).hexdigest()[:16]
    listed = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label=pomona.owner={owner}"],
        capture_output=True,
        text=True,
    )
    ids = listed.stdout.split()
    if ids:
        subprocess.run(["docker", "rm", "-f", *ids], capture_output=True)
    return [f"container {i}" for i in ids]


def _everything(root: Path) -> list[str]:
    """Nobody uses the state dir: release all of it."""
    released = _kill_cgroups(_cgroup_dirs(root))
    for pid in processes_naming(root):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
            released.append(f"process {pid}")
    for point in _mounts_under(root):
        with contextlib.suppress(OSError):
            unmount(point)
            released.append(f"mount {point}")
    # autoclear frees most, once the unmounts above have let go; one pinned by nothing now goes
    for device in wait_loops_released(str(root) + "/"):
        if subprocess.run(["losetup", "-d", device], capture_output=True).returncode == 0:
            released.append(f"loop device {device}")
    _remove_cgroups(_cgroup_dirs(root))
    released += [f"host id range {base}" for base in release_all(root)]
    released += _containers(root)
    return released


def _dead_sandboxes(root: Path) -> list[str]:
    """Someone uses the state dir: remove only sandboxes whose init and creator both died."""
    from pomona.orchestrator.runtimes.local import LocalRuntime
    from pomona.orchestrator.runtimes.local.build import teardown
    from pomona.orchestrator.runtimes.local.records import Record

    runtime = LocalRuntime(root)
    released = []
    for path in sorted((runtime.state / "sandboxes").glob("*/record.json")):
        try:
            record = Record.load(path.parent)
        except (OSError, ValueError, TypeError):
            continue
        if alive(record.init_pid, record.init_start) or alive(record.owner_pid, record.owner_start):
            continue
        teardown(runtime._live(record, path.parent), root)
        released.append(f"sandbox {path.parent.name}")
    return released


def collect(state_dir: str | os.PathLike) -> list[str]:
    """Release what the state dir holds that no live process owns; say what was released."""
    root = Path(state_dir).absolute()
    if not (root / "lock").exists() and not (root / "store.xfs").exists():
        return []
    fd = os.open(root / "lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return _dead_sandboxes(root)
        return _everything(root)
    finally:
        os.close(fd)


def add_gc_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser("gc", help="release what a state dir holds that no live process owns")
    p.add_argument(
        "--state-dir",
        action="append",
        metavar="D",
        help="a state dir (repeatable; default: /var/lib/pomona and every registered one)",
    )
    p.set_defaults(func=gc_command)
    return p


def gc_command(args: argparse.Namespace) -> int:
    dirs = args.state_dir or sorted({"/var/lib/pomona", *map(str, registered())})
    for state_dir in dirs:
        for line in collect(state_dir):
            print(f"{state_dir}: released {line}")
    return 0
