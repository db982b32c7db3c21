"""Faults, with real processes: replicas SIGKILLed mid-exec and mid-create, Redis restarted under
load, a client that vanishes, and two replicas on one Redis with clients alternating between
them. Deadlines below only bound polling; nothing asserts how long anything took."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from pomona import SandboxClient
from pomona.errors import PomonaError, SandboxNotFound
from pomona.orchestrator.runtimes.local.records import Record
from tests.service.harness import KEYS, Replica, unmount


def poll(condition, limit: float = 60.0, what: str = "condition") -> None:
    deadline = time.monotonic() + limit
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} did not happen")
        time.sleep(0.1)


def _inside(state: Path, sandbox_id: str, path: str) -> Path:
    """A path of a local sandbox as the host sees it: through its init's root (its writable
    layer is on a disk image of its own, mounted only in its mount namespace)."""
    record = Record.load(state / "store" / "sandboxes" / sandbox_id)
    return Path(f"/proc/{record.init_pid}/root", path)


def sandbox_dirs(state: Path) -> set[str]:
    return {p.name for p in (state / "store" / "sandboxes").glob("*")}


@pytest.fixture
def state(state_root: Path) -> Iterator[Path]:
    path = state_root / f"faults-{uuid.uuid4().hex[:6]}"
    yield path
    unmount(path)


def sdk(url: str, name: str = "alice") -> SandboxClient:
    return SandboxClient(base_url=url, api_key=KEYS[name])


def test_sigkill_mid_exec_gives_a_clear_error_never_a_second_run(state):
    replica = Replica(state).start()
    try:
        with sdk(replica.url) as client:
            sb = client.create_sandbox(labels={"fault": "exec"})
            outcome: dict[str, object] = {}

            def exec_slow() -> None:
                try:
                    outcome["result"] = sb.exec("echo ran >> /workspace/runs; sleep 3; echo done")
                except PomonaError as e:
                    outcome["error"] = e

            caller = threading.Thread(target=exec_slow)
            caller.start()
            poll(
                lambda: _inside(state, sb.id, "workspace/runs").exists(),
                what="the command starting",
            )
            replica.restart()  # SIGKILL, then a new process on the same port and state
            caller.join(120)
            assert not caller.is_alive()
            if "error" in outcome:  # the answer was lost with the replica: said so, not re-run
                assert "lost" in str(outcome["error"]) and "not re-run" in str(outcome["error"])
            else:
                assert outcome["result"].stdout == "done\n"
            assert sb.exec("sleep 3.5; cat /workspace/runs").stdout == "ran\n"  # ran exactly once
            assert [s.id for s in client.list_sandboxes({"fault": "exec"})] == [sb.id]  # adopted
            sb.delete()
        assert sandbox_dirs(state) == set()
    finally:
        replica.stop()


def test_sigkill_mid_create_leaks_nothing_and_never_duplicates(state):
    replica = Replica(state).start()
    try:
        ids = [f"burst-{i}" for i in range(12)]
        with sdk(replica.url) as client:

            def create(sandbox_id: str) -> str | Exception:
                try:
                    return client.create_sandbox(sandbox_id=sandbox_id, disk="64Mi").id
                except PomonaError as e:
                    return e

            with ThreadPoolExecutor(len(ids)) as pool:
                futures = [pool.submit(create, i) for i in ids]
                poll(lambda: len(sandbox_dirs(state)) >= 2, what="creates starting")
                replica.restart()
                results = [f.result() for f in futures]
            created = {r for r in results if isinstance(r, str)}
            errors = [r for r in results if not isinstance(r, str)]
            assert all(str(e) for e in errors)  # any failure says what happened
            listed = {s.id for s in client.list_sandboxes()}
            assert created <= listed <= set(ids)
            # what is listed works; what is not listed left nothing behind (after recovery)
            for sandbox_id in listed:
                assert client.get_sandbox(sandbox_id).exec("echo ok").stdout == "ok\n"
            poll(
                lambda: sandbox_dirs(state) == {s.id for s in client.list_sandboxes()},
                what="half-created sandboxes being removed",
            )
            for sandbox_id in listed:
                client.delete_sandbox(sandbox_id)
        assert sandbox_dirs(state) == set()
    finally:
        replica.stop()


OWNER = textwrap.dedent("""
    import sys, time
    from pomona import SandboxClient
    client = SandboxClient(base_url=sys.argv[1], api_key=sys.argv[2], auto_cleanup=False)
    print(client.create_sandbox(timeout=2, labels={"owner": "vanished"}).id, flush=True)
    time.sleep(600)
