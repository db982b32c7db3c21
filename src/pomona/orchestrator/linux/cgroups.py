"""Per-sandbox cgroups with CPU, memory and pids limits, on cgroup v1 or v2.

A sandbox's cgroup is created before its first process and every exec joins it, so limits hold
for everything the sandbox runs.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from pathlib import Path

from pomona.orchestrator.types import Limits

ROOT = Path("/sys/fs/cgroup")
PERIOD_US = 100_000


def is_v2(root: Path = ROOT) -> bool:
    return (root / "cgroup.controllers").exists()


class Cgroup:
    """One sandbox's cgroup: a directory per v1 controller, or one directory on v2."""

    def __init__(self, name: str, group: str = "pomona", root: Path = ROOT, usable: bool = True):
        self.v2 = is_v2(root)
        if not usable:  # an ordinary user's runtime with no cgroup delegated to it: none at all
            self.dirs: dict[str, Path] = {}
        elif self.v2:
            self.dirs = {"unified": root / group / name}
        else:
            self.dirs = {
                c: root / c / group / name for c in ("memory", "pids", "cpu") if (root / c).is_dir()
            }

    @property
    def procs_files(self) -> list[str]:
        return [str(d / "cgroup.procs") for d in self.dirs.values()]

    @property
    def usable(self) -> bool:
        return bool(self.dirs)

    def create(self, limits: Limits) -> None:
        if not self.dirs:
            return
        if self.v2:
            parent = next(iter(self.dirs.values())).parent
            parent.mkdir(exist_ok=True)
            with contextlib.suppress(OSError):
                (parent.parent / "cgroup.subtree_control").write_text("+cpu +memory +pids")
            with contextlib.suppress(OSError):
                (parent / "cgroup.subtree_control").write_text("+cpu +memory +pids")
        for d in self.dirs.values():
            d.mkdir(parents=True, exist_ok=True)
        if limits.memory:
            if self.v2:
                self._write("unified", "memory.max", limits.memory)
                self._write("unified", "memory.swap.max", 0, optional=True)
            else:
                self._write("memory", "memory.limit_in_bytes", limits.memory)
                self._write("memory", "memory.memsw.limit_in_bytes", limits.memory, optional=True)
        if limits.pids:
            self._write("unified" if self.v2 else "pids", "pids.max", limits.pids)
        if limits.cpu:
            quota = int(limits.cpu * PERIOD_US)
            if self.v2:
                self._write("unified", "cpu.max", f"{quota} {PERIOD_US}")
            else:
                self._write("cpu", "cpu.cfs_period_us", PERIOD_US)
                self._write("cpu", "cpu.cfs_quota_us", quota)

    def _write(self, controller: str, name: str, value: object, optional: bool = False) -> None:
        try:
            (self.dirs[controller] / name).write_text(str(value))
        except (OSError, KeyError):
            if not optional:
                raise

    def join(self, pid: int) -> None:
        for procs in self.procs_files:
            with open(procs, "w") as f:
                f.write(str(pid))

    def pids(self) -> set[int]:
        found: set[int] = set()
        for procs in self.procs_files:
            with contextlib.suppress(OSError):
                found.update(int(p) for p in Path(procs).read_text().split())
        return found

    def memory_events(self) -> dict[str, int]:
        """OOM kills and the like, so a killed memory hog can be reported as such."""
        if self.v2:
            path = self.dirs["unified"] / "memory.events"
        else:
            path = self.dirs.get("memory", Path("/nonexistent")) / "memory.oom_control"
        with contextlib.suppress(OSError):
            return {k: int(v) for k, v in (line.split() for line in path.read_text().splitlines())}
        return {}

    def destroy(self, timeout: float = 5.0) -> None:
        """Kill anything left in the cgroup, then remove it."""
        deadline = time.monotonic() + timeout
        for d in self.dirs.values():
            while d.exists():
                try:
                    d.rmdir()
                except FileNotFoundError:
                    break
                except OSError:
                    for pid in self.pids():
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(pid, 9)
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.01)


def remove_group(group: str, root: Path = ROOT) -> None:
    """Remove a runtime's parent cgroup once none of its sandboxes is left (empty dirs only)."""
    parents = (
        [root / group] if is_v2(root) else [root / c / group for c in ("memory", "pids", "cpu")]
    )
    for parent in parents:
        with contextlib.suppress(OSError):  # missing, or still holds a sandbox: keep it
            parent.rmdir()


def preexec_joiner(procs_files: list[str]) -> Callable[[], None]:
    """A preexec_fn that moves the new child into the cgroup before it can fork anything."""
    encoded = [os.fsencode(p) for p in procs_files]

    def join() -> None:
        for path in encoded:
            fd = os.open(path, os.O_WRONLY)
            try:
                os.write(fd, b"0")
            finally:
                os.close(fd)

    return join
