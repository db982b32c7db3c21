"""Pomona's side of browsing through MCP: a harness in the browser's sandbox spawns the MCP server
(sandbox/mcp_server.py), whose tool calls reach the sandbox's broker (sandbox/broker.py), which
passes them along the one connection Pomona opened into the sandbox through its port tunnel;
here each call is carried out on the BrowserSession (browser_env/tools.py) and answered.

Why calls come to this side rather than drive Chromium from inside: the session, its
set-of-marks and its failure typing exist once, here, and so does the record of every screenshot
and action that the graders and the official layouts read. Why a broker: a sandbox cannot open a
connection out (its gateway reaches the model proxy only), and a harness may start its MCP
server more than once; the broker is the fixed point both sides connect to.

    bridge = McpBridge(session)
    server = bridge.install()                      # an McpServer for harnesses.run(mcp=[server])
    bridge.serve_while(harness_thread.is_alive)    # on the thread that owns the session
"""

from __future__ import annotations

import json
import secrets
import shlex
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pomona.browser_env.errors import BrowserCrashed, BrowserInfraError
from pomona.browser_env.session import BrowserSession
from pomona.browser_env.tools import SERVER_NAME, TOOLS, BrowserTools
from pomona.browser_env.tunnel import PortForward
from pomona.harnesses.base import TOOLS_MOUNT
from pomona.harnesses.mcp import McpServer

PROGRAMS = Path(__file__).parent / "sandbox"
HOME = "/opt/pomona-browser"  # root-owned: the programs, the tools list and the backend's token
PYTHON = f"{TOOLS_MOUNT}/bin/pomona-python"  # the payload's CPython with the `mcp` SDK
PYTHON_HARNESS = "claw-eval"  # the payload entry that installs it
BACKEND_PORT, CALLS_PORT = 9310, 9311
START_TIMEOUT = 60.0
POLL = 0.2  # seconds between checks that the harness still runs, while no call is waiting
ENDED = (
    "The page has ended the episode (the task is over); no further action is possible. "
    "Give your final answer now."
)


class McpBridge:
    """Serves the browser's tools to the MCP servers a harness starts in the session's sandbox.
    `ended()` says whether the page itself finished the episode (MiniWoB)."""

    def __init__(self, session: BrowserSession, ended: Callable[[], bool] = lambda: False):
        self.tools = BrowserTools(session)
        self.ended = ended
        self.failure: BrowserInfraError | None = None  # the browser failure that ended the episode
        self._forward: PortForward | None = None
        self._conn: socket.socket | None = None

    @property
    def sandbox(self) -> Any:
        return self.tools.session.sandbox

    def install(self) -> McpServer:
        """Upload and start the broker as root, connect to it, and describe the MCP server."""
        token = secrets.token_hex(16)
        files = {p.name: p.read_bytes() for p in PROGRAMS.glob("*.py") if p.name != "__init__.py"}
        files["tools.json"] = json.dumps(TOOLS).encode()
        files["token"] = token.encode()
        staging = f"/tmp/pomona-browser-{secrets.token_hex(4)}"
        for name, data in files.items():
            self.sandbox.write_file(f"{staging}/{name}", data)
        broker = shlex.join(
            [PYTHON, f"{HOME}/broker.py", "--backend-port", str(BACKEND_PORT),
             "--calls-port", str(CALLS_PORT), "--token-file", f"{HOME}/token"]
        )  # fmt: skip
        setup = (
            f"set -e; rm -rf {HOME}; mv {staging} {HOME}; chown -R 0:0 {HOME}; "
            f"chmod -R go-w {HOME}; chmod 600 {HOME}/token; "
            f"(setsid {broker} > {HOME}/broker.log 2>&1 < /dev/null &)"
        )
        started = self.sandbox.exec(setup, user="root", timeout=60)
        if started.exit_code != 0:
            raise BrowserCrashed(
                f"the browser's MCP broker did not start: {started.stderr.strip()}"
            )
        self._connect(token)
        return McpServer(
            SERVER_NAME,
            command=(PYTHON, f"{HOME}/mcp_server.py", "--tools", f"{HOME}/tools.json",
                     "--broker-port", str(CALLS_PORT)),
        )  # fmt: skip

    def _connect(self, token: str) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while self.sandbox.exec(
            f"grep -q ready {HOME}/broker.log", user="root", timeout=30
        ).exit_code:
            if time.monotonic() > deadline:
                log = self.sandbox.exec(f"tail -n 5 {HOME}/broker.log", user="root", timeout=30)
                raise BrowserCrashed(f"the browser's MCP broker did not come up: {log.stdout}")
            time.sleep(0.05)
        self._forward = PortForward(self.sandbox, BACKEND_PORT)
        self._conn = socket.create_connection(("127.0.0.1", self._forward.port), timeout=30)
        self._conn.sendall(token.encode() + b"\n")

    def serve_while(self, running: Callable[[], bool]) -> None:
        """Answer tool calls on this thread (the one that owns the session) while `running()`.
        A browser failure is kept in `failure` and every later call is told the browser is gone."""
        assert self._conn is not None, "install() first"
        self._conn.settimeout(POLL)
        pending = b""
        while True:
            try:
                data = self._conn.recv(65536)
            except TimeoutError:
                if not running():
                    return
                continue
            except OSError:
                return
            if not data:
                return  # the broker (or its sandbox) is gone
            pending += data
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                answer = self._answer(json.loads(line))
                self._conn.settimeout(None)
                self._conn.sendall(json.dumps(answer).encode() + b"\n")
                self._conn.settimeout(POLL)

    def _answer(self, call: dict[str, Any]) -> dict[str, Any]:
        if self.failure is not None:
            return _error(f"the browser failed and cannot be used any more: {self.failure}")
        if self.ended() and call.get("tool") != "browser_observe":
            return _error(ENDED)
        try:
            return self.tools.call(str(call.get("tool")), call.get("arguments"))
        except BrowserInfraError as e:
            self.failure = e
            return _error(f"the browser failed: {e}")

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if self._forward is not None:
            self._forward.close()
            self._forward = None


def _error(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": f"Error: {text}"}], "is_error": True}
