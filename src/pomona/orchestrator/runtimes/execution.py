"""Running one command: streaming output with byte caps, stdin, and a timeout that kills the
command's whole process group (never the sandbox). Runtimes supply the process; this module
supplies the semantics, so every runtime behaves the same.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import fcntl
import functools
import os
import signal
import struct
import subprocess
import termios
import time
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, field
from typing import IO, Protocol

from pomona.orchestrator.types import ExecChunk, ExecResult, StreamName

# After the command exits, what it wrote is read whole, however slowly the consumer takes it:
# every chunk already queued, plus DRAIN_SLACK bytes for what is still in the pipes or sockets
# on the way. Output beyond that can only come from background children holding it open: it is
# read until none has come for DRAIN_GRACE seconds, then left, so a `cmd &` never hangs an exec.
DRAIN_GRACE = 0.25
DRAIN_SLACK = 4 * 1024 * 1024
READ_SIZE = 65536
QUEUE_LIMIT = 64  # chunks buffered between the pipes and a slow consumer


@dataclass
class _Stream:
    cap: int
    kept: int = 0
    truncated: bool = False
    parts: list[str] = field(default_factory=list)
    decoder: codecs.IncrementalDecoder = field(
        default_factory=lambda: codecs.getincrementaldecoder("utf-8")("replace")
    )

    def feed(self, data: bytes) -> str:
        room = self.cap - self.kept
        if len(data) > room:
            data, self.truncated = data[: max(room, 0)], True
        self.kept += len(data)
        text = self.decoder.decode(data)
        self.parts.append(text)
        return text


class OutputCollector:
    """Keeps at most `cap` bytes per stream and remembers whether anything was cut."""

    def __init__(self, cap: int):
        self.streams: dict[StreamName, _Stream] = {"stdout": _Stream(cap), "stderr": _Stream(cap)}

    def feed(self, stream: StreamName, data: bytes) -> ExecChunk | None:
        text = self.streams[stream].feed(data)
        return ExecChunk(stream=stream, data=text) if text else None

    def result(self, exit_code: int, started: float, timed_out: bool) -> ExecResult:
        out, err = self.streams["stdout"], self.streams["stderr"]
        return ExecResult(
            exit_code=exit_code,
            stdout="".join(out.parts) + out.decoder.decode(b"", final=True),
            stderr="".join(err.parts) + err.decoder.decode(b"", final=True),
            duration=time.monotonic() - started,
            timed_out=timed_out,
            truncated=out.truncated or err.truncated,
        )


# What a command's queue carries: pieces of output, then END. Data None is the end (its stream
# name means nothing).
Output = tuple[StreamName, bytes | None]
END: Output = ("stdout", None)


class Command(Protocol):
    """A started command, whatever runs it. Runtimes adapt their process to this and get the
    exec semantics below for free."""

    queue: asyncio.Queue[Output]

    async def wait(self) -> int:
        """The exit code; -N when killed by signal N."""

    async def kill(self) -> None:
        """SIGKILL the command's whole process group."""

    async def feed_stdin(self, data: bytes) -> None:
        """Write stdin, then close it so the command reads EOF."""

    async def close(self) -> None: ...


async def stream(
    command: Command, *, stdin: bytes | None, timeout: float | None, cap: int
) -> AsyncGenerator[ExecChunk | ExecResult, None]:
    """Stream a command's output with caps; on timeout kill its process group. After it exits,
    its output is drained as DRAIN_GRACE says, then left to its background children."""
    started = time.monotonic()
    collector = OutputCollector(cap)
    feeder = asyncio.create_task(command.feed_stdin(stdin)) if stdin is not None else None
    exited = asyncio.create_task(command.wait())
    deadline = None if timeout is None else started + timeout
    timed_out, ended = False, False
    drain_until: float | None = None
    owed_chunks = owed_bytes = 0
    getter: asyncio.Future | None = None
    try:
        while not (ended and exited.done()):
            now = time.monotonic()
            if deadline is not None and not timed_out and now >= deadline and not exited.done():
                timed_out = True
                await command.kill()
                drain_until = now + DRAIN_GRACE + 1.0
            if exited.done() and drain_until is None:
                drain_until = now + DRAIN_GRACE
                owed_chunks, owed_bytes = command.queue.qsize() + 1, DRAIN_SLACK
            if (
                drain_until is not None
                and now >= drain_until
                and (exited.done() or now >= drain_until + 5)
            ):
                break  # children hold the output open, or a kill never reported an exit
            limits = [t for t in (None if timed_out else deadline, drain_until) if t is not None]
            waiting: set[asyncio.Future] = set() if exited.done() else {exited}
            if not ended:
                getter = getter or asyncio.ensure_future(command.queue.get())
                waiting.add(getter)
            done, _ = await asyncio.wait(
                waiting,
                return_when=asyncio.FIRST_COMPLETED,
                timeout=max(0.0, min(limits) - now) if limits else None,
            )
            if getter is not None and getter in done:
                name, data = getter.result()
                getter = None
                if data is None:
                    ended = True
                elif exited.done() and (owed_chunks > 0 or owed_bytes > 0):
                    # written before the exit, or still on its way: the grace starts anew
                    if owed_chunks > 0:
                        owed_chunks -= 1
                    else:
                        owed_bytes -= len(data)
                    if chunk := collector.feed(name, data):
                        yield chunk
                    drain_until = time.monotonic() + DRAIN_GRACE
                elif chunk := collector.feed(name, data):
                    yield chunk
    finally:
        if getter is not None:
            getter.cancel()
        if feeder:
            feeder.cancel()
        if not exited.done():
            if not timed_out:
                await command.kill()  # the caller stopped listening: the command goes too
            with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(exited), 5)
        if not exited.done():
            exited.cancel()
        await command.close()
    code = exited.result() if exited.done() and not exited.cancelled() else -9
    yield collector.result(code, started, timed_out)


