"""What only a real runtime can show over REST (the local one): a cancel kills the command's
process group, paths resolve inside the sandbox and never reach the host, and the service's
state (SQLite and the runtime's own records) survives a restart. The REST contract itself is in
test_api.py, over the memory runtime."""

from __future__ import annotations

import os
import uuid

import httpx

from tests.service.conftest import poll
from tests.service.harness import KEYS
from tests.service.test_api import new_sandbox, run


def test_cancel_kills_the_commands_process_group(as_user_local):
    alice = as_user_local("alice")
    sid = new_sandbox(alice)
    command = "sleep 60 & sleep 61 & touch /workspace/started; wait; echo never"
    job = alice.post(f"/sandboxes/{sid}/exec", json={"command": command}).json()

    def started() -> bool:  # the files API takes no exec lock: it answers while the job runs
        return alice.get(f"/sandboxes/{sid}/files/stat", params={"path": "started"}).is_success

    poll(started, "the command starting its children")
    cancelled = alice.post(f"/jobs/{job['job_id']}/cancel").json()
    assert cancelled["status"] == "cancelled"
    assert "sleep 6" not in run(alice, sid, "ps -eo args")["stdout"]  # the whole group went
    alice.delete(f"/sandboxes/{sid}")


def test_paths_resolve_inside_the_sandbox(as_user_local):
    alice = as_user_local("alice")
    sid = new_sandbox(alice)
    secret = f"/tmp/pomona-host-{uuid.uuid4().hex}"
    with open(secret, "w") as f:
        f.write("HOST")
    try:
        run(alice, sid, f"ln -s {secret} /workspace/link")
        for path in (f"/../../..{secret}", "/workspace/link"):
            r = alice.get(f"/sandboxes/{sid}/files", params={"path": path})
            assert r.status_code in (404, 422), (
                r.text
            )  # resolved inside the sandbox: not the host's
            assert r.json()["error"] in ("PathOutsideSandbox", "FileNotFoundInSandbox")
        alice.put(f"/sandboxes/{sid}/files/raw", params={"path": "/workspace/link"}, content=b"x")
        assert open(secret).read() == "HOST"
    finally:
        os.unlink(secret)
    alice.delete(f"/sandboxes/{sid}")


def test_state_survives_a_restart(state_root):
    from pomona.orchestrator.server.app import build
    from tests.service.conftest import running_service
    from tests.service.harness import server_thread

    state = state_root / "restart"
    headers = {"X-API-Key": KEYS["alice"]}
    app = build("local", str(state), api_keys=KEYS)
    with server_thread(app) as url:
        client = httpx.Client(base_url=url, headers=headers, timeout=60)
        sid = new_sandbox(client, labels={"keep": "me"})
        job = run(client, sid, "echo before > f")["job_id"]
        client.close()
    with running_service(state) as url:  # a new process would do the same: SQLite file + adoption
        client = httpx.Client(base_url=url, headers=headers, timeout=60)
        assert [s["id"] for s in client.get("/sandboxes", params={"label": "keep=me"}).json()] == [
            sid
        ]
        assert client.get(f"/jobs/{job}").json()["status"] == "succeeded"
        assert run(client, sid, "cat f")["stdout"] == "before\n"
        bob = httpx.Client(base_url=url, headers={"X-API-Key": KEYS["bob"]}, timeout=30)
        assert bob.get(f"/sandboxes/{sid}").status_code == 404
        bob.close()
        client.close()
