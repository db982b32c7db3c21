"""Running the proxy in-process on a free port: uvicorn in a background thread.

with ProxyServer(ProxyConfig(trajectories=Path("runs"))) as proxy:
    ep = proxy.open_episode(model="scripted", script=["echo hello > out.txt"])
    ep["base_url"]        # http://127.0.0.1:PORT/e/KEY/v1
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Self

import uvicorn
from starlette.types import ASGIApp

from pomona.proxy.app import create_app
from pomona.proxy.config import ProxyConfig
from pomona.proxy.policy import Policy
from pomona.proxy.recording import CallObserver
from pomona.proxy.schemas import EpisodeSpec, validated
from pomona.proxy.state import ProxyState, episode_urls


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

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class ProxyServer(AppServer):
    """The proxy on a free port; `url` is its root, `open_episode` gives per-episode base URLs."""

    def __init__(
        self,
        config: ProxyConfig | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        observers: Sequence[CallObserver] = (),
    ):
        self.config = config or ProxyConfig()
        app = create_app(self.config, observers)
        self.state = ProxyState.of(app)
        super().__init__(app, host=host, port=port)

    def _bound(self) -> None:
        if self.config.public_url is None:
            self.config.public_url = self.url

    def open_episode(
        self,
        *,
        key: str | None = None,
        model: str | None = None,
        script: str | Sequence[str | Sequence[str]] | None = None,
        final: str = "done",
        metadata: Mapping[str, Any] | None = None,
        tool_less_calls: Literal["side", "main"] = "side",
        policy_timeout: float | None = None,
        policy: Policy | None = None,
    ) -> dict[str, str]:
        """Open an episode without an HTTP round trip; takes and answers exactly what POST
        /episodes does (so a caller opens episodes alike whichever way it reaches the proxy),
        plus `policy`, a Policy of the caller's own for a "policy" episode. A malformed field
        raises MalformedRequest (a ValueError), a key in use EpisodeExists."""
        spec = validated(
            EpisodeSpec,
            {"key": key, "model": model, "script": script, "final": final, "metadata": metadata,
             "tool_less_calls": tool_less_calls, "policy_timeout": policy_timeout},
        )  # fmt: skip
        ep = self.state.open_episode(spec, policy)
        return episode_urls(self.url, ep.key)

    def close_episode(self, key: str, **outcome: Any) -> None:
        """Close an episode; `outcome` (reward, resolved, failure_kind... see
        schemas.EpisodeOutcome) goes to `episodes`. A malformed outcome raises MalformedRequest
        (a ValueError) and leaves the episode open."""
        self.state.close_episode(key, outcome)
