"""The rootless local runtime's worker (runtimes/local/rootless.py): the runtime, run as root of
the user's own user namespace, behind the REST API on a loopback port for the one client that
started it."""

from __future__ import annotations

import socket
import sys
import threading
from pathlib import Path


def serve(root: Path) -> None:
    """The worker: the local runtime behind the REST API on a loopback port, for the one key
    its parent gave on stdin (an admin's: the user's own, as trusted as the in-process SDK),
    until its parent closes stdin."""
    import uvicorn

    from pomona.orchestrator.runtimes import make_runtime
    from pomona.orchestrator.server.app import create_app
    from pomona.orchestrator.server.coordinator import Coordinator
    from pomona.orchestrator.server.keys import KeyRing
    from pomona.orchestrator.server.store import open_store
    from pomona.orchestrator.service import SandboxService
    from pomona.orchestrator.sources import ImageSources

    key = sys.stdin.readline().strip()
    # the user's own images from anywhere; the coordinator keeps the TTLs (heartbeats reach it,
    # not the service), so the service's own reaper stays off, as in `pomona serve`
    runtime = make_runtime("local", str(root), sources=ImageSources())
    service = SandboxService(runtime, reap_interval=10**9)
    coordinator = Coordinator(service, open_store(None, str(root)))
    app = create_app(coordinator, KeyRing({"owner": key}, frozenset({"owner"})))
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1024)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", ws="websockets-sansio"))

    def watch_parent() -> None:
        sys.stdin.read()  # EOF: the parent closed it, or died
        server.should_exit = True

    threading.Thread(target=watch_parent, daemon=True).start()
    print(f"http://127.0.0.1:{sock.getsockname()[1]}", flush=True)
    server.run(sockets=[sock])
