"""The REST contract with real HTTP, over the memory runtime (what is tested here is the
service, not a runtime): Orchard-compatible routes, auth and ownership, status codes and error
bodies, jobs with idempotency keys, streaming, cancel, admission control and the additions.
tests/service/test_local.py holds what only a real runtime can show over REST."""

from __future__ import annotations

import base64
import io
import json
import tarfile
import threading
import uuid

import httpx
import pytest

from tests.service import commands
from tests.service.conftest import MAX_BODY, memory_service, poll
from tests.service.harness import KEYS


def new_sandbox(client: httpx.Client, **spec) -> str:
    sandbox_id = spec.pop("sandbox_id", f"t-{uuid.uuid4().hex[:10]}")
    r = client.post("/sandboxes", json={"image": "host", "sandbox_id": sandbox_id, **spec})
    assert r.status_code == 200, r.text
    return sandbox_id


def run(client: httpx.Client, sandbox_id: str, command, **options) -> dict:
    r = client.post(
        f"/sandboxes/{sandbox_id}/exec", json={"command": command, "wait": True, **options}
    )
    assert r.status_code == 200, r.text
    return r.json()


def test_root_and_health_need_no_key(as_user):
    anon = as_user(None)
    root = anon.get("/").json()
    replica = root.pop("replica")  # which replica answered: several share one port or store
    assert root == {"service": "pomona", "version": "0.1.0", "status": "running"}
    assert isinstance(replica, str) and replica
    assert anon.get("/health").json() == {"status": "healthy"}
    assert anon.get("/health").headers["x-request-id"]


def test_missing_key_is_401_and_wrong_key_403(as_user, memory):
    r = as_user(None).get("/sandboxes")
    assert r.status_code == 401 and r.json()["error"] == "AuthenticationRequired"
    assert "X-API-Key" in r.json()["detail"] and r.json()["request_id"]
    r = httpx.get(memory.url + "/sandboxes", headers={"X-API-Key": "nope"})
    assert r.status_code == 403 and r.json()["error"] == "PermissionDenied"


def test_keys_own_their_sandboxes_and_admin_sees_all(as_user, memory):
    alice, bob, admin = as_user("alice"), as_user("bob"), as_user("admin")
    sid = new_sandbox(alice, labels={"run": "own"})
    try:
        assert bob.get(f"/sandboxes/{sid}").status_code == 404
        assert run(alice, sid, "echo mine")["stdout"] == "mine\n"
        for method, path in (
            ("POST", "exec"),
            ("GET", "files/list"),
            ("POST", "heartbeat"),
            ("POST", "snapshot"),
            ("POST", "apply_patch"),
        ):
            body = (
                {"command": "echo bob"}
                if path == "exec"
                else {"patch": "x"}
                if path == "apply_patch"
                else None
            )
            r = bob.request(method, f"/sandboxes/{sid}/{path}", json=body)
            assert r.status_code == 404 and r.json()["error"] == "SandboxNotFound", (path, r.text)
        assert [c.command for c in memory.runtime.sandboxes[sid].commands] == ["echo mine"]
        assert bob.delete(f"/sandboxes/{sid}").json()["existed"] is False
        assert sid not in [s["id"] for s in bob.get("/sandboxes").json()]
        assert sid in [s["id"] for s in admin.get("/sandboxes").json()]
        assert run(admin, sid, "echo admin")["stdout"] == "admin\n"
        r = bob.post("/sandboxes", json={"image": "host", "sandbox_id": sid})
        assert r.status_code == 409 and "taken" in r.json()["detail"]
    finally:
        assert alice.delete(f"/sandboxes/{sid}").json() == {
            "status": "deleted",
            "sandbox_id": sid,
            "existed": True,
        }


