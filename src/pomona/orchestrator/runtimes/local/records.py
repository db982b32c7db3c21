"""A local sandbox as the state store keeps it (Record) and as a process holds it (Live)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import signal
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path

from pomona.errors import SandboxConflict
from pomona.orchestrator.linux.cgroups import Cgroup
from pomona.orchestrator.linux.netns import Gateway
from pomona.orchestrator.linux.safefs import SandboxFS
from pomona.orchestrator.linux.syscalls import alive, exited, start_time
from pomona.orchestrator.types import SANDBOX_UID, SandboxInfo, SandboxSpec, SandboxStatus

ROOT_VIEW_FD = 3  # what the sandbox's init holds for the host (linux/init.c)
UPPER_FD = 4


@dataclass
class Record:
    """What survives the orchestrator: enough to adopt or remove the sandbox later."""

    id: str
    spec: dict
    created_at: float
    lowers: list[str]
    image_env: dict[str, str]
    status: SandboxStatus = "creating"
    owner_pid: int = 0
    owner_start: int = 0
    ids: int = 0  # the first host id of the sandbox's range (linux/idranges.py); 0: none yet
    init_pid: int = 0  # the sandbox's pid 1 (pomona-init), by its host pid
    init_start: int = 0
    shell: str = "/bin/sh"
    disk: bool = False  # its writable layer is an ext4 image of its own (limits.disk)
    snapshot: str | None = None
    message: str | None = None

    @functools.cached_property
    def sandbox_spec(self) -> SandboxSpec:
        """The spec, parsed once: every exec and every listing reads it."""
        return SandboxSpec.model_validate(self.spec)

    def info(self) -> SandboxInfo:
        return SandboxInfo(
            id=self.id,
            runtime="local",
            status=self.status,
            spec=self.sandbox_spec,
            created_at=self.created_at,
            snapshot=self.snapshot,
            message=self.message,
        )

    @classmethod
    def load(cls, directory: Path) -> Record:
        """The record in a sandbox's directory (ValueError, TypeError or OSError if there is
        none, or it is from an older layout that cannot be adopted)."""
        return cls(**json.loads((directory / "record.json").read_text()))

    def save(self, directory: Path) -> None:
        staged = directory / "record.json.tmp"
        staged.write_text(json.dumps(asdict(self)))
        staged.replace(directory / "record.json")


@dataclass
class Live:
    """A sandbox this process knows: its record and what it holds of it."""

    record: Record
    dir: Path
    cgroup: Cgroup
    process: subprocess.Popen | None = None  # pomona-init's parent, if this process started it
    gateway: Gateway | None = None
    building: asyncio.Future | None = None  # while create runs: a delete waits for it
    deleted: bool = False
    pidfd: int | None = None  # the init, held for the sandbox's life: never a bare pid

    @functools.cached_property
    def fs(self) -> SandboxFS:
        uid = 0 if self.record.spec.get("user") == "root" else SANDBOX_UID
        return SandboxFS(self.open_root_view, uid, uid, self.record.ids)

    def proc(self, name: str) -> str:
        """A path under the init's /proc entry (its namespaces, root, descriptors)."""
        return f"/proc/{self.record.init_pid}/{name}"

    def open_checked(self, name: str, flags: int = os.O_RDONLY) -> int:
        """Open something of the init's through /proc, then check through the pidfd that this
        very process still runs: a recycled pid can never lead into another sandbox."""
        try:
            fd = os.open(self.proc(name), flags | os.O_CLOEXEC)
        except (FileNotFoundError, ProcessLookupError):
            raise self.failed() from None
        if self.pidfd is None or exited(self.pidfd):
            os.close(fd)
            raise self.failed()
        return fd

    def open_root_view(self) -> int:
        return self.open_checked(f"fd/{ROOT_VIEW_FD}", os.O_PATH | os.O_DIRECTORY)

    def failed(self) -> SandboxConflict:
        return SandboxConflict(
            f"sandbox {self.record.id!r} has failed (its init process died); delete it"
        )

    def dead(self) -> str | None:
        """Why the sandbox cannot run commands any more, or None while it can."""
        if self.record.status != "ready":
            return None
        if self.pidfd is None or exited(self.pidfd):
            return "its init process died"
        return None

    def hold(self) -> bool:
        """Take a pidfd on the init, if that very process (pid and start time) runs."""
        try:
            pidfd = os.pidfd_open(self.record.init_pid)
        except OSError:
            return False
        if not alive(self.record.init_pid, self.record.init_start):
            os.close(pidfd)  # the pid was recycled before we held it: not our process
            return False
        self.release()
        self.pidfd = pidfd
        return True

    def release(self) -> None:
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None

    def note_init(self, pid: int) -> None:
        self.record.init_pid, self.record.init_start = pid, start_time(pid)

    def save(self) -> None:
        self.record.save(self.dir)

    def kill(self) -> None:
        """SIGKILL the init, if it still is that process: everything in its pid namespace dies
        with it, and its namespaces and mounts go with the last of them."""
        with contextlib.suppress(ProcessLookupError):
            if self.pidfd is not None:
                signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
            elif alive(self.record.init_pid, self.record.init_start):
                os.kill(self.record.init_pid, signal.SIGKILL)
