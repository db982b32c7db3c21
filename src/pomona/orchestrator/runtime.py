"""The Runtime contract: what a sandbox backend must do (one module or package per backend in
runtimes/), and the optional capabilities a backend may add, each its own Protocol.

A runtime does mechanics only (start, exec, files, layers). Everything shared — idempotent
create, TTLs, output collection, apply_patch, listing by label — lives once in service.py.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
from collections.abc import AsyncGenerator
from typing import Protocol, runtime_checkable

from pomona.errors import SandboxFailed
from pomona.orchestrator.types import (
    ExecChunk,
    ExecRequest,
    ExecResult,
    FileInfo,
    Limits,
    SandboxInfo,
    SandboxSpec,
    SnapshotInfo,
)


class Pty(Protocol):
    """An interactive process on a pseudo-terminal (stdout and stderr merged, as on a terminal)."""

    async def read(self, timeout: float | None = None) -> bytes:
        """Up to 64 KiB of output; b"" at end of output (or when timeout passes with none)."""

    async def write(self, data: bytes) -> None: ...

    async def resize(self, rows: int, cols: int) -> None: ...

    async def signal(self, signum: int) -> None:
        """Send a signal to the terminal's whole process group."""

    async def wait(self, timeout: float | None = None) -> int | None:
        """The exit code (-N when killed by signal N), or None if still running at timeout."""

    async def close(self) -> None:
        """SIGKILL the process group if it still runs and release the terminal."""


@runtime_checkable
class Runtime(Protocol):
    name: str

    async def start(self) -> None:
        """Find the sandboxes a previous process left behind; adopt live ones, remove the rest."""

    async def close(self) -> None:
        """Release in-process resources. Sandboxes keep running; delete them explicitly."""

    async def create(
        self, sandbox_id: str, spec: SandboxSpec, snapshot: SnapshotInfo | None = None
    ) -> SandboxInfo: ...

    async def delete(self, sandbox_id: str) -> bool:
        """Remove everything the sandbox holds; False if it did not exist."""

    async def list(self) -> list[SandboxInfo]: ...

    async def get(self, sandbox_id: str) -> SandboxInfo | None:
        """One sandbox as list() shows it, or None: what every request on a sandbox looks up,
        without listing them all (a listing per request is quadratic in a burst)."""

    def exec(
        self, sandbox_id: str, request: ExecRequest
    ) -> AsyncGenerator[ExecChunk | ExecResult, None]:
        """Stream output as it is produced; the last item is the ExecResult."""

    async def open_pty(self, sandbox_id: str, request: ExecRequest, rows: int, cols: int) -> Pty:
        """Start request.command on a new terminal of rows x cols; TERM=xterm-256color."""

    async def read_file(self, sandbox_id: str, path: str) -> bytes: ...

    async def write_file(
        self, sandbox_id: str, path: str, data: bytes, mode: int = 0o644
    ) -> None: ...

    async def list_files(self, sandbox_id: str, path: str) -> builtins.list[FileInfo]: ...

    async def stat(self, sandbox_id: str, path: str) -> FileInfo: ...

    async def remove(self, sandbox_id: str, path: str, recursive: bool = False) -> None: ...

    async def get_archive(self, sandbox_id: str, path: str) -> bytes:
        """The directory (or file) at path as an uncompressed tar."""

    async def put_archive(self, sandbox_id: str, path: str, tar: bytes) -> None:
        """Unpack a tar into the directory at path (created if missing)."""

    async def snapshot(self, sandbox_id: str, snapshot_id: str) -> SnapshotInfo: ...

    async def delete_snapshot(self, snapshot_id: str) -> bool: ...

    async def list_snapshots(self) -> builtins.list[SnapshotInfo]: ...

    async def open_connection(
        self, sandbox_id: str, port: int
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A TCP connection to 127.0.0.1:port inside the sandbox's network namespace."""


@runtime_checkable
class Refreshable(Protocol):
    """A capability: a runtime whose sandboxes other processes on the same state may create and
    delete (service replicas sharing a state dir or a cluster). Without it a runtime's own list
    is the truth, and only one process may serve its state."""

    async def refresh(self, sandbox_id: str) -> bool:
        """Re-read one sandbox from the shared state into this process's view; False if it is
        gone. Never touches the sandbox itself."""


@runtime_checkable
class LimitDefaults(Protocol):
    """A capability: a runtime that says which of the service's default limits it can give
    every sandbox (after start()). Without it, every default but the disk limit applies: a disk
    limit for every sandbox needs a cap that is cheap to set, which a runtime must declare."""

    def limit_defaults(self, defaults: Limits) -> Limits:
        """`defaults`, without what this runtime, on this machine, cannot enforce for all."""


async def collect(stream: AsyncGenerator[ExecChunk | ExecResult, None]) -> ExecResult:
    """Drain a streamed exec into one result (the runtime already applied the caps); the stream
    is closed on the way out, so what it holds (the exec lock, the process) goes at once."""
    async with contextlib.aclosing(stream):
        async for item in stream:
            if isinstance(item, ExecResult):
                return item
    raise SandboxFailed("exec stream ended without a result")