def test_orchard_create_body_and_views(as_user):
    alice = as_user("alice")
    orchard = {
        "image": "host",
        "block_network": True,
        "cpu": "1",
        "memory": "256Mi",
        "sandbox_id": "orchard-style",
    }
    r = alice.post("/sandboxes", json=orchard)
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["sandbox_id"], body["image"], body["ready"], body["status"], body["owner"]) == (
        "orchard-style",
        "host",
        True,
        "ready",
        "alice",
    )
    assert body["spec"]["network"] == "none" and body["spec"]["limits"]["memory"] == 256 * 2**20
    again = alice.post("/sandboxes", json=orchard)
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
    commands.reset("job")
    r = alice.post(
        f"/sandboxes/{sid}/exec", json={"command": ["hold", "job"], "timeout_seconds": 30}
    )
    job = r.json()
    assert r.status_code == 200 and job["status"] in ("queued", "running")
    assert alice.get(f"/jobs/{job['job_id']}").json()["exit_code"] is None
    commands.release("job")
    done = alice.get(f"/jobs/{job['job_id']}/wait", params={"timeout": 30}).json()
    assert (done["status"], done["exit_code"]) == ("succeeded", 0)
    assert alice.get(f"/jobs/{job['job_id']}").json()["completed_at"] >= done["started_at"]
    assert as_user("bob").get(f"/jobs/{job['job_id']}").status_code == 404
    failed = run(alice, sid, ["say", "out\n", "err\n", "3"])
    assert (failed["status"], failed["exit_code"], failed["stdout"], failed["stderr"]) == (
        "failed",
        3,
        "out\n",
        "err\n",
    )
    ok = run(alice, sid, "say '' '' 124")
    assert ok["exit_code"] == 124 and ok["timed_out"] is False and ok["status"] == "failed"
    slow = run(alice, sid, "sleep 60", timeout=0.5)
    assert (slow["timed_out"], slow["exit_code"], slow["status"]) == (True, -9, "failed")
    alice.delete(f"/sandboxes/{sid}")


def test_expired_job_wait_is_408_and_cancel_stops_it(as_user, memory):
    alice = as_user("alice")
    sid = new_sandbox(alice)
    commands.reset("cancel-me")
    job = alice.post(f"/sandboxes/{sid}/exec", json={"command": "hold cancel-me"}).json()
    assert commands.wait_started("cancel-me")
    r = alice.get(f"/jobs/{job['job_id']}/wait", params={"timeout": 0.3})
    assert r.status_code == 408 and r.json()["error"] == "WaitTimedOut"
    assert r.json()["job_id"] == job["job_id"]
    cancelled = alice.post(f"/jobs/{job['job_id']}/cancel").json()
    assert cancelled["status"] == "cancelled" and "cancelled" in cancelled["error"]
    assert cancelled["error_type"] == "JobCancelled"
    assert run(alice, sid, "echo next")["stdout"] == "next\n"  # the sandbox's exec lock is free
    alice.delete(f"/sandboxes/{sid}")


def test_idempotency_key_never_runs_a_command_twice(as_user, memory):
    alice = as_user("alice")
    sid = new_sandbox(alice)
    body = {"command": "count runs", "wait": True}
    first = alice.post(
        f"/sandboxes/{sid}/exec", json=body, headers={"Idempotency-Key": "k1"}
    ).json()
    again = alice.post(
        f"/sandboxes/{sid}/exec", json=body, headers={"Idempotency-Key": "k1"}
    ).json()
    in_body = alice.post(f"/sandboxes/{sid}/exec", json={**body, "idempotency_key": "k1"}).json()
    assert first["job_id"] == again["job_id"] == in_body["job_id"] and again["stdout"] == "1\n"
    assert len(memory.runtime.sandboxes[sid].commands) == 1
    other = alice.post(
        f"/sandboxes/{sid}/exec", json={"command": "echo"}, headers={"Idempotency-Key": "k1"}
    )
    assert other.status_code == 409 and "different command" in other.json()["detail"]
    bobs = as_user("bob").post(
        f"/sandboxes/{sid}/exec", json=body, headers={"Idempotency-Key": "k1"}
    )
    assert bobs.status_code == 404  # a key is scoped to its owner: no peeking at alice's job
    alice.delete(f"/sandboxes/{sid}")


def test_streaming_exec_is_ndjson_as_it_comes(as_user):
    alice = as_user("alice")
    sid = new_sandbox(alice)
    commands.reset("drip")
    with alice.stream("POST", f"/sandboxes/{sid}/exec/stream", json={"command": "drip"}) as r:
        assert (
            r.headers["content-type"].startswith("application/x-ndjson") and r.headers["x-job-id"]
        )
        lines = r.iter_lines()
        first = json.loads(next(lines))  # arrives while the command still holds
        assert first == {"type": "chunk", "stream": "stdout", "data": "one\n"}
        commands.release("drip")
        rest = [json.loads(line) for line in lines if line]
    assert [(x["type"], x.get("stream")) for x in rest] == [("chunk", "stderr"), ("result", None)]
    assert rest[-1]["exit_code"] == 0 and rest[-1]["stdout"] == "one\n"
    alice.delete(f"/sandboxes/{sid}")


