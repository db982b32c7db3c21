"""Running the proxy in-process on a free port: uvicorn in a background thread.

with ProxyServer(ProxyConfig(trajectories=Path("runs"))) as proxy:
    ep = proxy.open_episode(model="scripted", script=["echo hello > out.txt"])
    ep["base_url"]        # http://127.0.0.1:PORT/e/KEY/v1
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pomona.proxy.app import create_app
from pomona.proxy.appserver import AppServer
from pomona.proxy.config import ProxyConfig
from pomona.proxy.policy import Policy
from pomona.proxy.recording import CallObserver
from pomona.proxy.schemas import EpisodeSpec, validated
from pomona.proxy.state import ProxyState, episode_urls
from pomona.trajectories.storage import is_uri


class ProxyServer(AppServer):
    """The proxy on a free port; `url` is its root, `open_episode` gives per-episode base URLs.
    It is the in-process ProxyControl (pomona.proxy.control): the same episodes API as a
    RemoteProxy, with no HTTP round trip, and it can hold calls for an in-process policy."""

    holds_calls = True

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

    @property
    def trajectories(self) -> Path | None:
        """The directory this proxy records into, or None (it records nothing, or into an object
        store: see pomona.trajectories.storage)."""
        where = self.config.trajectories
        return None if where is None or is_uri(where) else Path(where)

    def call_count(self, key: str) -> int:
        """How many calls the episode has made so far (0 for an unknown key)."""
        ep = self.state.episodes.get(key)
        return ep.calls if ep else 0

    def close_episode(self, key: str, **outcome: Any) -> None:
        """Close an episode; `outcome` (reward, resolved, failure_kind... see
        schemas.EpisodeOutcome) goes to `episodes`. A malformed outcome raises MalformedRequest
        (a ValueError) and leaves the episode open."""
        self.state.close_episode(key, outcome)
