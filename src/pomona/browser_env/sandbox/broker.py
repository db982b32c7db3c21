"""Inside a browser sandbox: joins the MCP servers a harness spawns to Pomona's side, which
drives the browser. A sandbox can open no connection out (its gateway leads to the model proxy
only), so Pomona connects in: its one backend connection arrives through the sandbox's port
tunnel and proves itself with a token only root can read; every tool call an MCP server makes
on the calls port is passed along it, one at a time, and the answer passed back.

    broker.py --backend-port P --calls-port Q --token-file F

Lines of JSON both ways: a call {"tool", "arguments"}, an answer {"content", "is_error"}.
Standard library only: it runs on whatever Python the tools payload carries.
"""

from __future__ import annotations

import argparse
import json
import socket
import socketserver
import threading
from pathlib import Path
from typing import Any

BACKEND_WAIT = 120.0  # seconds a call waits for Pomona's side to connect


class Broker:
    def __init__(self, token: str):
        self.token = token
        self.backend: Any = None  # a read-write file over Pomona's connection
        self.connected = threading.Event()
        self.lock = threading.Lock()

    def accept_backend(self, listener: socket.socket) -> None:
        """The first connection that presents the token is the backend; any other is dropped."""
        while not self.connected.is_set():
            conn, _ = listener.accept()
            stream = conn.makefile("rwb")
            conn.settimeout(30)
            try:
                presented = stream.readline().decode("utf-8", "replace").strip()
            except OSError:
                presented = ""
            if presented != self.token:
                conn.close()
                continue
            conn.settimeout(None)
            self.backend = stream
            self.connected.set()
        listener.close()

    def forward(self, call: dict[str, Any]) -> dict[str, Any]:
        if not self.connected.wait(BACKEND_WAIT):
            return error("the browser is not connected yet")
        with self.lock:
            try:
                self.backend.write(json.dumps(call).encode() + b"\n")
                self.backend.flush()
                line = self.backend.readline()
            except OSError as e:
                return error(f"the browser's connection broke: {e}")
            if not line:
                return error("the browser is gone")
            return json.loads(line)


def error(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": f"Error: {text}"}], "is_error": True}


def calls_handler(broker: Broker) -> type[socketserver.StreamRequestHandler]:
    class Calls(socketserver.StreamRequestHandler):
        def handle(self) -> None:
            for line in self.rfile:
                try:
                    call = json.loads(line)
                    if not isinstance(call, dict) or not isinstance(call.get("tool"), str):
                        raise ValueError('a call is {"tool": NAME, "arguments": {...}}')
                    answer = broker.forward(
                        {"tool": call["tool"], "arguments": call.get("arguments") or {}}
                    )
                except ValueError as e:
                    answer = error(str(e))
                self.wfile.write(json.dumps(answer).encode() + b"\n")
                self.wfile.flush()

    return Calls


class Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description="joins in-sandbox MCP servers to Pomona's browser")
    p.add_argument("--backend-port", type=int, required=True)
    p.add_argument("--calls-port", type=int, required=True)
    p.add_argument("--token-file", type=Path, required=True)
    args = p.parse_args(argv)
    broker = Broker(args.token_file.read_text().strip())
    listener = socket.create_server(("127.0.0.1", args.backend_port))
    calls = Server(("127.0.0.1", args.calls_port), calls_handler(broker))
    threading.Thread(target=broker.accept_backend, args=(listener,), daemon=True).start()
    print(json.dumps({"ready": True}), flush=True)
    calls.serve_forever()


if __name__ == "__main__":
    main()
