"""Any ASGI app served by uvicorn in a daemon thread of this process: the in-process proxy, the
local model server, the viewer and the tests' fake upstreams all run this way."""

from __future__ import annotations

import socket
import threading
import time
from typing import Self

import uvicorn
from starlette.types import ASGIApp

from pomona.errors import PomonaError


class ServerDidNotStart(PomonaError):
    """The server thread died or did not answer in time."""


class AppServer:
    """Any ASGI app served by uvicorn in a daemon thread on a free (or given) port."""

    def __init__(self, app: ASGIApp, *, host: str = "127.0.0.1", port: int = 0):
        self.app = app
        self.host, self.port = host, port
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, timeout: float = 10.0) -> Self:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        self.port = sock.getsockname()[1]
        self._bound()
        config = uvicorn.Config(
            self.app,
            log_level="warning",
            lifespan="on",
            http="h11",
            loop="asyncio",
            access_log=False,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run,
            kwargs={"sockets": [sock]},
            name=f"pomona-server-{self.port}",
            daemon=True,
        )
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise ServerDidNotStart(f"the server did not start on {self.url}")
            time.sleep(0.01)
        return self

    def stop(self, timeout: float = 10.0) -> None:
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(timeout)
            self._server = self._thread = None

    def _bound(self) -> None:
        """Called once the port is known, before serving starts."""

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
