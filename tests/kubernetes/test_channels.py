"""The exec stream against the official client's own WebSocket reader, fed frames over a socket
pair, so when each frame becomes readable is decided by the test, not by a machine's load."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Callable

import pytest
from kubernetes import client
from kubernetes.stream import ws_client
from websocket import ABNF, WebSocket

from pomona.orchestrator.runtimes import execution
from pomona.orchestrator.runtimes.kubernetes.channels import STATUS, STDERR, STDOUT, ChannelStream

SUCCESS = json.dumps({"metadata": {}, "status": "Success"}).encode()


def frame(channel: int, data: bytes) -> bytes:
    return ABNF.create_frame(bytes([channel]) + data, ABNF.OPCODE_BINARY).format()


def close_frame() -> bytes:
    return ABNF.create_frame(b"\x03\xe8", ABNF.OPCODE_CLOSE).format()


class Server:
    """The API server's end of an exec stream: writes frames the client reads."""

    def __init__(self) -> None:
        self.ours, theirs = socket.socketpair()
        self.websocket = WebSocket(skip_utf8_validation=True)
        self.websocket.sock, self.websocket.connected = theirs, True

    def send(self, *frames: bytes) -> None:
        self.ours.sendall(b"".join(frames))

    def close(self) -> None:
        self.ours.close()


@pytest.fixture
def server(monkeypatch):
    s = Server()
    monkeypatch.setattr(ws_client, "create_websocket", lambda *a, **k: s.websocket)
    yield s
    s.close()


def connect() -> ws_client.WSClient:
    return ws_client.WSClient(client.Configuration(), "ws://api/exec", None, False, binary=True)


Update = Callable[[float], None]


def connect_reading_through(read: Callable[[Update, float], None]) -> Callable[[], object]:
    """A connect whose client reads frames through `read(its own update, timeout)`, so a test
    decides what the server has sent by each read."""

    def open_stream() -> ws_client.WSClient:
        ws = connect()
        update = ws.update
        ws.update = lambda timeout=0: read(update, timeout)
        return ws

    return open_stream


async def collect(stream: ChannelStream) -> tuple[bytes, bytes, int]:
    out = {"stdout": b"", "stderr": b""}
    while (item := await stream.queue.get())[1] is not None:
        out[item[0]] += item[1]
    code = await stream.exited
    await stream.close()
    return out["stdout"], out["stderr"], code


def test_output_read_together_with_the_close_is_not_lost(server):
    """The client's reader takes every frame already readable, close included, whenever a channel
    with nothing buffered is read: the last output can arrive while the stream is being drained,
    in the same read as the close."""
    server.send(frame(STDOUT, b"first "))
    sent_rest = False

    def first_read_then_the_rest(update: Update, timeout: float) -> None:
        nonlocal sent_rest
        update(timeout)
        if not sent_rest:
            server.send(frame(STDOUT, b"last"), frame(STATUS, SUCCESS), close_frame())
            sent_rest = True

    async def run() -> tuple[bytes, bytes, int]:
        return await collect(ChannelStream(connect_reading_through(first_read_then_the_rest)))

    assert asyncio.run(run()) == (b"first last", b"", 0)


def test_interleaved_output_and_a_failing_exit_code(server):
    failure = {
        "metadata": {},
        "status": "Failure",
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": "3"}]},
    }
    server.send(
        frame(STDOUT, b"a"),
        frame(STDERR, b"b"),
        frame(STDOUT, b"c"),
        frame(STATUS, json.dumps(failure).encode()),
        close_frame(),
    )

    async def run() -> tuple[bytes, bytes, int]:
        return await collect(ChannelStream(connect))

    assert asyncio.run(run()) == (b"ac", b"b", 3)


def test_a_consumer_that_stalls_gets_each_chunk_once(server):
    """The reader waits while the queue is full; a wait longer than its polling interval (0.5 s)
    must not hand the same chunk over twice."""
    chunks = [b"%04d," % i for i in range(execution.QUEUE_LIMIT * 4)]  # reads merge up to three
    frames = [*(frame(STDOUT, c) for c in chunks), frame(STATUS, SUCCESS), close_frame()]

    def one_frame_per_read(update: Update, timeout: float) -> None:
        if frames:
            server.send(frames.pop(0))
        update(timeout)

    async def run() -> tuple[bytes, bytes, int]:
        stream = ChannelStream(connect_reading_through(one_frame_per_read))
        async with asyncio.timeout(30):
            while not stream.queue.full():
                await asyncio.sleep(0.01)
        await asyncio.sleep(1.5)  # the reader waits on a full queue through three polls
        return await collect(stream)

    assert asyncio.run(run()) == (b"".join(chunks), b"", 0)
