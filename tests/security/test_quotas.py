"""A tenant against the service's capacity: one key held 749 live sandboxes after a few minutes
of fuzzing, and `timeout: null` or `Infinity` made sandboxes that never expired. Each test plays
that tenant over REST (or a burst of its creates straight at the store, as replicas would send
them) and finds the key's quota holding, with a 429 or 422 that says which maximum."""

from __future__ import annotations

import asyncio
import math
import os
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from pomona.errors import QuotaExceeded, StoreUnavailable
from pomona.orchestrator.server.quotas import Quota
from pomona.orchestrator.server.store import RedisStore, SandboxRecord, SqliteStore, Store
from pomona.orchestrator.types import DEFAULT_LIMITS, Limits, SandboxSpec
from tests.service.conftest import running_service
from tests.service.harness import KEYS

QUOTA = Quota(sandboxes=3, cpu=None, memory=2**30, ttl=7200)
SMALL = {"limits": {"memory": "256Mi"}}


@pytest.fixture(scope="module")
def service() -> Iterator[str]:
    state = Path(tempfile.mkdtemp(prefix="security-quotas-"))
    with running_service(state, quota=QUOTA, quotas={"bob": Quota(sandboxes=1)}) as url:
        yield url


def _as(url: str, name: str) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"X-API-Key": KEYS[name]}, timeout=300)


def test_a_burst_of_creates_holds_at_most_the_keys_quota(service):
    with _as(service, "alice") as alice, _as(service, "bob") as bob:
        with ThreadPoolExecutor(12) as pool:
            answers = list(pool.map(lambda _: alice.post("/sandboxes", json=SMALL), range(12)))
        made = [r.json()["id"] for r in answers if r.status_code == 200]
        refused = [r for r in answers if r.status_code != 200]
        try:
            assert len(made) == 3, [r.text for r in refused][:2]
            assert {r.status_code for r in refused} == {429}
            body = refused[0].json()
            assert body["error"] == "QuotaExceeded"
            assert (
                "3 live sandboxes" in body["detail"] and "--max-sandboxes-per-key" in body["detail"]
            )
            assert len(alice.get("/sandboxes").json()) == 3  # nothing half-made
            # another tenant's quota is its own; an admin has none
            assert bob.post("/sandboxes", json={}).status_code == 200
            assert bob.post("/sandboxes", json={}).status_code == 429
            # a deleted sandbox frees its place
            assert alice.delete(f"/sandboxes/{made.pop()}").status_code == 200
            again = alice.post("/sandboxes", json=SMALL)
            assert again.status_code == 200, again.text
            made.append(again.json()["id"])
        finally:
            for sandbox in made:
                alice.delete(f"/sandboxes/{sandbox}")
            for sandbox in bob.get("/sandboxes").json():
                bob.delete(f"/sandboxes/{sandbox['id']}")


def test_memory_beyond_the_keys_total_is_refused_saying_which(service):
    with _as(service, "alice") as alice:
        never = alice.post("/sandboxes", json={"limits": {"memory": "2Gi"}})
        assert never.status_code == 422 and "--max-memory-per-key" in never.json()["detail"]
        first = alice.post("/sandboxes", json={"limits": {"memory": "600Mi"}})
        assert first.status_code == 200, first.text
        try:
            second = alice.post("/sandboxes", json={"limits": {"memory": "600Mi"}})
            assert second.status_code == 429, second.text
            assert "bytes of memory" in second.json()["detail"]
        finally:
            alice.delete(f"/sandboxes/{first.json()['id']}")


@pytest.mark.parametrize(
    "body",
    [b'{"timeout": Infinity}', b'{"timeout": NaN}', b'{"timeout": 1e308}', b'{"timeout": 7201}'],
)
def test_no_timeout_makes_an_immortal_sandbox(service, body):
    with _as(service, "alice") as alice:
        r = alice.post("/sandboxes", content=body, headers={"Content-Type": "application/json"})
        assert r.status_code == 422, r.text
        assert alice.get("/sandboxes").json() == []


