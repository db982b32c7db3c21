"""The services of one episode, inside its sandbox: upload the sandbox programs, start the mock
services as root (so the agent, another user, can call them but not read their audit, reset them
or kill them), say how a harness reaches the task's tools over MCP, and read the audit back.

Services listen on 127.0.0.1:PORT in the sandbox's own network namespace, so every episode has
its own and no other episode can reach them.
"""

from __future__ import annotations

import io
import json
import secrets
import shlex
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pomona.benchmarks.task import VerifierError
from pomona.harnesses.base import TOOLS_MOUNT
from pomona.harnesses.mcp import McpServer
from pomona.orchestrator.sdk.client import Sandbox

HOME = "/opt/pomona-claw"  # root-owned: the programs, the task's tools, the admin token
PYTHON = f"{TOOLS_MOUNT}/bin/pomona-python"  # the claw-eval payload: CPython + mcp + openai SDKs
PORT = 9100
MCP_NAME = "claw"  # the MCP server's name: harnesses show tools as mcp__claw__send_message etc.
PROGRAMS = Path(__file__).parent / "sandbox"


class ServiceDown(VerifierError):
    """A mock service was not running when the episode was graded: an infrastructure failure,
    never a score of 0."""


@dataclass(frozen=True)
class Tool:
    """One tool of a task: its schema for the model and the endpoint the call goes to."""

    name: str
    description: str
    input_schema: dict[str, Any]
    url: str

    def spec(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": self.input_schema,
            "url": self.url,
        }


def mcp_server() -> McpServer:
    """The MCP server every claw task gives a harness: the task's tools, relayed to its services."""
    return McpServer(
        MCP_NAME,
        command=(
            PYTHON,
            f"{HOME}/mcp_server.py",
            "--tools",
            f"{HOME}/tools.json",
            "--user",
            f"{HOME}/user.json",
        ),
    )


def proxy_inside(sandbox: Sandbox) -> str:
    """The proxy's root URL as seen from inside a gateway-mode sandbox (for the simulated user)."""
    address = getattr(sandbox.info.spec, "gateway_address", None)
    if not address:
        raise ValueError(
            "a multi-turn task needs a gateway sandbox: its simulated user speaks through the proxy"
        )
    return f"http://127.0.0.1:{address[1]}"


def _tar(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in sorted(files.items()):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def install(
    sandbox: Sandbox,
    tools: list[Tool],
    fixtures: dict[str, Any],
    services: list[str],
    extra: dict[str, bytes] | None = None,
) -> None:
    """Upload the programs, tools and fixtures as root, then start the services (if any) and
    wait until they answer."""
    files = {p.name: p.read_bytes() for p in PROGRAMS.glob("*.py") if p.name != "__init__.py"}
    files["tools.json"] = json.dumps([t.spec() for t in tools]).encode()
    files["token"] = secrets.token_hex(16).encode()
    for name, value in fixtures.items():
        files[f"fixtures/{name}.json"] = json.dumps(value).encode()
    files.update(extra or {})
    staging = f"/tmp/pomona-claw-{secrets.token_hex(4)}"
    sandbox.upload_dir(staging, _tar(files))
    setup = (
        f"set -e; rm -rf {HOME}; mv {staging} {HOME}; chown -R 0:0 {HOME}; "
        f"chmod -R go-w {HOME}; chmod 600 {HOME}/token"
    )
    result = sandbox.exec(setup, user="root", timeout=60)
    if result.exit_code != 0:
        raise RuntimeError(f"could not install the claw programs: {result.stderr.strip()}")
    if services:
        start(sandbox, services)


def start(sandbox: Sandbox, services: list[str]) -> None:
    serve = shlex.join(
        [
            PYTHON,
            f"{HOME}/services.py",
            "--port",
            str(PORT),
            "--fixtures",
            f"{HOME}/fixtures",
            "--services",
            ",".join(services),
            "--token-file",
            f"{HOME}/token",
        ]
    )
    wait = (
        f'{PYTHON} -c "import time, urllib.request\n'
        f"for _ in range(600):\n"
        f"    try: urllib.request.urlopen('http://127.0.0.1:{PORT}/health', timeout=2); break\n"
        f"    except OSError: time.sleep(0.1)\n"
        f"else: raise SystemExit('the services did not start')\""
    )
    result = sandbox.exec(
        f"cd {HOME} && (setsid {serve} > {HOME}/services.log 2>&1 < /dev/null &"
        f" echo $! > {HOME}/services.pid) && {wait}",
        user="root",
        timeout=180,
    )
    if result.exit_code != 0:
        log = sandbox.exec(f"tail -20 {HOME}/services.log", user="root", timeout=30).stdout
        raise RuntimeError(f"the mock services did not start: {result.stderr.strip()} {log}")


def audit(sandbox: Sandbox) -> dict[str, Any]:
    """Every service's audit, read as root. A service that is not answering is a ServiceDown."""
    dump = shlex.join(
        [
            PYTHON,
            f"{HOME}/services.py",
            "--port",
            str(PORT),
            "--token-file",
            f"{HOME}/token",
            "--dump",
        ]
    )
    result = sandbox.exec(dump, user="root", timeout=120)
    if result.exit_code != 0:
        raise ServiceDown(
            f"the mock services were down at grading time: "
            f"{(result.stderr.strip().splitlines() or ['no output'])[-1]}"
        )
    return json.loads(result.stdout)
