"""Orchard Env's SDK against `pomona serve`, on the wire: route by route, the exact request
bodies that SDK sends (orchard_env/client/sandbox_client.py and process.py at the commit named
in reference/orchard.md; they send every optional field, unset ones as null), and the answers
read the way it reads them (`raise_for_status()`, then the keys it indexes). The sandboxes do
what its getting-started examples do, on the local runtime's host image.

The one deliberate difference: a PTY key in the URL (`?api_key=`, where that SDK puts it) is
refused with a reason, since URLs end up in logs; the header and the subprotocol work."""

from __future__ import annotations

import base64
import json
import textwrap
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from tests.service.conftest import running_service
from tests.service.harness import KEYS

KEY = KEYS["alice"]


@pytest.fixture(scope="module")
def orchard(state_root: Path) -> Iterator[OrchardWire]:
    with (
        running_service(state_root / "orchard-compat") as url,
        httpx.Client(base_url=url, headers={"X-API-Key": KEY}, timeout=120) as http,
    ):
        yield OrchardWire(url, http)


@dataclass
class JobResult:
    """The fields Orchard's JobResult reads: job_id, sandbox_id, command, status and created_at
    by index (a missing one is a KeyError there), the rest with .get."""

    data: dict[str, Any]

    def __post_init__(self) -> None:
        for key in ("job_id", "sandbox_id", "command", "status", "created_at"):
            assert key in self.data, f"Orchard's JobResult needs {key!r}: {self.data}"

    def __getattr__(self, name: str) -> Any:
        return self.data.get(name, "" if name in ("stdout", "stderr") else None)

    @property
    def is_complete(self) -> bool:
        return self.data["status"] in ("succeeded", "failed")


@dataclass
class OrchardWire:
    url: str
    http: httpx.Client

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        """Orchard's `_request`: raise_for_status(), then the JSON body."""
        response = self.http.request(method, path, **kwargs)
        response.raise_for_status()
        return response.json()

    def create_sandbox(
        self,
        block_network: bool = True,
        cpu: str | None = None,
        memory: str | None = None,
        timeout: int | None = None,
    ) -> str:
        """POST with only the fields given (its create leaves unset ones out), then the
        long-poll on /wait, read as `ready or status == "ready"`."""
        payload: dict[str, Any] = {
            "image": "host",
            "block_network": block_network,
            "sandbox_id": f"orchard-{uuid.uuid4().hex[:8]}",
        }
        payload |= {k: v for k, v in (("cpu", cpu), ("memory", memory), ("timeout", timeout)) if v}
        created = self.request("POST", "/sandboxes", json=payload)
        sandbox_id = created["sandbox_id"]
        server_timeout = created.get("timeout", timeout or 3600)
        ready = self.request(
            "GET", f"/sandboxes/{sandbox_id}/wait", params={"timeout": server_timeout}
        )
        assert ready.get("ready") or ready.get("status") == "ready", ready
        return sandbox_id

    def exec(
        self,
        sandbox_id: str,
        command: str | list[str],
        timeout: int | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        login_shell: bool = False,
    ) -> JobResult:
        """Its exec: POST with wait=true and every field, nulls included; a finished job is
        the answer."""
        response = self.request(
            "POST",
            f"/sandboxes/{sandbox_id}/exec",
            json={
                "command": command,
                "timeout_seconds": timeout,
                "cwd": cwd,
                "env": env,
                "login_shell": login_shell,
                "wait": True,
            },
        )
        assert response.get("status") in ("succeeded", "failed"), response
        return JobResult(response)

    def exec_polled(self, sandbox_id: str, command: str) -> JobResult:
        """Its fallback: POST without `wait`, then GET /jobs/{id} until complete."""
        job_id = self.request(
            "POST",
            f"/sandboxes/{sandbox_id}/exec",
            json={
                "command": command,
                "timeout_seconds": None,
                "cwd": None,
                "env": None,
                "login_shell": False,
            },
        )["job_id"]
        deadline = time.monotonic() + 360
        while not (result := JobResult(self.request("GET", f"/jobs/{job_id}"))).is_complete:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        return result

    def upload_content(self, sandbox_id: str, content: bytes, remote_path: str) -> Any:
        return self.request(
            "POST",
            f"/sandboxes/{sandbox_id}/files",
            json={"path": remote_path, "content": base64.b64encode(content).decode("utf-8")},
        )

    def download_content(self, sandbox_id: str, remote_path: str) -> bytes:
        body = self.request("GET", f"/sandboxes/{sandbox_id}/files", params={"path": remote_path})
        return base64.b64decode(body["content"])

    def list_files(self, sandbox_id: str, remote_path: str = "/") -> list[dict[str, Any]]:
        return self.request(
            "GET", f"/sandboxes/{sandbox_id}/files/list", params={"path": remote_path}
        )["files"]

    def pty_url(self, sandbox_id: str, key_in_url: bool = False) -> str:
        query = f"?api_key={KEY}" if key_in_url else ""
        return "ws" + self.url.removeprefix("http") + f"/sandboxes/{sandbox_id}/exec/pty{query}"