def test_a_null_timeout_is_the_keys_longest_and_limits_are_set_by_default(service):
    with _as(service, "alice") as alice:
        r = alice.post("/sandboxes", json={"timeout": None})
        assert r.status_code == 200, r.text
        sandbox = r.json()
        try:
            assert sandbox["spec"]["timeout"] == 7200
            assert sandbox["expires_at"] <= time.time() + 7200
            limits = sandbox["spec"]["limits"]
            assert limits["pids"] == DEFAULT_LIMITS.pids and limits["memory"] == 2**30  # capped
            assert limits["cpu"] > 0
            inside = alice.post(
                f"/sandboxes/{sandbox['id']}/exec",
                json={
                    "command": "cat /sys/fs/cgroup/pids.max 2>/dev/null || "
                    "cat /sys/fs/cgroup/pids/pids.max",
                    "wait": True,
                },
            ).json()
            if inside["exit_code"] == 0:  # where the sandbox sees its cgroup, the limit is there
                assert inside["stdout"].strip() == str(DEFAULT_LIMITS.pids)
        finally:
            alice.delete(f"/sandboxes/{sandbox['id']}")


# -- the store: the quota is checked in the step that claims the lease ---------------------------


def _lease(owner: str, i: int, memory: int | None = None) -> SandboxRecord:
    return SandboxRecord(
        id=f"{owner}-{i}",
        owner=owner,
        spec=SandboxSpec(limits=Limits(memory=memory, cpu=1)),
        replica="r",
        created_at=0,
        heartbeat_at=0,
    )


async def _burst(store: Store) -> None:
    quota = Quota(sandboxes=4, cpu=None, memory=None, ttl=None)

    async def claim(i: int) -> bool:
        try:
            return await store.claim_sandbox(_lease("eve", i), quota) is None
        except QuotaExceeded:
            return False

    won = await asyncio.gather(*(claim(i) for i in range(12)))  # 12 connections at once
    assert sum(won) == 4
    winner = won.index(True)
    assert await store.claim_sandbox(_lease("eve", winner), quota) is not None  # a retry: its lease
    await store.delete_sandbox(f"eve-{winner}")
    assert await store.claim_sandbox(_lease("eve", 99), quota) is None
    assert await store.claim_sandbox(_lease("other", 0), quota) is None  # per owner
    memory = Quota(sandboxes=None, cpu=2.5, memory=None, ttl=None)
    assert await store.claim_sandbox(_lease("mem", 0), memory) is None
    assert await store.claim_sandbox(_lease("mem", 1), memory) is None
    with pytest.raises(QuotaExceeded, match="cores of CPU"):
        await store.claim_sandbox(_lease("mem", 2), memory)


async def _late_write(store: Store) -> None:
    """A heartbeat (or a create finishing) that read the lease before a delete writes it after:
    the lease stays deleted, and the owner's usage still counts exactly its live sandboxes (on
    Redis the write once brought the lease back uncounted, and deleting it again freed a slot
    another sandbox still held)."""
    quota = Quota(sandboxes=2, cpu=None, memory=None, ttl=None)
    gone, kept = _lease("late", 0), _lease("late", 1)
    assert await store.claim_sandbox(gone, quota) is None
    assert await store.claim_sandbox(kept, quota) is None
    await store.delete_sandbox(gone.id)
    assert await store.put_sandbox(gone.model_copy(update={"heartbeat_at": 1.0})) is False
    assert await store.get_sandbox(gone.id) is None
    assert [r.id for r in await store.list_sandboxes() if r.owner == "late"] == [kept.id]
    await store.delete_sandbox(gone.id)  # the reaper's delete of it, again: nothing to free
    assert await store.put_sandbox(kept.model_copy(update={"heartbeat_at": 2.0})) is True
    assert (await store.get_sandbox(kept.id)).heartbeat_at == 2.0
    assert await store.claim_sandbox(_lease("late", 2), quota) is None
    with pytest.raises(QuotaExceeded, match="2 live sandboxes"):
        await store.claim_sandbox(_lease("late", 3), quota)