def test_files_base64_raw_list_stat_tar(as_user):
    alice = as_user("alice")
    sid = new_sandbox(alice)
    r = alice.post(
        f"/sandboxes/{sid}/files",
        json={"path": "/workspace/a.txt", "content": base64.b64encode(b"hello\n").decode()},
    )
    assert r.json() == {"success": True, "path": "/workspace/a.txt", "size": 6}
    got = alice.get(f"/sandboxes/{sid}/files", params={"path": "/workspace/a.txt"}).json()
    assert base64.b64decode(got["content"]) == b"hello\n" and got["size"] == 6
    assert (
        alice.put(
            f"/sandboxes/{sid}/files/raw", params={"path": "b.bin"}, content=b"\x00\xff"
        ).json()["size"]
        == 2
    )
    assert alice.get(f"/sandboxes/{sid}/files/raw", params={"path": "b.bin"}).content == b"\x00\xff"
    names = [f["name"] for f in alice.get(f"/sandboxes/{sid}/files/list").json()["files"]]
    assert names == ["a.txt", "b.bin"]
    stat = alice.get(f"/sandboxes/{sid}/files/stat", params={"path": "a.txt"}).json()
    assert (stat["type"], stat["size"], stat["path"]) == ("file", 6, "/workspace/a.txt")
    tar = alice.get(f"/sandboxes/{sid}/archive", params={"path": "/workspace"}).content
    assert {"a.txt", "b.bin"} <= {
        n.removeprefix("./") for n in tarfile.open(fileobj=io.BytesIO(tar)).getnames()
    }
    assert (
        alice.put(f"/sandboxes/{sid}/archive", params={"path": "copy"}, content=tar).status_code
        == 200
    )
    assert (
        alice.get(f"/sandboxes/{sid}/files/raw", params={"path": "copy/a.txt"}).content
        == b"hello\n"
    )
    assert alice.delete(f"/sandboxes/{sid}/files", params={"path": "b.bin"}).json()["success"]
    r = alice.get(f"/sandboxes/{sid}/files", params={"path": "b.bin"})
    assert r.status_code == 404 and r.json()["error"] == "FileNotFoundInSandbox"
    r = alice.delete(f"/sandboxes/{sid}/files", params={"path": "copy"})
    assert r.status_code == 422 and "recursive" in r.json()["detail"]
    assert (
        alice.delete(
            f"/sandboxes/{sid}/files", params={"path": "copy", "recursive": True}
        ).status_code
        == 200
    )
    r = alice.put(f"/sandboxes/{sid}/archive", params={"path": "x"}, content=b"not a tar at all")
    assert r.status_code == 422 and r.json()["error"] == "InvalidRequest"
    alice.delete(f"/sandboxes/{sid}")


def test_apply_patch_reports_the_strategy_or_every_attempt(as_user, memory):
    """The service tries `git apply`, then `patch`, each as a dry run first, and applies only
    one that fits whole (here neither command exists: the report lists both attempts, and only
    the dry runs ran). The real strategies run in tests/conformance/test_patch.py."""
    alice = as_user("alice")
    sid = new_sandbox(alice)
    patch = "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-hello\n+patched\n"
    applied = alice.post(f"/sandboxes/{sid}/apply_patch", json={"patch": patch}).json()
    assert applied["success"] is False and applied["exit_code"] == 1  # "git" is not a command here
    assert (
        "git apply (exit 127)" in applied["error"]
        and "patch --fuzz=5 (exit 127)" in applied["error"]
    )
    ran = [c.command for c in memory.runtime.sandboxes[sid].commands]
    assert [c.split()[0] for c in ran] == ["git", "patch"]  # dry runs only: nothing was applied
    assert not any(
        name.startswith("/tmp/.pomona-patch") for name in memory.runtime.sandboxes[sid].files
    )
    empty = alice.post(f"/sandboxes/{sid}/apply_patch", json={"patch": "  "}).json()
    assert empty["success"] is False and "empty" in empty["error"]
    alice.delete(f"/sandboxes/{sid}")


