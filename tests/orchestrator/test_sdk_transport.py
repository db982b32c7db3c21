"""The SDK's HTTP transport (httpx over aiohttp's pool) against real sockets: answers and streams
come through whole, and each failure is reported as the httpx error that says whether the
request may have reached the server, which is what decides a retry (sdk/remote.py)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable

import httpx
import pytest

from pomona.orchestrator.sdk.remote import ANSWER_LOST, NEVER_SENT
from pomona.orchestrator.sdk.transport import AiohttpTransport

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def _serve(handler: Handler) -> tuple[asyncio.Server, str]:
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}"


async def _request_head(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        (
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        ),
        0,
    )
    return head + await reader.readexactly(length)


def _client(url: str, **timeout: float) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        base_url=url, transport=AiohttpTransport(8), timeout=httpx.Timeout(30, **timeout)
    )


async def _answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while True:
        try:
            request = await _request_head(reader)
        except asyncio.IncompleteReadError:
            return
        body = b'{"echo": %d}' % len(request) if b"POST" in request else b"one\ntwo\n"
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
        )
        await writer.drain()


def test_answers_and_streams_come_through():
    async def main() -> None:
        server, url = await _serve(_answer)
        async with server, _client(url) as client:
            posted = await client.post("/x", json={"a": 1}, headers={"X-API-Key": "k"})
            assert posted.status_code == 200 and posted.json()["echo"] > 0
            async with client.stream("GET", "/lines") as response:
                assert [line async for line in response.aiter_lines()] == ["one", "two"]
            assert (await client.get("/again")).text == "one\ntwo\n"  # the connection is reused

    asyncio.run(main())


def test_a_refused_connection_was_never_sent():
    async def main(port: int) -> None:
        async with _client(f"http://127.0.0.1:{port}") as client:
            with pytest.raises(NEVER_SENT):
                await client.post("/x", json={})

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))  # bound, never listening: refused
        asyncio.run(main(s.getsockname()[1]))


def test_a_server_that_hangs_up_after_the_request_may_have_run_it():
    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _request_head(reader)
        writer.close()

    async def main() -> None:
        server, url = await _serve(hang_up)
        async with server, _client(url) as client:
            with pytest.raises(ANSWER_LOST) as lost:
                await client.post("/x", json={})
        assert not isinstance(lost.value, NEVER_SENT)

    asyncio.run(main())


def test_a_slow_answer_is_a_read_timeout():
    async def slow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _request_head(reader)
        await asyncio.sleep(30)

    async def main() -> None:
        server, url = await _serve(slow)
        async with server, _client(url, read=0.2) as client:
            with pytest.raises(httpx.ReadTimeout):
                await client.post("/x", json={})
        server.close()

    asyncio.run(main())
