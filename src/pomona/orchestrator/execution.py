"""Running one command: streaming output with byte caps, stdin, and a timeout that kills the
command's whole process group (never the sandbox). Runtimes supply the process; this module
supplies the semantics, so every runtime behaves the same.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import fcntl
import os
import signal
import struct
import subprocess
import termios
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

from pomona.orchestrator.types import ExecChunk, ExecResult

# After the command exits, output still held open by its background children is read for this
# long, then left behind: a `cmd &` must not turn into a hung exec.
DRAIN_GRACE = 0.25
READ_SIZE = 65536
QUEUE_LIMIT = 64  # chunks buffered between the pipes and a slow consumer


@dataclass
class _Stream:
    cap: int
    kept: int = 0
    truncated: bool = False
    parts: list[str] = field(default_factory=list)
    decoder: codecs.IncrementalDecoder = field(
        default_factory=lambda: codecs.getincrementaldecoder("utf-8")("replace"))

    def feed(self, data: bytes) -> str:
        room = self.cap - self.kept
        if len(data) > room:
            data, self.truncated = data[:max(room, 0)], True
        self.kept += len(data)
        text = self.decoder.decode(data)
        self.parts.append(text)
        return text


class OutputCollector:
    """Keeps at most `cap` bytes per stream and remembers whether anything was cut."""

    def __init__(self, cap: int):
        self.streams = {"stdout": _Stream(cap), "stderr": _Stream(cap)}

    def feed(self, stream: str, data: bytes) -> ExecChunk | None:
        text = self.streams[stream].feed(data)
        return ExecChunk(stream=stream, data=text) if text else None

    def result(self, exit_code: int, started: float, timed_out: bool) -> ExecResult:
        out, err = self.streams["stdout"], self.streams["stderr"]
        return ExecResult(
            exit_code=exit_code, stdout="".join(out.parts) + out.decoder.decode(b"", final=True),
            stderr="".join(err.parts) + err.decoder.decode(b"", final=True),
            duration=time.monotonic() - started, timed_out=timed_out,
            truncated=out.truncated or err.truncated)


async def run_process(
    proc: subprocess.Popen,
    *,
    stdin: bytes | None,
    timeout: float | None,
    cap: int,
    kill: Callable[[], Awaitable[None]] | None = None,
) -> AsyncIterator[ExecChunk | ExecResult]:
    """Stream a started process's output; on timeout kill its process group.

    The exit is watched through a pidfd, not through the pipes: a background child that keeps
    stdout open must not keep the exec waiting (asyncio's own subprocess.wait() would).
    """
    loop = asyncio.get_running_loop()
    started = time.monotonic()
    collector = OutputCollector(cap)
    queue: asyncio.Queue[tuple[str, bytes | None]] = asyncio.Queue()
    paused: set[int] = set()
    exited = loop.create_future()
    pidfd = os.pidfd_open(proc.pid)
    loop.add_reader(pidfd, lambda: exited.done() or exited.set_result(None))
    readers: dict[int, Callable[[], None]] = {}

    def reader(name: str, fd: int) -> Callable[[], None]:
        def on_readable() -> None:
            try:
                data = os.read(fd, READ_SIZE)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                loop.remove_reader(fd)
                readers.pop(fd, None)
            queue.put_nowait((name, data or None))
            if data and queue.qsize() >= QUEUE_LIMIT:  # back-pressure: a slow consumer pauses us
                loop.remove_reader(fd)
                paused.add(fd)
        return on_readable

    for name, pipe in (("stdout", proc.stdout), ("stderr", proc.stderr)):
        fd = pipe.fileno()  # type: ignore[union-attr]
        os.set_blocking(fd, False)
        readers[fd] = reader(name, fd)
        loop.add_reader(fd, readers[fd])
    feeder = asyncio.create_task(asyncio.to_thread(_feed, proc, stdin)) if proc.stdin else None
    deadline = None if timeout is None else started + timeout
    timed_out = False
    open_streams = 2
    drain_until: float | None = None
    try:
        while open_streams:
            if queue.qsize() < QUEUE_LIMIT // 2:
                for fd in list(paused):
                    paused.discard(fd)
                    loop.add_reader(fd, readers[fd])
            now = time.monotonic()
            if exited.done() and drain_until is None:
                drain_until = now + DRAIN_GRACE
            limits = [t for t in (None if timed_out else deadline, drain_until) if t is not None]
            wait = max(0.0, min(limits) - now) if limits else None
            getter = asyncio.ensure_future(queue.get())
            waiting = {getter} if exited.done() else {getter, exited}
            done, _ = await asyncio.wait(waiting, timeout=wait, return_when=asyncio.FIRST_COMPLETED)
            if getter in done:
                name, data = getter.result()
                if data is None:
                    open_streams -= 1
                elif chunk := collector.feed(name, data):
                    yield chunk
                continue
            getter.cancel()
            now = time.monotonic()
            if deadline is not None and not timed_out and now >= deadline and not exited.done():
                timed_out = True
                await (kill() if kill else _killpg(proc.pid))
                drain_until = now + DRAIN_GRACE + 1.0
            elif drain_until is not None and now >= drain_until:
                break
        if not exited.done():
            await exited
    finally:
        for fd in list(readers):
            loop.remove_reader(fd)
        loop.remove_reader(pidfd)
        os.close(pidfd)
        if proc.poll() is None:
            await (kill() if kill else _killpg(proc.pid))
        for pipe in (proc.stdout, proc.stderr):
            pipe.close()  # type: ignore[union-attr]
        if feeder:
            feeder.cancel()
    code = await asyncio.to_thread(proc.wait) if proc.poll() is None else proc.returncode
    yield collector.result(code, started, timed_out)


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
        self._pidfd = os.pidfd_open(proc.pid)

    async def read(self, timeout: float | None = None) -> bytes:
        loop = asyncio.get_running_loop()
        ready = loop.create_future()
        loop.add_reader(self.master, lambda: ready.done() or ready.set_result(None))
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
                view = view[os.write(self.master, view):]
            except BlockingIOError:
                await asyncio.sleep(0.005)

    async def resize(self, rows: int, cols: int) -> None:
        fcntl.ioctl(self.master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    async def signal(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signum)

    async def wait(self, timeout: float | None = None) -> int | None:
        loop = asyncio.get_running_loop()
        exited = loop.create_future()
        loop.add_reader(self._pidfd, lambda: exited.done() or exited.set_result(None))
        try:
            await asyncio.wait_for(exited, timeout)
        except TimeoutError:
            return None
        finally:
            loop.remove_reader(self._pidfd)
        return self.proc.wait()

    async def close(self) -> None:
        if self.proc.poll() is None:
            await self.signal(signal.SIGKILL)
            await asyncio.to_thread(self.proc.wait)
        for fd in (self.master, self._pidfd):
            with contextlib.suppress(OSError):
                os.close(fd)


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