def test_list_by_label(as_user):
    alice = as_user("alice")
    a = new_sandbox(alice, labels={"run": "r9", "task": "t1"})
    b = new_sandbox(alice, labels={"run": "r9", "task": "t2"})

    def ids(*labels: str) -> list[str]:
        found = alice.get("/sandboxes", params=[("label", x) for x in labels]).json()
        return sorted(s["id"] for s in found)

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
    alice.put(f"/sandboxes/{sid}/files/raw", params={"path": "state"}, content=b"base\n")
    snap = alice.post(f"/sandboxes/{sid}/snapshot", json={"snapshot_id": "snap-api-1"}).json()
    assert snap["id"] == "snap-api-1"
    assert (
        alice.post(f"/sandboxes/{sid}/snapshot", json={"snapshot_id": "snap-api-1"}).json()["id"]
        == "snap-api-1"
    )
    assert bob.post("/snapshots/snap-api-1/fork", json={"k": 1}).status_code == 404
    assert "snap-api-1" not in [s["id"] for s in bob.get("/snapshots").json()]
    assert bob.delete("/snapshots/snap-api-1").json()["deleted"] is False
    forks = alice.post(
        "/snapshots/snap-api-1/fork", json={"k": 2, "labels": {"branch": "x"}}
    ).json()
    assert len(forks) == 2 and all(f["spec"]["labels"]["branch"] == "x" for f in forks)
    assert all(f["snapshot"] == "snap-api-1" and f["owner"] == "alice" for f in forks)
    states = [
        alice.get(f"/sandboxes/{f['id']}/files/raw", params={"path": "state"}).content
        for f in forks
    ]
    assert states == [b"base\n", b"base\n"]
    wrong = alice.post("/snapshots/snap-api-1/fork", json={"k": 2, "sandbox_ids": ["only-one"]})
    assert wrong.status_code == 409 and "sandbox ids" in wrong.json()["detail"]
    conflict = alice.delete("/snapshots/snap-api-1")
    assert conflict.status_code == 409
    for f in forks:
        alice.delete(f"/sandboxes/{f['id']}")
    assert alice.delete("/snapshots/snap-api-1").json()["deleted"] is True
    alice.delete(f"/sandboxes/{sid}")


@pytest.mark.parametrize(
    "request_kwargs",
    [
        {"content": b"{not json", "headers": {"Content-Type": "application/json"}},
        {"json": {"image": "host", "sandbox_id": "../escape"}},
        {"json": {"image": "host", "sandbox_id": "UPPER"}},
        {"json": {"image": "host", "network": "gateway"}},
        {"json": {"image": "host", "memory": "lots"}},
        {"json": {"image": "host", "unknown_field": 1}},
        {"json": {"image": "host", "cpu": 1000}},  # valid, but more cores than the machine has
    ],
)
def test_bad_create_input_is_422_saying_what_to_fix(as_user, request_kwargs):
    r = as_user("alice").post("/sandboxes", **request_kwargs)
    assert r.status_code == 422, r.text
    assert r.json()["error"] == "InvalidRequest" and len(r.json()["detail"]) > 10


def test_unknown_ids_are_404(as_user):
    alice = as_user("alice")
    for method, path in (
        ("GET", "/sandboxes/nope-1"),
        ("POST", "/sandboxes/nope-1/heartbeat"),
        ("GET", "/jobs/job-nope"),
        ("GET", "/jobs/job-nope/wait"),
        ("POST", "/jobs/job-nope/cancel"),
        ("POST", "/snapshots/nope/fork"),
        ("GET", "/sandboxes/nope-1/files/list"),
        ("GET", "/no/such/route"),
    ):
        r = alice.request(method, path, json={"k": 1} if "fork" in path else None)
        assert r.status_code == 404, (method, path, r.text)
        assert r.json()["detail"]
    r = alice.post("/sandboxes/nope-1/exec", json={"command": "true"})
    assert (
        r.status_code == 404
        and r.json()["detail"] == "no sandbox with id 'nope-1' (deleted, expired, or never created)"
    )
    assert alice.delete("/sandboxes/nope-1").json()["existed"] is False
    r = alice.put("/sandboxes", json={})
    assert r.status_code == 405 and r.json()["error"] == "MethodNotAllowed"


def test_a_sandbox_whose_init_died_is_failed_and_refuses_commands(as_user, memory):
    alice = as_user("alice")
    sid = new_sandbox(alice)
    memory.runtime.sandboxes[sid].fail()
    assert alice.get(f"/sandboxes/{sid}").json()["status"] == "failed"
    job = run(alice, sid, "echo never")
    assert (job["status"], job["error_type"]) == ("failed", "SandboxConflict")
    r = alice.get(f"/sandboxes/{sid}/wait", params={"timeout": 5})
    assert r.status_code == 409 and "failed" in r.json()["detail"]
    assert alice.delete(f"/sandboxes/{sid}").json()["existed"] is True