""")


def test_a_client_that_disappears_has_its_sandboxes_reaped_after_ttl(state):
    replica = Replica(state).start()
    try:
        owner = subprocess.Popen(
            [sys.executable, "-c", OWNER, replica.url, KEYS["bob"]],
            stdout=subprocess.PIPE,
            text=True,
        )
        sandbox_id = owner.stdout.readline().strip()
        os.kill(owner.pid, signal.SIGKILL)
        owner.wait()
        with sdk(replica.url, "bob") as client:
            assert client.get_sandbox(sandbox_id).info.expires_at is not None

            def gone() -> bool:
                try:
                    client.get_sandbox(sandbox_id)
                    return False
                except SandboxNotFound:
                    return True

            poll(gone, what="the reaper removing the sandbox")
            assert sandbox_id in client.reap()  # and it says so to its owner
        assert sandbox_id not in sandbox_dirs(state)
    finally:
        replica.stop()


def test_redis_restarted_under_load_the_service_recovers(state, redis_server):
    replica = Replica(state, redis_server.url).start()
    try:
        with sdk(replica.url) as client:
            sandboxes = [client.create_sandbox(labels={"fault": "redis"}) for _ in range(3)]
            stop = threading.Event()
            counts = {sb.id: 0 for sb in sandboxes}
            failures: list[Exception] = []

            def load(sb) -> None:
                while not stop.is_set():
                    n = counts[sb.id] + 1
                    try:
                        assert sb.exec(f"echo {n} >> /workspace/log").exit_code == 0
                    except Exception as e:
                        failures.append(e)
                        return
                    counts[sb.id] = n

            threads = [threading.Thread(target=load, args=(sb,)) for sb in sandboxes]
            for t in threads:
                t.start()
            poll(lambda: min(counts.values()) >= 5, what="load running")
            redis_server.stop()
            time.sleep(1.0)  # requests meet a missing store meanwhile
            redis_server.start()
            before = dict(counts)
            poll(
                lambda: all(counts[k] >= before[k] + 5 for k in counts) or bool(failures),
                what="execs going on after the restart",
            )
            stop.set()
            for t in threads:
                t.join(60)
            assert failures == []
            for sb in sandboxes:  # every command ran exactly once, in order
                lines = sb.exec("cat /workspace/log").stdout.split()
                assert lines == [str(i) for i in range(1, counts[sb.id] + 1)]
            assert {s.id for s in client.list_sandboxes({"fault": "redis"})} == {
                s.id for s in sandboxes
            }
    finally:
        replica.stop()


CRITICAL = (
    "mkdir /tmp/inside 2>/dev/null || echo CONCURRENT; echo {n} >> /workspace/log; "
    "sleep 0.02; rmdir /tmp/inside"
)


def test_two_replicas_one_redis_alternating_clients(state, redis_server):
    replicas = [Replica(state, redis_server.url).start() for _ in range(2)]
    try:
        clients = [sdk(r.url) for r in replicas]
        ids = [f"pair-{uuid.uuid4().hex[:6]}-{i}" for i in range(4)]
        for i, sandbox_id in enumerate(ids):  # created on alternating replicas
            clients[i % 2].create_sandbox(sandbox_id=sandbox_id, labels={"pair": "test"})
        per_sandbox = 16

        def one(i: int, sandbox_id: str) -> str:
            sb = clients[i % 2].get_sandbox(sandbox_id)  # the other replica half of the time
            return sb.exec(CRITICAL.format(n=i)).stdout

        with ThreadPoolExecutor(16) as pool:
            outputs = list(
                pool.map(lambda job: one(*job), [(i, s) for s in ids for i in range(per_sandbox)])
            )
        assert not any("CONCURRENT" in o for o in outputs)  # never two at once on one sandbox
        for sandbox_id in ids:
            log = clients[1].get_sandbox(sandbox_id).exec("cat /workspace/log").stdout.split()
            assert sorted(map(int, log)) == list(range(per_sandbox))  # each exactly once
        for c in clients:  # both replicas see every sandbox
            assert {s.id for s in c.list_sandboxes({"pair": "test"})} == set(ids)
        for i, sandbox_id in enumerate(ids):
            assert clients[(i + 1) % 2].delete_sandbox(sandbox_id) is True
        for c in clients:
            assert c.list_sandboxes({"pair": "test"}) == []
            c.close()
        assert sandbox_dirs(state) == set()
    finally:
        for r in replicas:
            r.stop()


def test_a_job_whose_store_answer_was_lost_runs_exactly_once(state):
    """The store writes the job, then its answer is lost (Redis stopped between the two: the
    restart test's rare failure). The client's retry with the same key must run it, once, and
    not wait forever on a job nothing would start. (The coordinator's rule: the memory runtime.)"""
    import sqlite3

    from pomona.orchestrator.server.store import SqliteStore
    from tests.service.conftest import memory_service

    class AnswerLostOnce(SqliteStore):
        lost = False

        async def add_job(self, job, idempotency_key):
            stored = await super().add_job(job, idempotency_key)
            if not AnswerLostOnce.lost and job.request.command == "count log":
                AnswerLostOnce.lost = True
                raise sqlite3.OperationalError("the store went away before answering")
            return stored

    state.mkdir(parents=True)
    with (
        memory_service(state, AnswerLostOnce(state / "store.db")) as served,
        sdk(served.url) as client,
    ):
        sb = client.create_sandbox()
        result = sb.exec("count log")  # 503, retried with the same key
        assert result.stdout == "1\n" and AnswerLostOnce.lost
        assert len(served.runtime.sandboxes[sb.id].commands) == 1
        # no retry at all (the client gave up, or retried on another replica, which only waits):
        # the replica that stored it starts it at its next maintenance pass, once
        AnswerLostOnce.lost = False
        with httpx.Client(
            base_url=served.url, headers={"X-API-Key": KEYS["alice"]}, timeout=60
        ) as http:
            answer = http.post(f"/sandboxes/{sb.id}/exec", json={"command": "count log"})
        assert answer.status_code == 503 and AnswerLostOnce.lost
        poll(lambda: sb.read_file("log") == b"ran\nran\n", what="the stored job ran")
        assert len(served.runtime.sandboxes[sb.id].commands) == 2


def test_a_clean_stop_of_the_service_releases_the_store(state):
    """SIGTERM to `pomona serve` with no sandbox left: no mount, loop device or cgroup of its
    state dir remains (before, the store stayed mounted with its loop device attached)."""
    from tests.conftest import leftovers

    replica = Replica(state).start()
    try:
        with sdk(replica.url) as client:
            assert client.create_sandbox().exec("echo ok").stdout == "ok\n"
    finally:
        replica.stop()
    assert leftovers([str(state)]) == []  # uvicorn re-raises the SIGTERM after its clean shutdown