@pytest.fixture(scope="module")
def sandbox(orchard: OrchardWire) -> Iterator[str]:
    sandbox_id = orchard.create_sandbox()
    yield sandbox_id
    orchard.request("DELETE", f"/sandboxes/{sandbox_id}")


def test_health_and_root(orchard):
    assert orchard.request("GET", "/health") == {"status": "healthy"}
    assert orchard.request("GET", "/")["status"] == "running"


def test_basic_exec_sends_nulls_for_unset_options(orchard, sandbox):
    result = orchard.exec(sandbox, "echo 'Hello from sandbox!'")
    assert (result.status, result.exit_code, result.stdout) == (
        "succeeded",
        0,
        "Hello from sandbox!\n",
    )
    assert orchard.exec(sandbox, 'python3 -c "print(2 + 2)"').stdout.strip() == "4"
    assert orchard.exec(sandbox, "pwd").stdout.strip() == "/workspace"  # cwd null: the default


def test_env_cwd_and_login_shell(orchard, sandbox):
    result = orchard.exec(
        sandbox, "printenv API_KEY DEBUG", env={"API_KEY": "secret123", "DEBUG": "true"}
    )
    assert result.stdout.split() == ["secret123", "true"]
    orchard.exec(sandbox, "mkdir -p /workspace/myproject")
    assert (
        orchard.exec(sandbox, "pwd", cwd="/workspace/myproject").stdout.strip()
        == "/workspace/myproject"
    )
    assert orchard.exec(sandbox, "echo $0", login_shell=True).exit_code == 0
    listed = orchard.exec(sandbox, ["ls", "-d", "/workspace/myproject"])
    assert listed.stdout.strip() == "/workspace/myproject" and listed.command == [
        "ls",
        "-d",
        "/workspace/myproject",
    ]


def test_failures_are_jobs_that_say_so(orchard, sandbox):
    failed = orchard.exec(sandbox, "exit 1")
    assert (failed.status, failed.exit_code, failed.error) == ("failed", 1, None)
    missing = orchard.exec(sandbox, "ls /nonexistent")
    assert missing.exit_code != 0 and "nonexistent" in missing.stderr
    slow = orchard.exec(sandbox, "sleep 10", timeout=2)
    assert slow.status == "failed" and "timed out after 2 s" in slow.error


def test_polled_exec_and_get_job(orchard, sandbox):
    result = orchard.exec_polled(sandbox, "echo polled")
    assert (result.status, result.stdout) == ("succeeded", "polled\n")


def test_files_round_trip_and_listing(orchard, sandbox):
    script = b"import json\nprint(json.dumps({'sum': sum([1, 2, 3, 4, 5])}))\n"
    written = orchard.upload_content(sandbox, script, "/workspace/script.py")
    assert written["success"] is True and written["size"] == len(script)
    files = {f["name"]: f for f in orchard.list_files(sandbox, "/workspace")}
    assert (files["script.py"]["type"], files["script.py"]["size"]) == ("file", len(script))
    assert json.loads(orchard.exec(sandbox, "python3 /workspace/script.py").stdout) == {"sum": 15}
    assert orchard.download_content(sandbox, "/workspace/script.py") == script
    orchard.exec(sandbox, "echo 'Generated in sandbox' > /workspace/output.txt")
    assert orchard.download_content(sandbox, "/workspace/output.txt") == b"Generated in sandbox\n"


