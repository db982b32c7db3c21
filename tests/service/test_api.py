"""The REST contract with real HTTP: Orchard-compatible routes, auth and ownership, status codes
and error bodies, jobs with idempotency keys, streaming, cancel, and the additions."""

from __future__ import annotations

import base64
import io
import json
import os
import tarfile
import threading
import uuid

import httpx
import pytest

from tests.service.conftest import MAX_BODY


def new_sandbox(client: httpx.Client, **spec) -> str:
    sandbox_id = spec.pop("sandbox_id", f"t-{uuid.uuid4().hex[:10]}")
    r = client.post("/sandboxes", json={"image": "host", "sandbox_id": sandbox_id, **spec})
    assert r.status_code == 200, r.text
    return sandbox_id


def run(client: httpx.Client, sandbox_id: str, command, **options) -> dict:
    r = client.post(f"/sandboxes/{sandbox_id}/exec", json={"command": command, "wait": True, **options})
    assert r.status_code == 200, r.text
    return r.json()


def test_root_and_health_need_no_key(as_user):
    anon = as_user(None)
    assert anon.get("/").json() == {"service": "pomona", "version": "0.1.0", "status": "running"}
    assert anon.get("/health").json() == {"status": "healthy"}
    assert anon.get("/health").headers["x-request-id"]


def test_missing_key_is_401_and_wrong_key_403(as_user, service_url):
    r = as_user(None).get("/sandboxes")
    assert r.status_code == 401 and r.json()["error"] == "AuthenticationRequired"
    assert "X-API-Key" in r.json()["detail"] and r.json()["request_id"]
    r = httpx.get(service_url + "/sandboxes", headers={"X-API-Key": "nope"})
    assert r.status_code == 403 and r.json()["error"] == "PermissionDenied"


def test_keys_own_their_sandboxes_and_admin_sees_all(as_user):
    alice, bob, admin = as_user("alice"), as_user("bob"), as_user("admin")
    sid = new_sandbox(alice, labels={"run": "own"})
    try:
        assert bob.get(f"/sandboxes/{sid}").status_code == 404
        assert run(alice, sid, "echo mine")["stdout"] == "mine\n"
        assert bob.post(f"/sandboxes/{sid}/exec", json={"command": "true"}).status_code == 404
        assert bob.delete(f"/sandboxes/{sid}").json()["existed"] is False
        assert sid not in [s["id"] for s in bob.get("/sandboxes").json()]
        assert sid in [s["id"] for s in admin.get("/sandboxes").json()]
        r = bob.post("/sandboxes", json={"image": "host", "sandbox_id": sid})
        assert r.status_code == 409 and "taken" in r.json()["detail"]
    finally:
        assert alice.delete(f"/sandboxes/{sid}").json() == {"status": "deleted", "sandbox_id": sid,
                                                             "existed": True}


