"""The API server's exec and port-forward streams, from the official client's blocking
WebSocket classes to asyncio.

One thread per open stream pumps its channels (1 stdout, 2 stderr, 3 status) into a bounded
asyncio queue, so a slow consumer stops the thread reading and the API server stops sending:
output is never buffered without bound. The status channel's JSON carries the exit code.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import threading
from collections.abc import Callable
from typing import Any

from pomona.errors import SandboxFailed
from pomona.orchestrator.runtimes import execution
from pomona.orchestrator.types import StreamName

STDIN, STDOUT, STDERR, STATUS, RESIZE = 0, 1, 2, 3, 4
_NAMES: dict[int, StreamName] = {STDOUT: "stdout", STDERR: "stderr"}


def exit_code(status: str) -> int:
    """The exit code in a v4/v5 status message: Success, or NonZeroExitCode with the code as
    the cause's message. Anything else is the API server or kubelet failing, not the command."""
    try:
        data = json.loads(status) if status else {}
    except ValueError:
        raise SandboxFailed(
            f"unreadable exec status from the API server: {status[:200]!r}"
        ) from None
    if data.get("status") == "Success":
        return 0
    for cause in (data.get("details") or {}).get("causes") or []:
        if cause.get("reason") == "ExitCode":
            with contextlib.suppress(TypeError, ValueError):
                return int(cause.get("message"))
    raise SandboxFailed(f"the exec failed in the cluster: {data.get('message') or status[:200]}")


class ChannelStream:
    """An open exec stream: `queue` gets ("stdout"|"stderr", bytes) items then END; `exited`
    resolves to the exit code. `connect` opens the client's WSClient (blocking)."""

    def __init__(self, connect: Callable[[], Any], stdin: bytes | None = None):
        self.loop = asyncio.get_running_loop()
        self.queue: asyncio.Queue[execution.Output] = asyncio.Queue(maxsize=execution.QUEUE_LIMIT)
        self.exited: asyncio.Future[int] = self.loop.create_future()
        self.opened: asyncio.Future[None] = self.loop.create_future()
        self.opened.add_done_callback(
            lambda f: f.cancelled() or f.exception()
        )  # awaited only by PTYs
        self._connect, self._stdin = connect, stdin
        self._stop = threading.Event()
        self._ws: Any = None
        self._thread = threading.Thread(target=self._pump, name="pomona-k8s-exec", daemon=True)
        self._thread.start()

    def _settle(
        self, future: asyncio.Future, result: Any = None, error: BaseException | None = None
    ) -> None:
        def settle() -> None:
            if not future.done():
                future.set_exception(error) if error else future.set_result(result)

        self.loop.call_soon_threadsafe(settle)

    def _put(self, item: execution.Output) -> bool:
        """Hand an item to the event loop, waiting while the queue is full; False once closed.
        The put is submitted once and waited for in slices (to notice a close): a put that timed
        out is still pending, and submitting another would queue the item twice."""
        try:
            put = asyncio.run_coroutine_threadsafe(self.queue.put(item), self.loop)
        except RuntimeError:  # the loop is gone
            return False
        while not self._stop.is_set():
            try:
                put.result(0.5)
                return True
            except TimeoutError:
                continue
            except (RuntimeError, concurrent.futures.CancelledError):
                return False
        put.cancel()
        return False

    def _pump(self) -> None:
        status = ""
        try:
            self._ws = self._connect()
            self._settle(self.opened)
            if self._stdin:
                self._ws.write_channel(STDIN, self._stdin)
            while not self._stop.is_set() and self._ws.is_open():
                self._ws.update(timeout=0.5)
                if not self._forward():
                    return
                status += _text(self._ws.read_channel(STATUS))
            if not self._forward():  # the read that met the close may have buffered output too
                return
            status += _text(self._ws.read_channel(STATUS))
            if not self._stop.is_set():
                self._settle(self.exited, exit_code(status))
        except BaseException as e:  # noqa: BLE001 - every failure reaches the awaiting side
            if self._stop.is_set():
                return  # closed under the pump: whoever closed it is not waiting for a result
            error = e if isinstance(e, SandboxFailed) else SandboxFailed(f"exec stream failed: {e}")
            self._settle(self.opened, error=error)
            self._settle(self.exited, error=error)
        finally:
            self._put(execution.END)
            if self._ws is not None:
                with contextlib.suppress(Exception):
                    self._ws.close()

    def _forward(self) -> bool:
        """Hand over the output the client has buffered; False once closed. Reading a channel with
        nothing buffered makes the client read every frame already readable, the close included,
        so output can be buffered after the loop has seen the stream close."""
        for channel in (STDOUT, STDERR):
            data = self._ws.read_channel(channel)
            if data and not self._put((_NAMES[channel], data)):
                return False
        return True

    def write(self, channel: int, data: bytes) -> None:
        """Blocking (call through a thread): websocket-client serializes sends with a lock."""
        if self._ws is not None and self._ws.is_open():
            self._ws.write_channel(channel, data)

    async def close(self) -> None:
        self._stop.set()
        if self._ws is not None:
            with contextlib.suppress(Exception):
                await asyncio.to_thread(self._ws.close)
        await asyncio.to_thread(self._thread.join, 5)
        if not self.exited.done():
            self.exited.cancel()


def _text(data: bytes | str) -> str:
    return data.decode(errors="replace") if isinstance(data, bytes) else data


class GatedCommand:
    """A Command (runtimes/execution.py) over a gated exec: kill opens a second exec that
    SIGKILLs the first one's process group (the gate wrote its pid), never the sandbox."""

    def __init__(self, stream: ChannelStream, kill: Callable[[], Any]):
        self.stream, self._kill = stream, kill
        self.queue = stream.queue
        self.killed = False

    async def wait(self) -> int:
        code = await asyncio.shield(self.stream.exited)
        if self.killed and 128 < code < 160:
            return -(code - 128)  # killed by our signal: -N, as for a local process
        return code

    async def kill(self) -> None:
        self.killed = True
        await self._kill()

    async def feed_stdin(self, data: bytes) -> None:
        """Stdin went with the exec itself (the gate reads exactly its length)."""

    async def close(self) -> None:
        await self.stream.close()


class PodPty:
    """A Pty over a tty exec: one raw byte stream (the kubelet merges stdout and stderr),
    resized on channel 4, signalled by a second exec to the process group the gate recorded."""

    def __init__(self, stream: ChannelStream, signal: Callable[[int], Any]):
        self.stream, self._signal = stream, signal
        self.signalled = False
        self._pending = b""
        self._ended = False

    async def read(self, timeout: float | None = None) -> bytes:
        if self._ended:
            return b""
        try:
            _, data = await asyncio.wait_for(self.stream.queue.get(), timeout)
        except TimeoutError:
            return b""
        if data is None:
            self._ended = True
            return b""
        return data

    async def write(self, data: bytes) -> None:
        await asyncio.to_thread(self.stream.write, STDIN, data)

    async def resize(self, rows: int, cols: int) -> None:
        message = json.dumps({"Width": cols, "Height": rows}).encode()
        await asyncio.to_thread(self.stream.write, RESIZE, message)

    async def signal(self, signum: int) -> None:
        self.signalled = True
        await self._signal(signum)

    async def wait(self, timeout: float | None = None) -> int | None:
        try:
            code = await asyncio.wait_for(asyncio.shield(self.stream.exited), timeout)
        except TimeoutError:
            return None
        if self.signalled and 128 < code < 160:
            return -(code - 128)
        return code

    async def close(self) -> None:
        if not self.stream.exited.done():
            await self.signal(9)
        await self.stream.close()
