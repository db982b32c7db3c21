"""The service layer: every sandbox operation, declared once (`Service`) and implemented once
over any runtime (`SandboxService`). The SDK's clients hold a `Service`: this in-process one, or
`sdk.remote.RemoteService`, the same operations over the REST API, which `pomona serve` answers
with a SandboxService of its own. Idempotent create, TTL with heartbeat, label listing, output
collection, apply_patch with fallbacks, snapshot and fork live here so every runtime behaves alike.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import os
import secrets
import time
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Protocol

from pomona.errors import (
    InvalidRequest,
    SandboxConflict,
    SandboxNotFound,
    SnapshotNotFound,
)
from pomona.orchestrator.linux.safefs import normalize
from pomona.orchestrator.runtime import LimitDefaults, Pty, Runtime, collect
from pomona.orchestrator.types import (
    DEFAULT_LIMITS,
    MAX_TTL,
    ExecChunk,
    ExecRequest,
    ExecResult,
    FileInfo,
    Limits,
    PatchResult,
    SandboxInfo,
    SandboxSpec,
    SnapshotInfo,
    check_id,
)

REAP_INTERVAL = 1.0
# Creates at once; more wait their turn. A burst of creates otherwise takes every thread the
# runtime works on, so deletes (and file operations) queue behind all of it and every sandbox
# of the burst is alive at once; the local runtime's creates cost more the more sandboxes live
# (each new mount namespace copies the host's mount table).
MAX_CREATES = 16
# (name, dry run, apply): SWE-bench's chain, minus `git apply --reject`, which can only succeed
# where plain `git apply` does and otherwise leaves half-applied hunks behind.
PATCH_STRATEGIES = (
    (
        "git apply",
        "git apply --check --whitespace=nowarn {p}",
        "git apply --verbose --whitespace=nowarn {p}",
    ),
    (
        "patch --fuzz=5",
        "patch --batch --fuzz=5 -p1 --dry-run -i {p}",
        "patch --batch --fuzz=5 -p1 --no-backup-if-mismatch -r - -i {p}",
    ),
)


def new_id(prefix: str = "sb") -> str:
    return f"{prefix}-{secrets.token_hex(6)}"


def _machine() -> tuple[int, int, int]:
    """(cores, bytes of memory, pid_max) of this machine."""
    try:
        pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    except (OSError, ValueError):
        pid_max = 4194304
    return os.cpu_count() or 1, os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"), pid_max


def check_capacity(limits: Limits) -> None:
    """A limit beyond what the machine has is a mistake (or a probe), not a request to honour."""
    cpus, memory, pid_max = _machine()
    for name, value, have, unit in (
        ("cpu", limits.cpu, cpus, "cores"),
        ("memory", limits.memory, memory, "bytes"),
        ("pids", limits.pids, pid_max, "processes"),
    ):
        if value is not None and value > have:
            raise InvalidRequest(
                f"limits.{name}={value:g} is more than this machine has ({have} {unit})"
            )


def machine_defaults(defaults: Limits, runtime: Runtime | None = None) -> Limits:
    """The defaults this machine and runtime can give every sandbox: no more CPU or memory than
    the machine has, and only what the runtime enforces for all (runtime.LimitDefaults; a disk
    limit only where the runtime declares it)."""
    cpus, memory, pid_max = _machine()
    capped = Limits.model_construct(
        cpu=None if defaults.cpu is None else min(defaults.cpu, cpus),
        memory=None if defaults.memory is None else min(defaults.memory, memory),
        pids=None if defaults.pids is None else min(defaults.pids, pid_max),
        disk=defaults.disk,
    )
    if isinstance(runtime, LimitDefaults):
        return runtime.limit_defaults(capped)
    return capped.model_copy(update={"disk": None})


def with_defaults(spec: SandboxSpec, limits: Limits, max_ttl: float) -> SandboxSpec:
    """The spec a sandbox is made from: each limit it leaves unset takes the default, and its
    TTL is at most `max_ttl` (which is what timeout=None stands for): none is immortal."""
    if spec.timeout is not None and spec.timeout > max_ttl:
        raise InvalidRequest(
            f"timeout={spec.timeout:g} s is over the maximum TTL of {max_ttl:g} s; ask for "
            "less (heartbeats extend a sandbox's life), or null for the maximum"
        )
    filled = {
        name: getattr(limits, name)
        for name in Limits.model_fields
        if getattr(spec.limits, name) is None and getattr(limits, name) is not None
    }
    if not filled and spec.timeout is not None:
        return spec
    return spec.model_copy(
        update={
            "limits": spec.limits.model_copy(update=filled),
            "timeout": max_ttl if spec.timeout is None else spec.timeout,
        }
    )


class Service(Protocol):
    """Every sandbox operation, whatever carries it: what AsyncSandboxClient and AsyncSandbox
    call. Nothing in it is optional; what only some runtimes can do is a capability of the
    runtime (runtime.py), not of the service."""

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def create(
        self, spec: SandboxSpec, sandbox_id: str | None = None, snapshot: SnapshotInfo | None = None
    ) -> SandboxInfo:
        """Create, or return the existing sandbox when the same id comes with the same spec."""

    async def get(self, sandbox_id: str) -> SandboxInfo: ...

    async def list(self, labels: dict[str, str] | None = None) -> builtins.list[SandboxInfo]: ...

    async def heartbeat(self, sandbox_id: str) -> SandboxInfo: ...

    async def delete(self, sandbox_id: str) -> bool:
        """Idempotent: deleting what is gone returns False."""

    async def reap(self) -> builtins.list[str]:
        """Delete every sandbox whose TTL ran out without a heartbeat; their ids."""

    def exec_stream(
        self, sandbox_id: str, request: ExecRequest
    ) -> AsyncGenerator[ExecChunk | ExecResult, None]:
        """Output as it is produced, then the ExecResult."""

    async def exec(self, sandbox_id: str, request: ExecRequest) -> ExecResult: ...

    async def open_pty(
        self, sandbox_id: str, request: ExecRequest, rows: int = 24, cols: int = 80
    ) -> Pty: ...

    async def read_file(self, sandbox_id: str, path: str) -> bytes: ...

    async def write_file(
        self, sandbox_id: str, path: str, data: bytes, mode: int = 0o644
    ) -> None: ...

    async def list_files(self, sandbox_id: str, path: str = ".") -> builtins.list[FileInfo]: ...

    async def stat(self, sandbox_id: str, path: str) -> FileInfo: ...

    async def remove(self, sandbox_id: str, path: str, recursive: bool = False) -> None: ...

    async def download_dir(self, sandbox_id: str, path: str = ".") -> bytes: ...

    async def upload_dir(self, sandbox_id: str, path: str, tar: bytes) -> None: ...

    async def apply_patch(
        self, sandbox_id: str, patch: str, cwd: str | None = None, timeout: float = 60
    ) -> PatchResult: ...

    async def snapshot(self, sandbox_id: str, snapshot_id: str | None = None) -> SnapshotInfo: ...

    async def fork(
        self,
        snapshot_id: str,
        k: int,
        labels: dict[str, str] | None = None,
        ids: builtins.list[str] | None = None,
    ) -> builtins.list[SandboxInfo]: ...

    async def list_snapshots(self) -> builtins.list[SnapshotInfo]: ...

    async def delete_snapshot(self, snapshot_id: str) -> bool: ...

    async def open_connection(
        self, sandbox_id: str, port: int
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]: ...


class SandboxService:
    """The Service in this process, over one runtime. `default_limits` are what a sandbox gets
    for each limit it does not set (Limits() for none), `max_ttl` the longest TTL."""

    def __init__(
        self,
        runtime: Runtime,
        reap_interval: float = REAP_INTERVAL,
        max_creates: int = MAX_CREATES,
        default_limits: Limits = DEFAULT_LIMITS,
        max_ttl: float = MAX_TTL,
    ):
        self.runtime = runtime
        self.reap_interval = reap_interval
        self._defaults, self.max_ttl = default_limits, max_ttl
        self.default_limits = machine_defaults(default_limits)
        self._create_slots = asyncio.Semaphore(max_creates)
        self._heartbeats: dict[str, float] = {}
        self._creating: dict[str, asyncio.Future[SandboxInfo]] = {}
        self._exec_locks: dict[str, asyncio.Lock] = {}
        self._reaper: asyncio.Task | None = None

    async def start(self) -> None:
        await self.runtime.start()
        self.default_limits = machine_defaults(self._defaults, self.runtime)
        now = time.time()
        for info in await self.runtime.list():
            self._heartbeats[info.id] = now  # adopted: its TTL counts from now
        self._reaper = asyncio.create_task(self._reap_forever())

    async def close(self) -> None:
        if self._reaper:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
        await self.runtime.close()

    # -- lifecycle ----------------------------------------------------------------------------

    async def create(
        self, spec: SandboxSpec, sandbox_id: str | None = None, snapshot: SnapshotInfo | None = None
    ) -> SandboxInfo:
        """Create, or return the existing sandbox when the same id comes with the same spec."""
        sandbox_id = check_id(sandbox_id) if sandbox_id else new_id()
        check_capacity(spec.limits)
        spec = self.resolve(spec)
        if pending := self._creating.get(sandbox_id):
            info = await asyncio.shield(pending)
            return self._same(info, spec)
        existing = await self._find(sandbox_id)
        if existing:
            return self._same(existing, spec)
        future: asyncio.Future[SandboxInfo] = asyncio.get_running_loop().create_future()
        self._creating[sandbox_id] = future
        try:
            async with self._create_slots:
                info = await self.runtime.create(sandbox_id, spec, snapshot)
            self._heartbeats[sandbox_id] = time.time()
            future.set_result(info)
            return self._with_expiry(info)
        except BaseException as e:
            future.set_exception(e)
            future.exception()  # mark retrieved
            raise
        finally:
            del self._creating[sandbox_id]

    def resolve(self, spec: SandboxSpec) -> SandboxSpec:
        """The spec with this service's defaults filled in (what is stored and compared)."""
        return with_defaults(spec, self.default_limits, self.max_ttl)

    @staticmethod
    def _same(info: SandboxInfo, spec: SandboxSpec) -> SandboxInfo:
        if info.spec != spec:
            raise SandboxConflict(
                f"sandbox {info.id!r} exists with a different spec; pick another id or delete it first"
            )
        return info

    async def _find(self, sandbox_id: str) -> SandboxInfo | None:
        info = await self.runtime.get(sandbox_id)
        return None if info is None else self._with_expiry(info)

    def _with_expiry(self, info: SandboxInfo) -> SandboxInfo:
        if info.spec.timeout is not None:
            beat = self._heartbeats.get(info.id, info.created_at)
            info.expires_at = max(beat, info.created_at) + info.spec.timeout
        return info

    async def get(self, sandbox_id: str) -> SandboxInfo:
        if info := await self._find(sandbox_id):
            return info
        raise SandboxNotFound.of(sandbox_id)

    async def list(self, labels: dict[str, str] | None = None) -> list[SandboxInfo]:
        labels = labels or {}
        return [
            self._with_expiry(i)
            for i in await self.runtime.list()
            if all(i.spec.labels.get(k) == v for k, v in labels.items())
        ]

    async def heartbeat(self, sandbox_id: str) -> SandboxInfo:
        info = await self.get(sandbox_id)
        self._heartbeats[sandbox_id] = time.time()
        return self._with_expiry(info)

    async def delete(self, sandbox_id: str) -> bool:
        """Idempotent: deleting what is gone returns False, never raises."""
        self._heartbeats.pop(sandbox_id, None)
        self._exec_locks.pop(sandbox_id, None)
        return await self.runtime.delete(sandbox_id)

    async def reap(self) -> builtins.list[str]:
        """Delete every sandbox whose TTL ran out without a heartbeat."""
        now, reaped = time.time(), []
        for info in await self.runtime.list():
            info = self._with_expiry(info)
            if info.expires_at is not None and info.expires_at <= now and info.status == "ready":
                await self.delete(info.id)
                reaped.append(info.id)
        return reaped

    async def _reap_forever(self) -> None:
        while True:
            await asyncio.sleep(self.reap_interval)
            with contextlib.suppress(Exception):
                await self.reap()

    # -- exec ---------------------------------------------------------------------------------

    async def exec_stream(
        self, sandbox_id: str, request: ExecRequest
    ) -> AsyncGenerator[ExecChunk | ExecResult, None]:
        """Stream one command; commands on one sandbox run one at a time, in arrival order."""
        lock = self._exec_locks.setdefault(sandbox_id, asyncio.Lock())
        async with lock, contextlib.aclosing(self.runtime.exec(sandbox_id, request)) as items:
            async for item in items:  # closed with this stream: a caller that stops kills it
                yield item

    async def exec(self, sandbox_id: str, request: ExecRequest) -> ExecResult:
        return await collect(self.exec_stream(sandbox_id, request))

    async def open_pty(
        self, sandbox_id: str, request: ExecRequest, rows: int = 24, cols: int = 80
    ) -> Pty:
        """An interactive terminal session; like Orchard's, it takes no exec lock and no timeout."""
        if not (0 < rows < 10000 and 0 < cols < 10000):
            raise InvalidRequest(f"terminal size {rows}x{cols} is out of range")
        await self.get(sandbox_id)
        return await self.runtime.open_pty(sandbox_id, request, rows, cols)

    # -- files --------------------------------------------------------------------------------

    async def _path(self, sandbox_id: str, path: str) -> str:
        info = await self.get(sandbox_id)
        return normalize(path, info.spec.workdir)

    async def read_file(self, sandbox_id: str, path: str) -> bytes:
        return await self.runtime.read_file(sandbox_id, await self._path(sandbox_id, path))

    async def write_file(self, sandbox_id: str, path: str, data: bytes, mode: int = 0o644) -> None:
        await self.runtime.write_file(sandbox_id, await self._path(sandbox_id, path), data, mode)

    async def list_files(self, sandbox_id: str, path: str = ".") -> builtins.list[FileInfo]:
        return await self.runtime.list_files(sandbox_id, await self._path(sandbox_id, path))

    async def stat(self, sandbox_id: str, path: str) -> FileInfo:
        return await self.runtime.stat(sandbox_id, await self._path(sandbox_id, path))

    async def remove(self, sandbox_id: str, path: str, recursive: bool = False) -> None:
        await self.runtime.remove(sandbox_id, await self._path(sandbox_id, path), recursive)

    async def download_dir(self, sandbox_id: str, path: str = ".") -> bytes:
        return await self.runtime.get_archive(sandbox_id, await self._path(sandbox_id, path))

    async def upload_dir(self, sandbox_id: str, path: str, tar: bytes) -> None:
        await self.runtime.put_archive(sandbox_id, await self._path(sandbox_id, path), tar)

    async def apply_patch(
        self, sandbox_id: str, patch: str, cwd: str | None = None, timeout: float = 60
    ) -> PatchResult:
        """Try each strategy as a dry run first and apply only one that fits whole, so a patch
        that fails leaves the tree exactly as it was; the report lists every attempt."""
        if not patch.strip():
            return PatchResult(success=False, error="the patch is empty")
        cwd = await self._path(sandbox_id, cwd or ".")
        patch_path = f"/tmp/.pomona-patch-{secrets.token_hex(4)}.diff"
        await self.runtime.write_file(sandbox_id, patch_path, patch.encode(), 0o644)
        attempts = []
        try:
            for name, check, apply in PATCH_STRATEGIES:
                dry = await self.exec(
                    sandbox_id,
                    ExecRequest(command=check.format(p=patch_path), cwd=cwd, timeout=timeout),
                )
                if dry.exit_code != 0:
                    attempts.append(
                        f"{name} (exit {dry.exit_code}): {(dry.stderr or dry.stdout).strip()}"
                    )
                    continue
                result = await self.exec(
                    sandbox_id,
                    ExecRequest(command=apply.format(p=patch_path), cwd=cwd, timeout=timeout),
                )
                if result.exit_code == 0:
                    return PatchResult(
                        success=True, method=name, stdout=result.stdout, stderr=result.stderr
                    )
                attempts.append(
                    f"{name} (exit {result.exit_code}): {(result.stderr or result.stdout).strip()}"
                )
        finally:
            with contextlib.suppress(Exception):
                await self.runtime.remove(sandbox_id, patch_path)
        report = "\n".join(attempts)
        return PatchResult(
            success=False, stderr=report, error="the patch did not apply:\n" + report
        )

    # -- snapshot and fork --------------------------------------------------------------------

    async def snapshot(self, sandbox_id: str, snapshot_id: str | None = None) -> SnapshotInfo:
        await self.get(sandbox_id)
        return await self.runtime.snapshot(
            sandbox_id, check_id(snapshot_id or new_id("snap"), "snapshot id")
        )

    async def fork(
        self,
        snapshot_id: str,
        k: int,
        labels: dict[str, str] | None = None,
        ids: builtins.list[str] | None = None,
    ) -> builtins.list[SandboxInfo]:
        """k independent sandboxes from one snapshot, created concurrently."""
        if k < 1:
            raise InvalidRequest("fork needs k >= 1")
        if ids is not None and len(ids) != k:
            raise InvalidRequest(f"fork got {len(ids)} ids for k={k}")
        snapshot = next(
            (s for s in await self.runtime.list_snapshots() if s.id == snapshot_id), None
        )
        if snapshot is None:
            raise SnapshotNotFound.of(snapshot_id)
        spec = snapshot.spec.model_copy(
            update={"labels": {**snapshot.spec.labels, **(labels or {})}}
        )
        ids = ids or [new_id() for _ in range(k)]
        results = await asyncio.gather(
            *(self.create(spec, i, snapshot) for i in ids), return_exceptions=True
        )
        failures = [r for r in results if isinstance(r, BaseException)]
        if failures:
            for r in results:
                if isinstance(r, SandboxInfo):
                    await self.delete(r.id)
            raise failures[0]
        return list(results)  # type: ignore[arg-type]

    async def list_snapshots(self) -> builtins.list[SnapshotInfo]:
        return await self.runtime.list_snapshots()

    async def delete_snapshot(self, snapshot_id: str) -> bool:
        return await self.runtime.delete_snapshot(snapshot_id)

    async def open_connection(
        self, sandbox_id: str, port: int
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if not 0 < port < 65536:
            raise InvalidRequest(f"port {port} is out of range")
        await self.get(sandbox_id)
        return await self.runtime.open_connection(sandbox_id, port)
