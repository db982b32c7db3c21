"""Running one command: streaming output with byte caps, stdin, and a timeout that kills the
command's whole process group (never the sandbox). Runtimes supply the process; this module
supplies the semantics, so every runtime behaves the same.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import os
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

from pomona.orchestrator.types import ExecChunk, ExecResult

# After the command exits, output still held open by its background children is read for this
# long, then left behind: a `cmd &` must not turn into a hung exec.
DRAIN_GRACE = 0.25
READ_SIZE = 65536


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
    proc: asyncio.subprocess.Process,
    *,
    stdin: bytes | None,
    timeout: float | None,
    cap: int,
    kill: Callable[[], Awaitable[None]] | None = None,
) -> AsyncIterator[ExecChunk | ExecResult]:
    """Stream a started process's output; on timeout kill its process group."""
    started = time.monotonic()
    collector = OutputCollector(cap)
    queue: asyncio.Queue[tuple[str, bytes | None]] = asyncio.Queue()

    async def read(name: str, reader: asyncio.StreamReader) -> None:
        while data := await reader.read(READ_SIZE):
            await queue.put((name, data))
        await queue.put((name, None))

    async def feed_stdin() -> None:
        assert proc.stdin is not None
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            if stdin:
                proc.stdin.write(stdin)
                await proc.stdin.drain()
            proc.stdin.close()

    tasks = [asyncio.create_task(read("stdout", proc.stdout)),  # type: ignore[arg-type]
             asyncio.create_task(read("stderr", proc.stderr))]  # type: ignore[arg-type]
    if proc.stdin is not None:
        tasks.append(asyncio.create_task(feed_stdin()))
    exited = asyncio.create_task(proc.wait())
    deadline = None if timeout is None else started + timeout
    timed_out = False
    open_streams = 2
    drain_until: float | None = None
    try:
        while open_streams:
            now = time.monotonic()
            if exited.done() and drain_until is None:
                drain_until = now + DRAIN_GRACE
            limits = [t for t in (deadline if not timed_out else None, drain_until) if t is not None]
            wait = max(0.0, min(limits) - now) if limits else None
            getter = asyncio.ensure_future(queue.get())
            done, _ = await asyncio.wait({getter, exited} if not exited.done() else {getter},
                                         timeout=wait, return_when=asyncio.FIRST_COMPLETED)
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
        code = await exited
    finally:
        for task in tasks:
            task.cancel()
        if not exited.done():
            await (kill() if kill else _killpg(proc.pid))
            exited.cancel()
    yield collector.result(code, started, timed_out)


async def _killpg(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
