"""`MemoryRuntime`: a test double of the Runtime contract, kept in memory (as httpx's
`MockTransport` stands in for the network).

Nothing here isolates or runs anything. A sandbox is a dict of files, and every command is
answered by a handler the test gives: an async function of a `Command` that writes output and
returns the exit code. It lets the service, the coordinator and the SDK be tested in
milliseconds and without root where what is tested is their own behaviour; each real runtime
proves its behaviour in tests/conformance.

    async def echo(command: Command) -> int:
        await command.write(command.text.removeprefix("echo ") + "\\n")
        return 0

    async with AsyncSandboxClient(MemoryRuntime(echo)) as client: ...

What it keeps of the contract: ids, specs and labels; exec through the semantics every runtime
shares (runtimes/execution.py: stdin, output caps, a timeout that kills the command, here by
cancelling its handler, exit -9); one process's commands on a terminal (`open_pty`); the files
API with the errors real runtimes raise; snapshot and fork as copies of the files; a sandbox
whose init died (`MemorySandbox.fail`). What it does not model: processes, users, permissions,
symlinks, limits, images (any name is accepted) and the network (every port refuses).
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import io
import posixpath
import shlex
import signal
import tarfile
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal

from pomona.errors import (
    FileNotFoundInSandbox,
    InvalidRequest,
    PathOutsideSandbox,
    SandboxConflict,
    SandboxNotFound,
    SnapshotNotFound,
)
from pomona.orchestrator.runtimes import execution
from pomona.orchestrator.types import (
    SANDBOX_HOME,
    ExecChunk,
    ExecRequest,
    ExecResult,
    FileInfo,
    SandboxInfo,
    SandboxSpec,
    SandboxStatus,
    SnapshotInfo,
    StreamName,
)

Handler = Callable[["Command"], Awaitable[int]]


@dataclass
class Node:
    """A file or a directory of a memory sandbox."""

    type: Literal["file", "directory"]
    data: bytes = b""
    mode: int = 0o644
    modified: float = field(default_factory=time.time)


@dataclass
class MemorySandbox:
    id: str
    spec: SandboxSpec
    created_at: float
    snapshot: str | None = None
    files: dict[str, Node] = field(default_factory=lambda: {"/": Node("directory", mode=0o755)})
    commands: list[ExecRequest] = field(default_factory=list)  # every command run, in order
    failed: str | None = None

    def fail(self, reason: str = "its init process died") -> None:
        """Make the sandbox fail as when its init dies: listed as failed, exec refused."""
        self.failed = reason

    def info(self, runtime: str) -> SandboxInfo:
        status: SandboxStatus = "failed" if self.failed else "ready"
        message = f"the sandbox: {self.failed}" if self.failed else None
        return SandboxInfo(
            id=self.id,
            runtime=runtime,
            status=status,
            spec=self.spec,
            created_at=self.created_at,
            snapshot=self.snapshot,
            message=message,
        )

    # -- files (paths come absolute and normalized, as the service passes them) ----------------

    def node(self, path: str) -> Node:
        if (found := self.files.get(path)) is None:
            raise FileNotFoundInSandbox(f"{path}: no such file or directory in the sandbox")
        return found

    def directory(self, path: str) -> Node:
        found = self.node(path)
        if found.type != "directory":
            raise InvalidRequest(f"a component of {path} is not a directory")
        return found

    def mkdirs(self, path: str) -> None:
        parts = [p for p in path.split("/") if p]
        for i in range(1, len(parts) + 1):
            here = "/" + "/".join(parts[:i])
            if here not in self.files:
                self.files[here] = Node("directory", mode=0o755)
            else:
                self.directory(here)

    def write(self, path: str, data: bytes, mode: int = 0o644) -> None:
        if path == "/" or self.files.get(path, Node("file")).type == "directory":
            raise InvalidRequest(f"{path} is a directory")
        self.mkdirs(posixpath.dirname(path))
        self.files[path] = Node("file", data, mode & 0o7777)

    def children(self, path: str) -> builtins.list[str]:
        prefix = path.rstrip("/") + "/"
        return sorted(
            p
            for p in self.files
            if p.startswith(prefix) and "/" not in p[len(prefix) :] and p != "/"
        )

    def below(self, path: str) -> builtins.list[str]:
        prefix = path.rstrip("/") + "/"
        return sorted(p for p in self.files if p.startswith(prefix) and p != "/")

    def file_info(self, path: str) -> FileInfo:
        found = self.node(path)
        return FileInfo(
            name=posixpath.basename(path) or "/",
            path=path,
            type=found.type,
            size=len(found.data),
            mode=found.mode,
            modified=found.modified,
        )


@dataclass
class Command:
    """One command as its handler sees it: what was asked, in which sandbox, its stdin, and
    where its output goes."""

    sandbox: MemorySandbox
    request: ExecRequest
    stdin: asyncio.StreamReader
    output: asyncio.Queue[execution.Output]
    terminal: tuple[int, int] | None = None  # rows, cols on a terminal (open_pty)

    @property
    def text(self) -> str:
        """The command as one string (an argv list shell-quoted), handy to match on."""
        command = self.request.command
        return command if isinstance(command, str) else shlex.join(command)

    async def write(self, data: str | bytes, stream: StreamName = "stdout") -> None:
        """Output of the command; on a terminal stdout and stderr are one stream, as on a tty."""
        raw = data.encode() if isinstance(data, str) else data
        if raw:
            await self.output.put(("stdout" if self.terminal else stream, raw))


async def unanswered(command: Command) -> int:
    """The handler of a runtime given none: every command fails, saying why."""
    await command.write(f"memory runtime: no handler answers {command.text!r}\n", "stderr")
    return 127


class _Running:
    """A handler at work, seen as the `execution.Command` every runtime adapts its process to."""

    def __init__(self, handler: Handler, command: Command):
        self.command = command
        self.queue = command.output
        self.task = asyncio.create_task(self._run(handler))

    async def _run(self, handler: Handler) -> int:
        try:
            return await handler(self.command)
        finally:
            self.queue.put_nowait(execution.END)

    async def wait(self) -> int:
        await asyncio.wait({self.task})  # never cancels the handler itself
        return -signal.SIGKILL if self.task.cancelled() else self.task.result()

    async def kill(self) -> None:
        self.task.cancel()

    async def feed_stdin(self, data: bytes) -> None:
        self.command.stdin.feed_data(data)
        self.command.stdin.feed_eof()

    async def close(self) -> None:
        self.task.cancel()


class MemoryPty:
    """A terminal over a handler: what is written is its stdin, what it writes is the output."""

    def __init__(self, running: _Running):
        self._running = running
        self._signal: int | None = None

    async def read(self, timeout: float | None = None) -> bytes:
        try:
            async with asyncio.timeout(timeout):
                _, data = await self._running.queue.get()
        except TimeoutError:
            return b""
        if data is None:
            self._running.queue.put_nowait(execution.END)  # the end stays the end
            return b""
        return data

    async def write(self, data: bytes) -> None:
        self._running.command.stdin.feed_data(data)

    async def resize(self, rows: int, cols: int) -> None:
        self._running.command.terminal = (rows, cols)

    async def signal(self, signum: int) -> None:
        self._signal = signum
        self._running.task.cancel()

    async def wait(self, timeout: float | None = None) -> int | None:
        done, _ = await asyncio.wait({self._running.task}, timeout=timeout)
        if not done:
            return None
        if self._running.task.cancelled():
            return -(self._signal or signal.SIGKILL)
        return self._running.task.result()

    async def close(self) -> None:
        await self._running.close()


class MemoryRuntime:
    """The Runtime contract in memory, its commands answered by `handler` (see the module)."""

    def __init__(self, handler: Handler = unanswered, name: str = "memory"):
        self.handler, self.name = handler, name
        self.sandboxes: dict[str, MemorySandbox] = {}
        self.snapshots: dict[str, tuple[SnapshotInfo, dict[str, Node]]] = {}

    async def start(self) -> None:
        """Nothing outlives a process here, so there is nothing to adopt."""

    async def close(self) -> None: ...

    async def create(
        self, sandbox_id: str, spec: SandboxSpec, snapshot: SnapshotInfo | None = None
    ) -> SandboxInfo:
        if sandbox_id in self.sandboxes:
            raise SandboxConflict(f"sandbox {sandbox_id!r} already exists")
        sandbox = MemorySandbox(sandbox_id, spec, time.time())
        if snapshot is not None:
            if snapshot.id not in self.snapshots:
                raise SnapshotNotFound.of(snapshot.id)
            sandbox.snapshot = snapshot.id
            sandbox.files = _copy(self.snapshots[snapshot.id][1])
        sandbox.mkdirs(spec.workdir)
        sandbox.mkdirs(SANDBOX_HOME)
        self.sandboxes[sandbox_id] = sandbox
        return sandbox.info(self.name)

    async def delete(self, sandbox_id: str) -> bool:
        return self.sandboxes.pop(sandbox_id, None) is not None

    async def list(self) -> builtins.list[SandboxInfo]:
        return [s.info(self.name) for s in self.sandboxes.values()]

    async def get(self, sandbox_id: str) -> SandboxInfo | None:
        found = self.sandboxes.get(sandbox_id)
        return None if found is None else found.info(self.name)

    def sandbox(self, sandbox_id: str) -> MemorySandbox:
        """A live sandbox (SandboxNotFound, or SandboxConflict once it failed)."""
        if (found := self.sandboxes.get(sandbox_id)) is None:
            raise SandboxNotFound.of(sandbox_id)
        if found.failed:
            raise SandboxConflict(f"sandbox {sandbox_id!r} has failed ({found.failed}); delete it")
        return found

    def _start(
        self, sandbox_id: str, request: ExecRequest, terminal: tuple[int, int] | None = None
    ) -> _Running:
        sandbox = self.sandbox(sandbox_id)
        sandbox.commands.append(request)
        stdin = asyncio.StreamReader()
        if request.stdin is None and terminal is None:
            stdin.feed_eof()
        return _Running(self.handler, Command(sandbox, request, stdin, asyncio.Queue(), terminal))

    async def exec(
        self, sandbox_id: str, request: ExecRequest
    ) -> AsyncGenerator[ExecChunk | ExecResult, None]:
        running = self._start(sandbox_id, request)
        stdin = request.stdin.encode() if request.stdin is not None else None
        async with contextlib.aclosing(
            execution.stream(running, stdin=stdin, timeout=request.timeout, cap=request.output_cap)
        ) as items:
            async for item in items:
                yield item

    async def open_pty(
        self, sandbox_id: str, request: ExecRequest, rows: int = 24, cols: int = 80
    ) -> MemoryPty:
        request = request.model_copy(update={"env": {**request.env, "TERM": "xterm-256color"}})
        return MemoryPty(self._start(sandbox_id, request, terminal=(rows, cols)))

    # -- files ----------------------------------------------------------------------------------

    async def read_file(self, sandbox_id: str, path: str) -> bytes:
        node = self.sandbox(sandbox_id).node(path)
        if node.type == "directory":
            raise InvalidRequest(f"{path} is a directory")
        return node.data

    async def write_file(self, sandbox_id: str, path: str, data: bytes, mode: int = 0o644) -> None:
        self.sandbox(sandbox_id).write(path, data, mode)

    async def list_files(self, sandbox_id: str, path: str) -> builtins.list[FileInfo]:
        sandbox = self.sandbox(sandbox_id)
        sandbox.directory(path)
        return [sandbox.file_info(p) for p in sandbox.children(path)]

    async def stat(self, sandbox_id: str, path: str) -> FileInfo:
        return self.sandbox(sandbox_id).file_info(path)

    async def remove(self, sandbox_id: str, path: str, recursive: bool = False) -> None:
        sandbox = self.sandbox(sandbox_id)
        if path == "/":
            raise InvalidRequest("refusing to remove the sandbox's root")
        node, below = sandbox.node(path), sandbox.below(path)
        if node.type == "directory" and below and not recursive:
            raise InvalidRequest(f"{path} is a non-empty directory; pass recursive=True")
        for p in [path, *below] if node.type == "directory" else [path]:
            del sandbox.files[p]

    async def get_archive(self, sandbox_id: str, path: str) -> bytes:
        """A directory's entries under "./", a file under its base name (as the local runtime)."""
        sandbox = self.sandbox(sandbox_id)
        node = sandbox.node(path)
        members = (
            [(p, "./" + p[len(path.rstrip("/")) + 1 :]) for p in sandbox.below(path)]
            if node.type == "directory"
            else [(path, posixpath.basename(path))]
        )
        out = io.BytesIO()
        with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for source, name in members:
                item = sandbox.files[source]
                info = tarfile.TarInfo(name)
                info.mode, info.mtime = item.mode, int(item.modified)
                if item.type == "directory":
                    info.type = tarfile.DIRTYPE
                    tar.addfile(info)
                else:
                    info.size = len(item.data)
                    tar.addfile(info, io.BytesIO(item.data))
        return out.getvalue()

    async def put_archive(self, sandbox_id: str, path: str, tar: bytes) -> None:
        """Directories and regular files (hard links as copies); members may not leave `path`;
        links, devices and FIFOs are skipped (nothing here could hold them)."""
        sandbox = self.sandbox(sandbox_id)
        try:
            archive = tarfile.open(fileobj=io.BytesIO(tar), mode="r:*")
        except tarfile.TarError as e:
            raise InvalidRequest(f"not a tar archive: {e}") from None
        unpacked: dict[str, Node] = {}
        with archive:
            for member in archive:
                parts = [p for p in member.name.split("/") if p not in ("", ".")]
                if member.name.startswith("/") or ".." in parts:
                    raise PathOutsideSandbox(
                        f"archive member {member.name!r} points outside the target"
                    )
                target = posixpath.join(path, *parts)
                if member.isdir():
                    unpacked[target] = Node("directory", mode=member.mode & 0o7777)
                elif member.isfile() or member.islnk():
                    content = archive.extractfile(member)
                    unpacked[target] = Node(
                        "file", content.read() if content else b"", member.mode & 0o7777
                    )
        sandbox.mkdirs(path)
        for target, node in sorted(unpacked.items()):
            if node.type == "directory":
                sandbox.mkdirs(target)
            else:
                sandbox.write(target, node.data, node.mode)

    # -- snapshots ------------------------------------------------------------------------------

    async def snapshot(self, sandbox_id: str, snapshot_id: str) -> SnapshotInfo:
        sandbox = self.sandbox(sandbox_id)
        if snapshot_id in self.snapshots:
            raise SandboxConflict(f"snapshot {snapshot_id!r} already exists")
        info = SnapshotInfo(
            id=snapshot_id,
            sandbox_id=sandbox_id,
            runtime=self.name,
            spec=sandbox.spec,
            created_at=time.time(),
        )
        self.snapshots[snapshot_id] = (info, _copy(sandbox.files))
        return info

    async def delete_snapshot(self, snapshot_id: str) -> bool:
        if snapshot_id not in self.snapshots:
            return False
        if users := [s.id for s in self.sandboxes.values() if s.snapshot == snapshot_id]:
            raise SandboxConflict(
                f"snapshot {snapshot_id!r} is in use by {', '.join(users)}; delete those first"
            )
        del self.snapshots[snapshot_id]
        return True

    async def list_snapshots(self) -> builtins.list[SnapshotInfo]:
        return [info for info, _ in self.snapshots.values()]

    async def open_connection(
        self, sandbox_id: str, port: int
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        self.sandbox(sandbox_id)
        raise ConnectionRefusedError(
            f"nothing listens on port {port}: the memory runtime runs no servers"
        )


def _copy(files: dict[str, Node]) -> dict[str, Node]:
    return {p: Node(n.type, n.data, n.mode, n.modified) for p, n in files.items()}
