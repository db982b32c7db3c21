"""Running the proxy in-process on a free port: uvicorn in a background thread.

with ProxyServer(ProxyConfig(trajectories=Path("runs"))) as proxy:
    ep = proxy.open_episode(model="scripted", script=["echo hello > out.txt"])
    ep["base_url"]        # http://127.0.0.1:PORT/e/KEY/v1
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import uvicorn

from pomona.proxy.app import ProxyState, create_app
from pomona.proxy.config import ProxyConfig
from pomona.proxy.schemas import KEY_RE


class AppServer:
    """Any ASGI app served by uvicorn in a daemon thread on a free (or given) port."""

    def __init__(self, app: Any, *, host: str = "127.0.0.1", port: int = 0):
        self.app = app
        self.host, self.port = host, port
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, timeout: float = 10.0) -> AppServer:
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
                raise RuntimeError(f"the server did not start on {self.url}")
            time.sleep(0.01)
        return self

    def stop(self, timeout: float = 10.0) -> None:
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(timeout)
            self._server = self._thread = None

    def _bound(self) -> None:
        """Called once the port is known, before serving starts."""

    def __enter__(self) -> Any:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class ProxyServer(AppServer):
    """The proxy on a free port; `url` is its root, `open_episode` gives per-episode base URLs."""

    def __init__(
        self, config: ProxyConfig | None = None, *, host: str = "127.0.0.1", port: int = 0
    ):
        self.config = config or ProxyConfig()
        super().__init__(create_app(self.config), host=host, port=port)

    @property
    def state(self) -> ProxyState:
        return self.app.state.proxy

    def _bound(self) -> None:
        if self.config.public_url is None:
            self.config.public_url = self.url

    def open_episode(self, *, key: str | None = None, **fields: Any) -> dict[str, str]:
        """Open an episode without an HTTP round trip; returns what POST /episodes would."""
        if key is not None and not KEY_RE.fullmatch(key):
            raise ValueError(f"episode key {key!r} is not URL-safe ({KEY_RE.pattern})")
        ep = self.state.episodes.open(key, **fields)
        base = f"{self.url}/e/{ep.key}"
        return {"key": ep.key, "base_url": f"{base}/v1", "anthropic_base_url": base}

    def close_episode(self, key: str, **outcome: Any) -> None:
        """Close an episode; `outcome` (reward, resolved, failure_kind...) goes to `episodes`.
        A malformed outcome raises ValueError and leaves the episode open."""
        self.state.close_episode(key, outcome)
