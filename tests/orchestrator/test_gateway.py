"""The gateway that lets a sandbox reach the proxy: closing it while a connection is open ends
that connection quietly (no CancelledError traceback from asyncio's stream server, which
ModelCallEnv episode ends used to print)."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest

from pomona.orchestrator.linux.netns import Gateway

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="entering a network namespace needs root")


async def _close_with_a_connection_open() -> list[dict[str, Any]]:
    loop = asyncio.get_running_loop()
    reported: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: reported.append(context))

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(100):
            writer.write(data)
            await writer.drain()

    upstream = await asyncio.start_server(echo, "127.0.0.2", 0)
    port = upstream.sockets[0].getsockname()[1]
    gateway = Gateway("/proc/self/ns/net", ("127.0.0.2", port))  # listens on 127.0.0.1:port
    await gateway.start()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"ping")
    assert await reader.readexactly(4) == b"ping"
    assert gateway.connections  # the connection is open through the gateway
    await gateway.close()
    assert await reader.read() == b""  # the client sees the connection end
    await asyncio.sleep(0.1)  # done callbacks run
    writer.close()
    upstream.close()
    return reported


def test_closing_with_a_connection_open_reports_nothing() -> None:
    assert asyncio.run(_close_with_a_connection_open()) == []
