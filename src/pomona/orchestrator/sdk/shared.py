"""One sandbox client per process for all environments: a client owns the TTL reaper and the
heartbeats of its sandboxes, so two clients on one state directory would disagree."""

from __future__ import annotations

import os
import threading

from pomona.orchestrator.sdk.client import SandboxClient

_clients: dict[tuple[str | None, str | None], SandboxClient] = {}
_lock = threading.Lock()


def shared_client(runtime: str | None = "local", state_dir: str | None = None) -> SandboxClient:
    """The process's client for `runtime`: a runtime's name, an orchestrator's URL, or None
    (the service at POMONA_URL); `state_dir` for an embedded runtime."""
    with _lock:
        key = (runtime, state_dir)
        if key not in _clients:
            if runtime is not None and "://" in runtime:
                client = SandboxClient(base_url=runtime)
            else:
                client = SandboxClient(runtime, state_dir=state_dir or None)
            _clients[key] = client
            client.start()
        return _clients[key]


def close_shared(state_dir: str | os.PathLike[str] | None = None) -> None:
    """Close the shared clients of one state directory (the one a test made and is about to
    remove), or every shared client with None. The others stay open: another part of the
    process may still hold them. At interpreter exit the SDK closes them itself."""
    with _lock:
        if state_dir is None:
            closing = list(_clients)
        else:
            mine = os.path.realpath(state_dir)
            closing = [k for k in _clients if k[1] and os.path.realpath(k[1]) == mine]
        clients = [_clients.pop(k) for k in closing]
    for client in clients:
        client.close()
