"""One recording proxy per (trajectory directory, model list) per process, shared by every env and
rollout: a proxy is a server thread and a pair of trajectory writers, so one per episode would
waste both and scatter a run's records over many files."""

from __future__ import annotations

import atexit
import threading
from pathlib import Path

from pomona.proxy.config import ProxyConfig
from pomona.proxy.server import ProxyServer

DEFAULT_TRAJECTORIES = "pomona-runs"

_proxies: dict[tuple[str, str | None], ProxyServer] = {}
_lock = threading.Lock()


def shared_proxy(
    trajectories: str | Path | None = None, models: str | Path | None = None
) -> ProxyServer:
    """The process's proxy recording to `trajectories` (default ./pomona-runs), routing model
    names by the LiteLLM-style `models` YAML when given (the scripted model needs none)."""
    directory = Path(trajectories or DEFAULT_TRAJECTORIES).resolve()
    key = (str(directory), str(Path(models).resolve()) if models else None)
    with _lock:
        if key not in _proxies:
            config = ProxyConfig.from_yaml(models, trajectories=directory)
            _proxies[key] = ProxyServer(config).start()
        return _proxies[key]


@atexit.register
def _stop_all() -> None:
    for proxy in _proxies.values():
        proxy.stop()
    _proxies.clear()