def test_oversized_and_malformed_bodies(as_user):
    alice = as_user("alice")
    sid = new_sandbox(alice)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.addfile(tarfile.TarInfo("../../../../tmp/evil"), io.BytesIO(b""))
    r = alice.put(
        f"/sandboxes/{sid}/archive", params={"path": "/workspace"}, content=buf.getvalue()
    )
    assert r.status_code == 422 and r.json()["error"] == "PathOutsideSandbox"
    r = alice.put(
        f"/sandboxes/{sid}/files/raw", params={"path": "big"}, content=b"x" * (MAX_BODY + 1)
    )
    assert (
        r.status_code == 413 and r.json()["error"] == "TooLarge" and "limit" in r.json()["detail"]
    )
    assert r.headers["x-request-id"] == r.json()["request_id"]

    def chunks():  # no Content-Length: the limit holds on what arrives
        for _ in range(MAX_BODY // 65536 + 2):
            yield b"y" * 65536

    r = alice.put(f"/sandboxes/{sid}/files/raw", params={"path": "big"}, content=chunks())
    assert r.status_code == 413, r.text
    r = alice.post(f"/sandboxes/{sid}/files", json={"path": "x", "content": "%%%not-base64"})
    assert r.status_code == 422 and "base64" in r.json()["detail"]
    alice.delete(f"/sandboxes/{sid}")


def test_admission_control_queues_then_503_with_retry_after(state_root):
    with memory_service(state_root / "admission", max_execs=1, queue=1) as served:
        client = httpx.Client(base_url=served.url, headers={"X-API-Key": KEYS["alice"]}, timeout=60)
        sids = [new_sandbox(client) for _ in range(3)]
        commands.reset("admitted")
        results: dict[str, httpx.Response] = {}

        def call(target: str) -> None:
            results[target] = client.post(
                f"/sandboxes/{target}/exec", json={"command": "hold admitted", "wait": True}
            )

        first = threading.Thread(target=call, args=(sids[0],))
        first.start()  # runs, and holds the only slot
        assert commands.wait_started("admitted")
        second = threading.Thread(target=call, args=(sids[1],))
        second.start()  # queued behind it
        poll(lambda: served.state.execs.waiting == 1, "the second exec queueing")
        refused = client.post(f"/sandboxes/{sids[2]}/exec", json={"command": "echo", "wait": True})
        assert refused.status_code == 503 and refused.headers["Retry-After"] == "1"
        assert refused.json()["error"] == "Overloaded" and "queued" in refused.json()["detail"]
        commands.release("admitted")
        first.join()
        second.join()
        assert [results[s].status_code for s in sids[:2]] == [200, 200]
        assert served.runtime.sandboxes[sids[2]].commands == []  # turned away before it ran
        client.close()


def test_file_operations_are_bounded_per_key(state_root):
    """A key's file operations beyond its share are 503 at once; another key is not held up."""
    from pomona.orchestrator.server.policy import TenantPolicy

    with memory_service(
        state_root / "file-slots", policy=TenantPolicy.of(file_ops_per_key=1)
    ) as served:
        alice = httpx.Client(base_url=served.url, headers={"X-API-Key": KEYS["alice"]}, timeout=60)
        bob = httpx.Client(base_url=served.url, headers={"X-API-Key": KEYS["bob"]}, timeout=60)
        sid, bobs = new_sandbox(alice), new_sandbox(bob)

        def endless():  # an upload that holds alice's only slot until the test lets it end
            yield b"x"
            assert commands.wait_released("upload")

        commands.reset("upload")
        uploading = threading.Thread(
            target=alice.put,
            args=(f"/sandboxes/{sid}/files/raw",),
            kwargs={"params": {"path": "slow"}, "content": endless()},
        )
        uploading.start()
        slots = served.state.policy._file_ops
        poll(lambda: "alice" in slots and slots["alice"].locked(), "the upload taking the slot")
        busy = alice.get(f"/sandboxes/{sid}/files/list")
        assert busy.status_code == 503 and busy.json()["error"] == "Overloaded"
        assert bob.get(f"/sandboxes/{bobs}/files/list").status_code == 200
        commands.release("upload")
        uploading.join()
        assert alice.get(f"/sandboxes/{sid}/files/list").status_code == 200  # the slot came back
        alice.close()
        bob.close()