def test_the_sqlite_store_claims_within_the_quota_atomically(tmp_path):
    store = SqliteStore(tmp_path / "store.db")
    try:
        asyncio.run(_burst(store))
        asyncio.run(_late_write(store))
    finally:
        asyncio.run(store.close())


def test_by_default_one_key_cannot_hold_hundreds_of_sandboxes(tmp_path):
    """The fuzzing case's 749 live sandboxes of one key, against `pomona serve`'s default quota."""
    store = SqliteStore(tmp_path / "store.db")

    async def fill() -> int:
        held = 0
        with pytest.raises(QuotaExceeded, match="128 live sandboxes"):
            for i in range(749):
                await store.claim_sandbox(_lease("fuzzer", i), Quota())
                held += 1
        return held

    try:
        assert asyncio.run(fill()) == Quota().sandboxes == 128
    finally:
        asyncio.run(store.close())


def test_the_redis_store_claims_within_the_quota_atomically():
    from tests.service.harness import RedisServer

    server = RedisServer().start()
    try:

        async def run() -> None:
            store = RedisStore(server.url)
            try:
                await _burst(store)
                await _late_write(store)
            finally:
                await store.close()

        asyncio.run(run())
    finally:
        server.close()


def test_a_redis_that_evicts_keys_is_refused_at_start():
    """An evicting Redis could drop a live sandbox's record (its lease, its quota count): the
    store refuses it when the service starts (the check once swallowed its own error)."""
    from tests.service.harness import RedisServer

    server = RedisServer().start()
    try:

        async def run() -> None:
            store = RedisStore(server.url)
            try:
                await store.start()  # noeviction: accepted
                await store.redis.config_set("maxmemory-policy", "allkeys-lru")
                with pytest.raises(StoreUnavailable, match="allkeys-lru.*noeviction"):
                    await store.start()
            finally:
                await store.close()

        asyncio.run(run())
    finally:
        server.close()


def test_a_sandbox_made_without_limits_has_them(in_process):
    """The 749 sandboxes of the fuzzing case had no limit at all: now each has the defaults, as
    the kernel sees them (the sandbox's cgroup on local, the container's on docker)."""
    import glob
    import json
    import subprocess

    client, image = in_process
    with client.create_sandbox(image) as sb:
        limits = sb.info.spec.limits
        assert (limits.pids, limits.cpu) == (DEFAULT_LIMITS.pids, min(2, os.cpu_count() or 1))
        if sb.info.runtime == "local":
            found = glob.glob(f"/sys/fs/cgroup/pids/*/{sb.id}/pids.max") + glob.glob(
                f"/sys/fs/cgroup/*/{sb.id}/pids.max"
            )
            assert [Path(p).read_text().strip() for p in found] == [str(DEFAULT_LIMITS.pids)]
        else:
            names = subprocess.run(
                ["docker", "ps", "--format", "{{.Names}}"], capture_output=True, text=True
            ).stdout.split()
            name = next(n for n in names if n.endswith(sb.id))
            host = json.loads(
                subprocess.run(["docker", "inspect", name], capture_output=True, text=True).stdout
            )[0]["HostConfig"]
            assert host["PidsLimit"] == DEFAULT_LIMITS.pids
            assert host["Memory"] == limits.memory > 0 and host["NanoCpus"] > 0


@pytest.mark.parametrize("timeout", [math.inf, math.nan, 1e12])
def test_the_sdk_refuses_a_timeout_that_never_ends(in_process, timeout):
    from pomona.errors import InvalidRequest

    client, image = in_process
    before = {s.id for s in client.list_sandboxes()}
    with pytest.raises(InvalidRequest, match="timeout"):
        client.create_sandbox(image, timeout=timeout)
    assert {s.id for s in client.list_sandboxes()} == before
