"""How a harness run talks to the recording proxy: in-process (a ProxyServer) or over HTTP (a
`pomona proxy` service). Both open and close episodes and tell what was recorded for one."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx


@dataclass(frozen=True)
class RecordedCall:
    """What run.py needs of one recorded call to judge a failure."""

    side: bool
    status: str
    dialect: str
    path: str
    status_code: int | None = None


class ProxyLink:
    """One proxy, whichever way it is reached. `of` accepts a ProxyServer, a URL, or a link."""

    def __init__(self, url: str, server: Any = None, trajectories: Path | None = None):
        self.url = url.rstrip("/")
        self.server = server
        self.trajectories = trajectories

    @classmethod
    def of(cls, proxy: Any, trajectories: Path | str | None = None) -> ProxyLink:
        if isinstance(proxy, ProxyLink):
            return proxy
        if isinstance(proxy, str):
            return cls(proxy, None, Path(trajectories) if trajectories else None)
        directory = trajectories or getattr(proxy.config, "trajectories", None)
        return cls(proxy.url, proxy, Path(directory) if directory else None)

    @property
    def port(self) -> int:
        parts = urlsplit(self.url)
        return parts.port or (443 if parts.scheme == "https" else 80)

    def gateway(self) -> str:
        """The host:port a gateway-mode sandbox must be allowed to reach."""
        return f"{urlsplit(self.url).hostname}:{self.port}"

    def open_episode(self, **fields: Any) -> dict[str, str]:
        if self.server is not None:
            return self.server.open_episode(**fields)
        r = httpx.post(f"{self.url}/episodes", json=fields, timeout=30)
        r.raise_for_status()
        return r.json()

    def close_episode(self, key: str, **outcome: Any) -> None:
        if self.server is not None:
            self.server.close_episode(key, **outcome)
            return
        httpx.post(f"{self.url}/episodes/{key}/close", json=outcome, timeout=30).raise_for_status()

    def call_count(self, key: str) -> int:
        if self.server is not None:
            ep = self.server.state.episodes.get(key)
            return ep.calls if ep else 0
        r = httpx.get(f"{self.url}/episodes/{key}", timeout=30)
        return int(r.json().get("calls", 0)) if r.status_code == 200 else 0

    def calls(self, key: str) -> list[RecordedCall] | None:
        """The episode's recorded calls in order, or None when the trajectories cannot be read
        from here (a remote proxy): then only the count is known."""
        if self.trajectories is None or not self.trajectories.exists():
            return None
        import pyarrow.compute as pc

        from pomona import trajectories

        table = trajectories.read(self.trajectories, "calls")
        if table.num_rows == 0:
            return []
        rows = (
            table.filter(pc.equal(table["episode"], key))
            .select(["side", "status", "dialect", "path", "status_code", "started_at"])
            .to_pylist()
        )
        rows.sort(key=lambda r: r["started_at"])
        return [
            RecordedCall(
                bool(r["side"]),
                r["status"] or "",
                r["dialect"] or "",
                r["path"] or "",
                r["status_code"],
            )
            for r in rows
        ]