def test_apply_patch(orchard, sandbox):
    orchard.exec(
        sandbox,
        "mkdir -p /workspace/repo && cd /workspace/repo && git init -q && "
        "printf 'def greet(name):\\n    return name\\n' > app.py",
    )
    patch = textwrap.dedent("""\
        --- a/repo/app.py
        +++ b/repo/app.py
        @@ -1,2 +1,2 @@
         def greet(name):
        -    return name
        +    return f"Hello, {name}!"
        """)
    applied = orchard.request(
        "POST", f"/sandboxes/{sandbox}/apply_patch", json={"patch": patch, "timeout_seconds": 30}
    )
    assert applied["success"] is True and applied["exit_code"] == 0, applied
    assert "Hello" in orchard.exec(sandbox, "cat /workspace/repo/app.py").stdout


def test_lifecycle_routes(orchard):
    sandbox_id = orchard.create_sandbox(block_network=False, cpu="1000m", memory="1Gi", timeout=420)
    found = orchard.request("GET", f"/sandboxes/{sandbox_id}")
    assert found["sandbox_id"] == sandbox_id and found["ready"] is True
    assert found["spec"]["network"] == "full" and found["spec"]["limits"]["cpu"] == 1.0
    assert found["spec"]["timeout"] == 3600  # Orchard's `timeout` is a readiness wait, not a TTL
    assert orchard.request("POST", f"/sandboxes/{sandbox_id}/heartbeat")["status"] == "ok"
    assert orchard.request("GET", "/resources")["status"] == "ok"
    assert orchard.request("DELETE", f"/sandboxes/{sandbox_id}")["status"] == "deleted"
    with pytest.raises(httpx.HTTPStatusError) as gone:
        orchard.request("GET", f"/sandboxes/{sandbox_id}")
    assert gone.value.response.status_code == 404
    with pytest.raises(httpx.HTTPStatusError) as unknown:  # its exec on a deleted sandbox
        orchard.exec(sandbox_id, "true")
    assert unknown.value.response.status_code == 404


def _init_frame(cmd: list[str], rows: int = 24, cols: int = 80) -> str:
    """process.py's init frame: env {} when unset, cwd null."""
    return json.dumps(
        {
            "type": "init",
            "cmd": cmd,
            "env": {},
            "cwd": None,
            "rows": rows,
            "cols": cols,
            "login_shell": False,
        }
    )


def _frames_until_exit(ws) -> tuple[bytes, int]:
    output, code = b"", None
    while code is None:
        frame = json.loads(ws.recv(timeout=30))
        if frame["type"] == "stdout":
            output += base64.b64decode(frame["data"])
        elif frame["type"] == "exit":
            code = frame["code"]
    return output, code


def test_pty_frames(orchard, sandbox):
    url = orchard.pty_url(sandbox)
    with connect(url, additional_headers={"X-API-Key": KEY}) as ws:
        ws.send(_init_frame(["bash", "-c", "tty -s && echo HAS_TTY; echo done; exit 7"]))
        assert json.loads(ws.recv(timeout=30))["type"] == "ready"
        output, code = _frames_until_exit(ws)
        assert code == 7 and b"HAS_TTY" in output and b"done" in output
    with connect(url, subprotocols=[f"api_key.{KEY}"]) as ws:  # a client that cannot set headers
        ws.send(_init_frame(["bash", "-c", "stty size"], rows=50, cols=200))
        assert json.loads(ws.recv(timeout=30))["type"] == "ready"
        assert b"50 200" in _frames_until_exit(ws)[0]


def test_pty_key_in_url_is_refused_with_a_reason(orchard, sandbox):
    with (
        connect(orchard.pty_url(sandbox, key_in_url=True)) as ws,
        pytest.raises(ConnectionClosed) as closed,
    ):
        ws.recv(timeout=30)
    assert closed.value.rcvd.code == 4401 and "X-API-Key" in closed.value.rcvd.reason
