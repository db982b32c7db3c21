"""What one proxy app owns (its episodes, recorder and upstream clients), and the episodes API that
HTTP routes and in-process callers (`ProxyServer`) share, so both validate and record alike."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

from fastapi import FastAPI

from pomona.proxy import schemas
from pomona.proxy.config import ProxyConfig
from pomona.proxy.episodes import Episode, Episodes, new_key, utcnow
from pomona.proxy.errors import EpisodeNotFound, MalformedRequest
from pomona.proxy.policy import Policy
from pomona.proxy.recording import CallObserver, Recorder
from pomona.proxy.upstreams import Upstreams


class ProxyState:
    """Everything one proxy app owns; `app.state.proxy` (see `of`)."""

    def __init__(self, config: ProxyConfig, observers: Iterable[CallObserver] = ()):
        self.config = config
        self.episodes = Episodes()
        held = [*(m.params.get("api_key") for m in config.models), *config.api_keys.values()]
        self.recorder = Recorder(config.trajectories, config.durable, held, observers)
        self.upstreams = Upstreams(config)
        self._closing = threading.Lock()

    @staticmethod
    def of(app: FastAPI) -> ProxyState:
        state = app.state.proxy
        assert isinstance(state, ProxyState)
        return state

    def open_episode(self, spec: schemas.EpisodeSpec, policy: Policy | None = None) -> Episode:
        """Open the episode `spec` describes; EpisodeExists (409) if its key is taken. `policy`
        (in-process only) replaces the one a "policy" episode would get."""
        ep = self.episodes.add(
            Episode(
                spec.key or new_key(),
                model=spec.model,
                script=spec.commands(),
                metadata=dict(spec.metadata or {}),
                final=spec.final,
                tool_less_is_side=spec.tool_less_calls == "side",
                policy=policy,
            )
        )
        if ep.policy is not None and spec.policy_timeout is not None:
            ep.policy.timeout = spec.policy_timeout
        return ep

    def close_episode(self, key: str, outcome: Any = None) -> Episode:
        """Close once; the first close writes the `episodes` row with its outcome (a JSON object,
        see schemas.EpisodeOutcome).

        Atomic: a malformed outcome (MalformedRequest, a ValueError) or a failed write (OSError)
        leaves the episode open, so a corrected retry still writes its row.
        """
        ep = self.episodes.get(key)
        if ep is None:
            raise EpisodeNotFound(key)
        try:
            row = schemas.validated(
                schemas.EpisodeOutcome, {} if outcome is None else outcome
            ).row()
        except MalformedRequest as e:
            raise MalformedRequest(f"invalid outcome: {e.message}", "invalid_outcome") from None
        with self._closing:
            if not ep.closed:
                ended = utcnow()
                try:
                    self.recorder.episode(ep, row, ended)
                except (TypeError, OverflowError, ValueError) as e:  # ArrowInvalid is a ValueError
                    raise MalformedRequest(
                        f"invalid outcome: it cannot be recorded: {e}", "invalid_outcome"
                    ) from e
                self.episodes.close(key, ended)
        return ep

    def base_url(self, request_base: str) -> str:
        """How clients reach the proxy: the configured public URL, else the request's own base."""
        return (self.config.public_url or request_base).rstrip("/")


def episode_urls(base: str, key: str) -> dict[str, str]:
    """What opening an episode answers: its key and the base URLs harnesses are given."""
    return {"key": key, "base_url": f"{base}/e/{key}/v1", "anthropic_base_url": f"{base}/e/{key}"}