class LocalCommand:
    """A Command over a local subprocess: its pipes pumped into the queue (a full queue pauses
    the pipe, so a flood never buffers without bound), its exit watched through a pidfd (not the
    pipes, which a background child may hold open)."""

    def __init__(self, proc: subprocess.Popen):
        self.proc = proc
        self.queue: asyncio.Queue[Output] = asyncio.Queue(maxsize=QUEUE_LIMIT)
        self._tasks: list[asyncio.Task] = []
        self._transports: list[asyncio.BaseTransport] = []

    @classmethod
    async def start(cls, proc: subprocess.Popen) -> LocalCommand:
        self = cls(proc)
        loop = asyncio.get_running_loop()
        readers: list[tuple[StreamName, asyncio.StreamReader]] = []
        pipes: tuple[tuple[StreamName, IO[bytes] | None], ...] = (
            ("stdout", proc.stdout),
            ("stderr", proc.stderr),
        )
        for name, pipe in pipes:
            reader = asyncio.StreamReader(limit=READ_SIZE, loop=loop)
            transport, _ = await loop.connect_read_pipe(
                functools.partial(asyncio.StreamReaderProtocol, reader, loop=loop), pipe
            )
            self._transports.append(transport)
            readers.append((name, reader))
        self._tasks.append(asyncio.create_task(self._pump(readers)))
        return self

    async def _pump(self, readers: list[tuple[StreamName, asyncio.StreamReader]]) -> None:
        async def one(name: StreamName, reader: asyncio.StreamReader) -> None:
            while data := await reader.read(READ_SIZE):
                await self.queue.put((name, data))

        try:
            await asyncio.gather(*(one(n, r) for n, r in readers))
        finally:
            await self.queue.put(END)

    async def wait(self) -> int:
        await wait_pid_exit(self.proc.pid)
        return self.proc.wait()  # it has exited: reaping is instant, no thread (whose pool a
        # burst of creates may hold) needed

    async def kill(self) -> None:
        await _killpg(self.proc.pid)

    async def feed_stdin(self, data: bytes) -> None:
        await asyncio.to_thread(_feed, self.proc, data)

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        for transport in self._transports:
            transport.close()


async def wait_pid_exit(pid: int) -> None:
    """Wait for a process (our child or not) to exit, through a pidfd; never reaps it."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()
    loop.add_reader(fd, _settle, done)
    try:
        await done
    finally:
        loop.remove_reader(fd)
        os.close(fd)


def _settle(future: asyncio.Future[None]) -> None:
    """A reader callback: the fd became readable (it may fire again before the waiter runs)."""
    if not future.done():
        future.set_result(None)


def _feed(proc: subprocess.Popen, data: bytes | None) -> None:
    with contextlib.suppress(BrokenPipeError, ConnectionResetError, OSError, ValueError):
        if data:
            proc.stdin.write(data)  # type: ignore[union-attr]
        proc.stdin.close()  # type: ignore[union-attr]


async def _killpg(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


class ProcessPty:
    """A Pty over a local process whose stdio is the slave side of a pseudo-terminal."""

    def __init__(self, proc: subprocess.Popen, master: int):
        self.proc, self.master = proc, master
        os.set_blocking(master, False)

    async def read(self, timeout: float | None = None) -> bytes:
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[None] = loop.create_future()
        loop.add_reader(self.master, _settle, ready)
        try:
            await asyncio.wait_for(ready, timeout)
        except TimeoutError:
            return b""
        finally:
            loop.remove_reader(self.master)
        try:
            return os.read(self.master, READ_SIZE)
        except BlockingIOError:
            return b""
        except OSError:  # EIO: every slave end is closed, the terminal is done
            return b""

    async def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(self.master, view) :]
            except BlockingIOError:
                await asyncio.sleep(0.005)

    async def resize(self, rows: int, cols: int) -> None:
        fcntl.ioctl(self.master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    async def signal(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signum)

    async def wait(self, timeout: float | None = None) -> int | None:
        try:
            await asyncio.wait_for(wait_pid_exit(self.proc.pid), timeout)
        except TimeoutError:
            return None
        return self.proc.wait()

    async def close(self) -> None:
        if self.proc.poll() is None:
            await self.signal(signal.SIGKILL)
            await asyncio.to_thread(self.proc.wait)
        with contextlib.suppress(OSError):
            os.close(self.master)


def pty_preexec(then: Callable[[], None]) -> Callable[[], None]:
    """preexec_fn for a terminal child (stdin is the slave): make it the controlling terminal."""

    def prepare() -> None:
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)
        then()

    return prepare


def open_terminal(rows: int, cols: int) -> tuple[int, int]:
    master, slave = os.openpty()
    fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    return master, slave
