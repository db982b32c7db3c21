"""Sockets inside a sandbox's network namespace, opened from the orchestrator's own process.

setns(CLONE_NEWNET) moves only the calling thread, and a socket keeps the namespace it was
born in. So a throwaway thread can create a socket inside the sandbox and hand it back: that
gives port connect (reach a server in the sandbox) and the gateway (a listener on the sandbox's
loopback that forwards to the one allowed host:port) with no helper process at all.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import threading

from pomona.orchestrator.linux.syscalls import CLONE_NEWNET, setns


def socket_in_netns(netns_path: str, family: int = socket.AF_INET) -> socket.socket:
    made: list[socket.socket] = []
    failed: list[BaseException] = []  # handed to the caller's thread

    def make() -> None:
        try:
            fd = os.open(netns_path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                setns(fd, CLONE_NEWNET)
            finally:
                os.close(fd)
            made.append(socket.socket(family, socket.SOCK_STREAM))
        except BaseException as e:
            failed.append(e)

    thread = threading.Thread(target=make, name="pomona-netns")
    thread.start()
    thread.join()
    if failed:
        raise failed[0]
    return made[0]


async def open_connection_in(
    netns_path: str, port: int, host: str = "127.0.0.1"
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    sock = socket_in_netns(netns_path)
    sock.setblocking(False)
    try:
        await asyncio.get_running_loop().sock_connect(sock, (host, port))
    except BaseException:
        sock.close()
        raise
    return await asyncio.open_connection(sock=sock)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy one direction; at its end, half-close (a client that shuts down its sending side
    still gets the answer)."""
    with contextlib.suppress(ConnectionError, OSError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()


class Gateway:
    """Listens on 127.0.0.1:<port> inside a sandbox and forwards to the one allowed address."""

    def __init__(self, netns_path: str, target: tuple[str, int]):
        self.netns_path, self.target = netns_path, target
        self.server: asyncio.Server | None = None
        self.connections: set[asyncio.Task] = set()

    async def start(self) -> None:
        sock = socket_in_netns(self.netns_path)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", self.target[1]))
        sock.listen(512)
        sock.setblocking(False)
        self.server = await asyncio.start_server(self._forward, sock=sock)

    async def _forward(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task:  # remembered, so close() can end connections still open
            self.connections.add(task)
            task.add_done_callback(self.connections.discard)
        # A connection that close() cancels ends normally: asyncio's stream server asks a
        # finished handler task for its exception(), which raises (and logs a traceback) for a
        # task that ended cancelled.
        with contextlib.suppress(asyncio.CancelledError):
            await self._relay(reader, writer)

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        try:
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        finally:
            for w in (writer, up_writer):
                with contextlib.suppress(Exception):
                    w.close()

    async def close(self) -> None:
        if self.server:
            self.server.close()
        for task in list(self.connections):
            task.cancel()
        if self.connections:
            await asyncio.gather(*self.connections, return_exceptions=True)
        if self.server:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.server.wait_closed(), 1)
