"""How code outside the proxy drives it: open an episode, close it with its outcome, and read
what was recorded under it. One contract, two ways to reach a proxy, as the orchestrator's
Service has its in-process and HTTP twins:

    ProxyServer (pomona.proxy.server)   a proxy in this process: no HTTP round trip, and the
                                        only kind that can hold calls for an in-process policy
    RemoteProxy                         a `pomona proxy` service, by URL

`proxy_control` turns what a caller was given (either of those, or a URL) into a ProxyControl.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable
from urllib.parse import urlsplit

import httpx

from pomona.errors import PomonaError

if TYPE_CHECKING:
    from pomona.proxy.policy import Policy


@dataclass(frozen=True)
class RecordedCall:
    """What a harness run needs of one recorded call to judge how it ended."""

    side: bool
    status: str
    dialect: str
    path: str
    status_code: int | None = None

    @classmethod
    def of(cls, row: dict[str, Any]) -> RecordedCall:
        return cls(
            bool(row["side"]),
            row["status"] or "",
            row["dialect"] or "",
            row["path"] or "",
            row["status_code"],
        )


RECORDED_CALL_COLUMNS = ("side", "status", "dialect", "path", "status_code")


class ControlError(PomonaError):
    """The proxy refused or could not answer an episodes request (open, close, read)."""


@runtime_checkable
class ProxyControl(Protocol):
    """Opening, closing and reading episodes of one proxy, however it is reached."""

    @property
    def url(self) -> str:
        """The proxy's root URL as sandboxes and harnesses reach it."""

    @property
    def trajectories(self) -> Path | None:
        """Where its recordings can be read from this process; None for a remote proxy."""

    @property
    def holds_calls(self) -> bool:
        """Whether episodes may be opened with an in-process `policy` (calls held for it)."""

    def open_episode(
        self,
        *,
        model: str | None = None,
        metadata: dict[str, Any] | None = None,
        script: Sequence[str | Sequence[str]] | None = None,
        final: str = "done",
        tool_less_calls: Literal["side", "main"] = "side",
        policy: Policy | None = None,
    ) -> dict[str, str]:
        """Open an episode: {"key", "base_url", "anthropic_base_url"}. `final`: what the
        scripted model answers once its script is spent (a judge stand-in's fixed verdict)."""

    def close_episode(self, key: str, **outcome: Any) -> None:
        """Close the episode; the first close writes its `episodes` row with `outcome`."""

    def call_count(self, key: str) -> int:
        """How many calls the episode has made so far (0 for an unknown key)."""


def gateway(proxy: ProxyControl | str) -> str:
    """The host:port a gateway-mode sandbox must be allowed to reach for this proxy (a
    ProxyControl or its URL)."""
    parts = urlsplit(proxy if isinstance(proxy, str) else proxy.url)
    return f"{parts.hostname}:{parts.port or (443 if parts.scheme == 'https' else 80)}"


def recorded_calls(control: ProxyControl, key: str) -> list[RecordedCall] | None:
    """The episode's recorded calls in order, or None when its trajectories cannot be read from
    here (a remote proxy): then only `call_count` is known."""
    rows = calls_of(control, key, RECORDED_CALL_COLUMNS)
    return None if rows is None else [RecordedCall.of(r) for r in rows]


def calls_of(
    control: ProxyControl, key: str, columns: Sequence[str] | None = None
) -> list[dict[str, Any]] | None:
    """The episode's `calls` rows in order (all columns unless named), or None when the
    trajectories cannot be read from here."""
    if control.trajectories is None:
        return None
    from pomona.trajectories.reader import episode_calls  # pyarrow: only when calls are read

    return episode_calls(control.trajectories, key, columns)


class RemoteProxy:
    """A `pomona proxy` service over HTTP. `trajectories`: where its store can be read from
    here, when it is shared (a mounted directory); else only counts are known."""

    holds_calls = False

    def __init__(self, url: str, trajectories: str | Path | None = None, timeout: float = 30):
        self._url = url.rstrip("/")
        self._trajectories = Path(trajectories) if trajectories else None
        self._timeout = timeout

    @property
    def url(self) -> str:
        return self._url

    @property
    def trajectories(self) -> Path | None:
        return self._trajectories

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            r = httpx.post(f"{self._url}{path}", json=body, timeout=self._timeout)
        except httpx.HTTPError as e:
            raise ControlError(f"the proxy at {self._url} is unreachable: {e}") from e
        if r.status_code >= 400:
            raise ControlError(f"the proxy refused {path} ({r.status_code}): {r.text[:500]}")
        answer: dict[str, Any] = r.json()
        return answer

    def open_episode(
        self,
        *,
        model: str | None = None,
        metadata: dict[str, Any] | None = None,
        script: Sequence[str | Sequence[str]] | None = None,
        final: str = "done",
        tool_less_calls: Literal["side", "main"] = "side",
        policy: Policy | None = None,
    ) -> dict[str, str]:
        if policy is not None:
            raise ControlError(
                "an in-process policy needs an in-process proxy (a ProxyServer), not a URL"
            )
        body: dict[str, Any] = {"model": model, "metadata": metadata or {}}
        if script is not None:
            body["script"] = [c if isinstance(c, str) else list(c) for c in script]
        if final != "done":
            body["final"] = final
        if tool_less_calls != "side":
            body["tool_less_calls"] = tool_less_calls
        return {k: str(v) for k, v in self._post("/episodes", body).items()}

    def close_episode(self, key: str, **outcome: Any) -> None:
        self._post(f"/episodes/{key}/close", outcome)

    def call_count(self, key: str) -> int:
        try:
            r = httpx.get(f"{self._url}/episodes/{key}", timeout=self._timeout)
        except httpx.HTTPError:
            return 0
        return int(r.json().get("calls", 0)) if r.status_code == 200 else 0


def proxy_control(
    proxy: ProxyControl | str, trajectories: str | Path | None = None
) -> ProxyControl:
    """A ProxyControl for `proxy`: an in-process ProxyServer or any ProxyControl as it is, a URL
    as a RemoteProxy (whose recordings, if shared, are at `trajectories`)."""
    if isinstance(proxy, str):
        return RemoteProxy(proxy, trajectories)
    return proxy
