"""A local TCP port that leads into a sandbox: Playwright connects to it, and every connection is
carried to a server on the sandbox's own loopback by the SDK's port tunnel (`sb.connect(port)`).

Why a local port: Playwright's `connect_over_cdp` takes a URL, while the tunnel is a stream the
SDK hands out; a listener on 127.0.0.1 joins the two for any runtime and transport (in-process,
Docker, or the orchestrator's WebSocket tunnel over HTTP).
"""

from __future__ import annotations

import contextlib
import socket
import threading
from typing import Any

from pomona.orchestrator.sdk.client import Sandbox


class PortForward:
    """127.0.0.1:<port> here -> 127.0.0.1:<target> inside `sandbox`, until `close()`."""

    def __init__(self, sandbox: Sandbox, target: int):
        self.sandbox, self.target = sandbox, target
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._open: set[Any] = set()
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, name=f"pomona-forward-{target}", daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        try:
            inner = self.sandbox.connect(self.target)
        except Exception:  # noqa: BLE001 - nothing listens inside (yet): refuse like a closed port
            client.close()
            return
        with self._lock:
            if self._closed:
                client.close()
                inner.close()
                return
            self._open.update((client, inner))
        threading.Thread(target=self._pump_in, args=(client, inner), daemon=True).start()
        self._pump_out(client, inner)

    def _pump_in(self, client: socket.socket, inner: Any) -> None:
        """Local client -> sandbox."""
        try:
            while data := client.recv(65536):
                inner.sendall(data)
        except Exception:  # noqa: BLE001 - either side went away: the connection is over
            pass
        finally:
            self._drop(client, inner)

    def _pump_out(self, client: socket.socket, inner: Any) -> None:
        """Sandbox -> local client."""
        try:
            while data := inner.recv(65536):
                client.sendall(data)
        except Exception:  # noqa: BLE001
            pass
        finally:
            self._drop(client, inner)

    def _drop(self, client: socket.socket, inner: Any) -> None:
        with self._lock:
            self._open.discard(client)
            self._open.discard(inner)
        with contextlib.suppress(OSError):
            client.shutdown(socket.SHUT_RDWR)
        client.close()
        with contextlib.suppress(Exception):
            inner.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            still = list(self._open)
            self._open.clear()
        self._listener.close()
        for conn in still:
            with contextlib.suppress(Exception):
                if isinstance(conn, socket.socket):
                    conn.shutdown(socket.SHUT_RDWR)
                conn.close()
