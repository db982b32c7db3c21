"""The engine's exec API, streamed. An exec is started on a hijacked connection of our own
(asyncio, no threads), so output streams as produced, stdin is written and then half-closed, and
the engine's frames (an 8-byte header, then the payload) are demultiplexed here. A timeout kills
the exec's whole process group with killpg on the host pid the engine reports (engine execs are
session leaders), which never touches the container.

`EngineExec` is the docker runtime's execution.Command (runtimes/execution.py gives it the exec
semantics every runtime shares); `DockerPty` is a terminal exec; `attach` starts either.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
from collections.abc import Awaitable, Callable
from typing import Any

from pomona.errors import RuntimeUnavailable, SandboxFailed
from pomona.orchestrator.runtimes import execution
from pomona.orchestrator.types import StreamName


async def attach(
    base_url: str, api_version: str, exec_id: str, engine: str, tty: bool = False
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """POST /exec/{id}/start with Upgrade: tcp, read the HTTP head, keep the raw stream."""
    reader, writer = await _connect(base_url)
    body = b'{"Detach":false,"Tty":%s}' % (b"true" if tty else b"false")
    writer.write(
        f"POST /v{api_version}/exec/{exec_id}/start HTTP/1.1\r\nHost: docker\r\n"
        f"Content-Type: application/json\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n"
        f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    try:
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        if status >= 400:
            length = re.search(rb"(?i)content-length:\s*(\d+)", head)
            text = await (
                reader.readexactly(int(length.group(1))) if length else reader.read(65536)
            )
            raise SandboxFailed(
                f"{engine} exec start failed ({status}): {text.decode(errors='replace')}"
            )
    except BaseException:
        writer.close()
        raise
    return reader, writer


async def _connect(url: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    if url.startswith("unix://"):
        return await asyncio.open_unix_connection(url[len("unix://") :])
    match = re.match(r"(?:tcp|http)://([^:/]+)(?::(\d+))?", url)
    if not match:
        raise RuntimeUnavailable(f"exec streaming supports unix:// and tcp:// engines, not {url}")
    return await asyncio.open_connection(match.group(1), int(match.group(2) or 2375))


class EngineExec:
    """One engine exec on its hijacked connection: demultiplexed output, stdin, exit, kill."""

    def __init__(
        self,
        api: Any,
        exec_id: str,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        multiplexed: bool = True,
        signal_inside: Callable[[int], Awaitable[None]] | None = None,
    ):
        self.api, self.exec_id = api, exec_id
        self.signal_inside = signal_inside  # gVisor: the host pid is not the command's
        self.reader, self.writer = reader, writer
        # bounded: a slow consumer stops us reading the socket, so the engine stops too
        self.queue: asyncio.Queue[execution.Output] = asyncio.Queue(maxsize=execution.QUEUE_LIMIT)
        self.pid = 0
        self.killed = False
        self.demux = asyncio.create_task(self._demux() if multiplexed else asyncio.sleep(0))

    async def _demux(self) -> None:
        """Frames of an 8-byte header (stream, 0, 0, 0, big-endian size) and a payload."""
        names: dict[int, StreamName] = {1: "stdout", 2: "stderr", 3: "stderr"}
        try:
            with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError, OSError):
                while True:
                    header = await self.reader.readexactly(8)
                    size = int.from_bytes(header[4:8], "big")
                    payload = await self.reader.readexactly(size) if size else b""
                    if payload and header[0] in names:
                        await self.queue.put((names[header[0]], payload))
        finally:
            await self.queue.put(execution.END)

    async def feed_stdin(self, data: bytes) -> None:
        with contextlib.suppress(OSError, RuntimeError):
            if data:
                self.writer.write(data)
                await self.writer.drain()
            if self.writer.can_write_eof():
                self.writer.write_eof()  # half-close: the command reads EOF

    async def _inspect(self) -> dict:
        """The exec's state; an exec the engine forgot (its container ended: a command killed
        the sandbox's init, or a memory limit ended a gVisor sandbox whole) ended killed."""
        try:
            return await asyncio.to_thread(self.api.exec_inspect, self.exec_id)
        except Exception as e:
            if getattr(getattr(e, "response", None), "status_code", None) != 404:
                raise
            return {"Running": False, "ExitCode": 128 + signal.SIGKILL, "Pid": 0}

    async def _find_pid(self) -> int | None:
        """The exec's host pid once it runs; None if it already finished."""
        delay = 0.001
        for _ in range(2000):
            info = await self._inspect()
            if info.get("Running") and info.get("Pid"):
                self.pid = int(info["Pid"])
                return self.pid
            if not info.get("Running") and info.get("ExitCode") is not None:
                return None
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.05)
        return None

    async def wait(self) -> int:
        pid = self.pid or await self._find_pid()
        if pid:
            await execution.wait_pid_exit(pid)
        try:
            async with asyncio.timeout(30):  # the engine records the exit shortly after it
                code = await self._exit_code()
        except TimeoutError:
            return -1
        if self.killed and 128 < code < 160:
            return -(code - 128)  # killed by our signal: -N, as for a local process
        return code

    async def _exit_code(self) -> int:
        delay = 0.001
        while True:
            info = await self._inspect()
            if not info.get("Running") and info.get("ExitCode") is not None:
                return int(info["ExitCode"])
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.05)

    async def kill(self) -> None:
        """SIGKILL to the exec's process group (engine execs lead their own session)."""
        self.killed = True
        await self._signal(signal.SIGKILL)

    async def _signal(self, signum: int) -> None:
        pid = self.pid or await self._find_pid()
        if pid and self.signal_inside is not None:
            await self.signal_inside(signum)
        elif pid:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signum)

    async def close(self) -> None:
        self.demux.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self.demux
        self.writer.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.writer.wait_closed(), 1)


class DockerPty(EngineExec):
    """A terminal exec (Tty: true): one raw byte stream, resized through the engine's API."""

    def __init__(
        self,
        api: Any,
        exec_id: str,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        signal_inside: Callable[[int], Awaitable[None]] | None = None,
    ):
        super().__init__(api, exec_id, reader, writer, False, signal_inside)
        self.exit_code: int | None = None

    async def read(self, timeout: float | None = None) -> bytes:
        try:
            return await asyncio.wait_for(self.reader.read(execution.READ_SIZE), timeout)
        except TimeoutError:
            return b""
        except (ConnectionError, OSError):
            return b""

    async def write(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def resize(self, rows: int, cols: int) -> None:
        await asyncio.to_thread(self.api.exec_resize, self.exec_id, height=rows, width=cols)

    async def signal(self, signum: int) -> None:
        self.killed = True  # an exit of 128+N now means our signal N
        await self._signal(signum)

    async def wait(self, timeout: float | None = None) -> int | None:  # type: ignore[override]
        if self.exit_code is None:
            try:
                self.exit_code = await asyncio.wait_for(super().wait(), timeout)
            except TimeoutError:
                return None
        return self.exit_code

    async def close(self) -> None:
        if self.exit_code is None:
            info = await self._inspect()
            if info.get("Running"):
                await self.signal(signal.SIGKILL)
        await super().close()