def test_orchard_create_body_and_views(as_user):
    alice = as_user("alice")
    r = alice.post("/sandboxes", json={"image": "host", "block_network": True, "cpu": "1",
                                       "memory": "256Mi", "sandbox_id": "orchard-style"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["sandbox_id"], body["image"], body["ready"], body["status"]) == \
        ("orchard-style", "host", True, "ready")
    assert body["spec"]["network"] == "none" and body["spec"]["limits"]["memory"] == 256 * 2**20
    again = alice.post("/sandboxes", json={"image": "host", "block_network": True, "cpu": "1",
                                           "memory": "256Mi", "sandbox_id": "orchard-style"})
    assert again.json()["created_at"] == body["created_at"]  # idempotent: the same sandbox
    conflict = alice.post("/sandboxes", json={"image": "host", "sandbox_id": "orchard-style"})
    assert conflict.status_code == 409 and "different spec" in conflict.json()["detail"]
    assert alice.get("/sandboxes/orchard-style/wait", params={"timeout": 5}).json()["ready"] is True
    beat = alice.post("/sandboxes/orchard-style/heartbeat").json()
    assert beat["status"] == "ok" and beat["expires_at"] > body["expires_at"] - 1
    resources = alice.get("/resources").json()
    assert resources["status"] == "ok" and resources["nodes"][0]["capacity"]["cpu"] >= 1
    assert "orchard-style" in [p["name"] for p in resources["sandbox_pods"]]
    alice.delete("/sandboxes/orchard-style")


def test_jobs_wait_false_then_wait_and_get(as_user):
    alice = as_user("alice")
    sid = new_sandbox(alice)
    r = alice.post(f"/sandboxes/{sid}/exec", json={"command": ["sh", "-c", "echo out; exit 3"],
                                                   "timeout_seconds": 30})
    job = r.json()
    assert r.status_code == 200 and job["status"] in ("queued", "running", "failed")
    done = alice.get(f"/jobs/{job['job_id']}/wait", params={"timeout": 30}).json()
    assert (done["status"], done["exit_code"], done["stdout"]) == ("failed", 3, "out\n")
    assert alice.get(f"/jobs/{job['job_id']}").json()["completed_at"] >= done["started_at"]
    assert as_user("bob").get(f"/jobs/{job['job_id']}").status_code == 404
    ok = run(alice, sid, "exit 124")
    assert ok["exit_code"] == 124 and ok["timed_out"] is False and ok["status"] == "failed"
    slow = run(alice, sid, "sleep 5", timeout=0.5)
    assert slow["timed_out"] is True and slow["status"] == "failed"
    alice.delete(f"/sandboxes/{sid}")


def test_expired_job_wait_is_408_and_cancel_stops_it(as_user):
    alice = as_user("alice")
    sid = new_sandbox(alice)
    job = alice.post(f"/sandboxes/{sid}/exec", json={"command": "sleep 60; echo never"}).json()
    r = alice.get(f"/jobs/{job['job_id']}/wait", params={"timeout": 0.3})
    assert r.status_code == 408 and r.json()["error"] == "WaitTimedOut"
    assert r.json()["job_id"] == job["job_id"]
    cancelled = alice.post(f"/jobs/{job['job_id']}/cancel").json()
    assert cancelled["status"] == "cancelled" and "cancelled" in cancelled["error"]
    assert "sleep 60" not in run(alice, sid, "ps -eo args")["stdout"]  # the group was killed
    alice.delete(f"/sandboxes/{sid}")


def test_idempotency_key_never_runs_a_command_twice(as_user):
    alice = as_user("alice")
    sid = new_sandbox(alice)
    body = {"command": "echo run >> /workspace/ran; cat /workspace/ran | wc -l", "wait": True}
    first = alice.post(f"/sandboxes/{sid}/exec", json=body, headers={"Idempotency-Key": "k1"}).json()
    again = alice.post(f"/sandboxes/{sid}/exec", json=body, headers={"Idempotency-Key": "k1"}).json()
    assert first["job_id"] == again["job_id"] and again["stdout"].strip() == "1"
    assert run(alice, sid, "wc -l < /workspace/ran")["stdout"].strip() == "1"
    other = alice.post(f"/sandboxes/{sid}/exec", json={"command": "true"}, headers={"Idempotency-Key": "k1"})
    assert other.status_code == 409 and "different command" in other.json()["detail"]
    alice.delete(f"/sandboxes/{sid}")


def test_streaming_exec_is_ndjson_as_it_comes(as_user):
    alice = as_user("alice")
    sid = new_sandbox(alice)
    with alice.stream("POST", f"/sandboxes/{sid}/exec/stream",
                      json={"command": "echo one; sleep 0.3; echo two >&2"}) as r:
        assert r.headers["content-type"].startswith("application/x-ndjson")
        lines = [json.loads(line) for line in r.iter_lines() if line]
    assert [(x["type"], x.get("stream")) for x in lines] == \
        [("chunk", "stdout"), ("chunk", "stderr"), ("result", None)]
    assert lines[-1]["exit_code"] == 0 and lines[-1]["stdout"] == "one\n"
    alice.delete(f"/sandboxes/{sid}")


def test_files_base64_raw_list_tar_and_patch(as_user):
    alice = as_user("alice")
    sid = new_sandbox(alice)
    r = alice.post(f"/sandboxes/{sid}/files", json={"path": "/workspace/a.txt",
                                                    "content": base64.b64encode(b"hello\n").decode()})
    assert r.json() == {"success": True, "path": "/workspace/a.txt", "size": 6}
    got = alice.get(f"/sandboxes/{sid}/files", params={"path": "/workspace/a.txt"}).json()
    assert base64.b64decode(got["content"]) == b"hello\n" and got["size"] == 6
    assert alice.put(f"/sandboxes/{sid}/files/raw", params={"path": "b.bin"}, content=b"\x00\xff").json()["size"] == 2
    assert alice.get(f"/sandboxes/{sid}/files/raw", params={"path": "b.bin"}).content == b"\x00\xff"
    names = [f["name"] for f in alice.get(f"/sandboxes/{sid}/files/list").json()["files"]]
    assert names == ["a.txt", "b.bin"]
    assert alice.get(f"/sandboxes/{sid}/files/stat", params={"path": "a.txt"}).json()["size"] == 6
    tar = alice.get(f"/sandboxes/{sid}/archive", params={"path": "/workspace"}).content
    assert {"a.txt", "b.bin"} <= {n.removeprefix("./") for n in tarfile.open(fileobj=io.BytesIO(tar)).getnames()}
    assert alice.put(f"/sandboxes/{sid}/archive", params={"path": "copy"}, content=tar).status_code == 200
    assert run(alice, sid, "cat copy/a.txt")["stdout"] == "hello\n"
    run(alice, sid, "git init -q . && git add a.txt")
    patch = "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-hello\n+patched\n"
    applied = alice.post(f"/sandboxes/{sid}/apply_patch", json={"patch": patch}).json()
    assert applied["success"] is True and applied["exit_code"] == 0
    assert run(alice, sid, "cat a.txt")["stdout"] == "patched\n"
    wrong = "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-not there\n+x\n"
    failed = alice.post(f"/sandboxes/{sid}/apply_patch", json={"patch": wrong})
    assert failed.status_code == 200 and failed.json()["success"] is False and failed.json()["error"]
    assert alice.delete(f"/sandboxes/{sid}/files", params={"path": "b.bin"}).json()["success"]
    r = alice.get(f"/sandboxes/{sid}/files", params={"path": "b.bin"})
    assert r.status_code == 404 and r.json()["error"] == "FileNotFoundInSandbox"
    alice.delete(f"/sandboxes/{sid}")


def test_list_by_label(as_user):
    alice = as_user("alice")
    a = new_sandbox(alice, labels={"run": "r9", "task": "t1"})
    b = new_sandbox(alice, labels={"run": "r9", "task": "t2"})
    ids = lambda *labels: sorted(s["id"] for s in alice.get("/sandboxes", params=[("label", x) for x in labels]).json())  # noqa: E731
    assert ids("run=r9") == sorted([a, b])
    assert ids("run=r9", "task=t2") == [b]
    assert ids("run=none") == []
    r = alice.get("/sandboxes", params={"label": "no-equals-sign"})
    assert r.status_code == 422 and "key=value" in r.json()["detail"]
    alice.delete(f"/sandboxes/{a}")
    alice.delete(f"/sandboxes/{b}")


def test_snapshot_fork_owned_by_the_key(as_user):
    alice, bob = as_user("alice"), as_user("bob")
    sid = new_sandbox(alice)
    run(alice, sid, "echo base > state")
    snap = alice.post(f"/sandboxes/{sid}/snapshot", json={"snapshot_id": "snap-api-1"}).json()
    assert snap["id"] == "snap-api-1"
    assert alice.post(f"/sandboxes/{sid}/snapshot", json={"snapshot_id": "snap-api-1"}).json()["id"] == "snap-api-1"
    assert bob.post("/snapshots/snap-api-1/fork", json={"k": 1}).status_code == 404
    assert "snap-api-1" not in [s["id"] for s in bob.get("/snapshots").json()]
    forks = alice.post("/snapshots/snap-api-1/fork", json={"k": 2, "labels": {"branch": "x"}}).json()
    assert len(forks) == 2 and all(f["spec"]["labels"]["branch"] == "x" for f in forks)
    assert [run(alice, f["id"], "cat state")["stdout"] for f in forks] == ["base\n", "base\n"]
    conflict = alice.delete("/snapshots/snap-api-1")
    assert conflict.status_code == 409
    for f in forks:
        alice.delete(f"/sandboxes/{f['id']}")
    assert alice.delete("/snapshots/snap-api-1").json()["deleted"] is True
    alice.delete(f"/sandboxes/{sid}")


@pytest.mark.parametrize("request_kwargs, error", [
    ({"content": b"{not json", "headers": {"Content-Type": "application/json"}}, "InvalidRequest"),
    ({"json": {"image": "host", "sandbox_id": "../escape"}}, "InvalidRequest"),
    ({"json": {"image": "host", "sandbox_id": "UPPER"}}, "InvalidRequest"),
    ({"json": {"image": "host", "network": "gateway"}}, "InvalidRequest"),
    ({"json": {"image": "host", "memory": "lots"}}, "InvalidRequest"),
    ({"json": {"image": "host", "unknown_field": 1}}, "InvalidRequest"),
])
def test_bad_create_input_is_422_saying_what_to_fix(as_user, request_kwargs, error):
    r = as_user("alice").post("/sandboxes", **request_kwargs)
    assert r.status_code == 422, r.text
    assert r.json()["error"] == error and len(r.json()["detail"]) > 10


def test_unknown_ids_are_404(as_user):
    alice = as_user("alice")
    for method, path in (("GET", "/sandboxes/nope-1"), ("POST", "/sandboxes/nope-1/heartbeat"),
                         ("GET", "/jobs/job-nope"), ("GET", "/jobs/job-nope/wait"),
                         ("POST", "/jobs/job-nope/cancel"), ("POST", "/snapshots/nope/fork"),
                         ("GET", "/no/such/route")):
        r = alice.request(method, path, json={"k": 1} if "fork" in path else None)
        assert r.status_code == 404, (method, path, r.text)
        assert r.json()["detail"]
    r = alice.post("/sandboxes/nope-1/exec", json={"command": "true"})
    assert r.status_code == 404 and r.json() ["detail"] == "no sandbox with id 'nope-1' (deleted, expired, or never created)"
    assert alice.delete("/sandboxes/nope-1").json()["existed"] is False


def test_paths_escaping_and_oversized_uploads(as_user):
    alice = as_user("alice")
    sid = new_sandbox(alice)
    secret = f"/tmp/pomona-host-{uuid.uuid4().hex}"
    with open(secret, "w") as f:
        f.write("HOST")
    try:
        run(alice, sid, f"ln -s {secret} /workspace/link")
        for path in (f"/../../..{secret}", "/workspace/link"):
            r = alice.get(f"/sandboxes/{sid}/files", params={"path": path})
            assert r.status_code in (404, 422), r.text  # resolved inside the sandbox: not the host's
            assert r.json()["error"] in ("PathOutsideSandbox", "FileNotFoundInSandbox")
    finally:
        os.unlink(secret)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("../../../../tmp/evil")
        tar.addfile(info, io.BytesIO(b""))
    r = alice.put(f"/sandboxes/{sid}/archive", params={"path": "/workspace"}, content=buf.getvalue())
    assert r.status_code == 422 and r.json()["error"] == "PathOutsideSandbox"
    r = alice.put(f"/sandboxes/{sid}/files/raw", params={"path": "big"}, content=b"x" * (MAX_BODY + 1))
    assert r.status_code == 413 and r.json()["error"] == "TooLarge" and "limit" in r.json()["detail"]

    def chunks():
        for _ in range(MAX_BODY // 65536 + 2):
            yield b"y" * 65536
    r = alice.put(f"/sandboxes/{sid}/files/raw", params={"path": "big"}, content=chunks())
    assert r.status_code == 413, r.text
    r = alice.post(f"/sandboxes/{sid}/files", json={"path": "x", "content": "%%%not-base64"})
    assert r.status_code == 422 and "base64" in r.json()["detail"]
    alice.delete(f"/sandboxes/{sid}")


def test_admission_control_queues_then_503_with_retry_after(state_root):
    from tests.service.conftest import running_service
    from tests.service.harness import KEYS

    with running_service(state_root / "admission", max_execs=1, queue=1) as url:
        client = httpx.Client(base_url=url, headers={"X-API-Key": KEYS["alice"]}, timeout=60)
        sid = new_sandbox(client)
        sids = [sid, new_sandbox(client), new_sandbox(client)]
        started = threading.Barrier(3)
        results: dict[str, httpx.Response] = {}

        def call(target: str) -> None:
            started.wait()
            results[target] = client.post(f"/sandboxes/{target}/exec",
                                          json={"command": "sleep 1.5", "wait": True})
        threads = [threading.Thread(target=call, args=(s,)) for s in sids]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        codes = sorted(r.status_code for r in results.values())
        assert codes == [200, 200, 503], codes  # one runs, one waits in the queue, one is turned away
        refused = next(r for r in results.values() if r.status_code == 503)
        assert refused.headers["Retry-After"] == "1" and refused.json()["error"] == "Overloaded"
        client.close()


def test_state_survives_a_restart(state_root):
    from pomona.orchestrator.server.app import build
    from tests.service.conftest import running_service
    from tests.service.harness import KEYS, server_thread

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
        assert [s["id"] for s in client.get("/sandboxes", params={"label": "keep=me"}).json()] == [sid]
        assert client.get(f"/jobs/{job}").json()["status"] == "succeeded"
        assert run(client, sid, "cat f")["stdout"] == "before\n"
        assert as_other(url, "bob").get(f"/sandboxes/{sid}").status_code == 404
        client.close()


def as_other(url: str, name: str) -> httpx.Client:
    from tests.service.harness import KEYS

    return httpx.Client(base_url=url, headers={"X-API-Key": KEYS[name]}, timeout=30)
