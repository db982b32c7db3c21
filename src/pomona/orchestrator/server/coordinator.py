"""What one service replica does on top of SandboxService so that many replicas can share a pool:
leases in the store before anything is created, ownership per API key, exec jobs with
idempotency keys (jobs.py), an exec lock that holds across replicas, a TTL reaper that one
replica runs at a time, and a reconcile that adopts what is owned and removes orphans.

Invariants (the fault tests check them):
- a lease (store record) exists before the runtime creates anything, and goes after it deleted it,
  so a sandbox without a lease is an orphan and a lease in "creating" is never reaped while its
  replica lives;
- a job runs at most once: its idempotency key maps to one job id, and a job whose replica died is
  reported failed ("lost"), never re-run;
- exec on one sandbox is never concurrent: a per-replica asyncio lock, then a store lock that
  names its holder replica (stolen only from a replica found dead).
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import logging
import secrets
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from pomona.errors import (
    PomonaError,
    SandboxConflict,
    SandboxNotFound,
    SnapshotNotFound,
    WaitTimedOut,
)
from pomona.orchestrator.runtime import Pty, Refreshable
from pomona.orchestrator.server.jobs import Jobs
from pomona.orchestrator.server.principal import Principal
from pomona.orchestrator.server.quotas import Quota
from pomona.orchestrator.server.store import SandboxRecord, Store
from pomona.orchestrator.server.timing import Timing
from pomona.orchestrator.service import SandboxService, new_id, with_defaults
from pomona.orchestrator.types import (
    ExecRequest,
    PatchResult,
    SandboxInfo,
    SandboxSpec,
    SnapshotInfo,
    check_id,
)

log = logging.getLogger("pomona.service")
T = TypeVar("T")


class Coordinator:
    """The service's rules over one SandboxService and one store. Operations on one sandbox take
    its record from `sandbox(who, id)`, which is where ownership is checked, once."""

    def __init__(
        self,
        service: SandboxService,
        store: Store,
        timing: Timing | None = None,
        quotas: Callable[[Principal], Quota | None] = lambda who: None,
    ):
        """`quotas` says what each caller may hold (None: no quota, as for admins)."""
        self.service, self.store, self.quotas = service, store, quotas
        runtime = service.runtime
        self._refresh = runtime.refresh if isinstance(runtime, Refreshable) else None
        self.timing = timing or Timing()
        self.replica = secrets.token_hex(6)
        self._locks: dict[str, asyncio.Lock] = {}
        self._synced: dict[str, float] = {}  # sandbox id -> created_at this replica's runtime knows
        self._background: set[asyncio.Task] = set()
        self._maintenance: asyncio.Task | None = None
        self._ticks = 0
        self.jobs = Jobs(service, store, self.timing, self.replica, self.exec_lock, self._spawn)

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        await self.store.start()
        await self.store.beat(self.replica, self.timing.replica_ttl)
        await self.service.start()
        await self.reconcile()
        self._maintenance = asyncio.create_task(self._maintain_forever())

    async def close(self) -> None:
        tasks = [t for t in (self._maintenance, *self._background) if t]
        for task in tasks:
            task.cancel()
        for task in self.jobs.running():
            task.cancel()
            tasks.append(task)
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.service.close()
        await self.store.close()

    def _spawn(self, coro: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        task = asyncio.create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    async def reconcile(self) -> None:
        """Adopt what has a lease, remove what has none, drop leases whose sandbox is gone.
        The runtime is listed before the store: a sandbox being created already has its lease."""
        running = {i.id for i in await self.service.runtime.list()}
        records = {r.id: r for r in await self.store.list_sandboxes()}
        for sandbox_id in running - records.keys():
            log.warning("removing orphan sandbox %s (no lease in the store)", sandbox_id)
            await self.service.delete(sandbox_id)
        for record in records.values():
            if record.status == "creating":
                await self._recover_creating(record)
            elif not await self._sync(record, force=True):
                log.warning("dropping the lease of %s: its sandbox is gone", record.id)
                await self.store.delete_sandbox(record.id)

    async def _recover_creating(self, record: SandboxRecord) -> None:
        """A create whose replica died: remove what it left, then the lease."""
        if record.replica == self.replica or await self.store.alive(record.replica):
            return
        if await self.store.try_lock("create:" + record.id, self.replica, 60) is None:
            try:
                current = await self.store.get_sandbox(record.id)
                if current and current.status == "creating" and current.replica == record.replica:
                    log.warning(
                        "removing %s: its creator replica %s died", record.id, record.replica
                    )
                    await self.service.delete(record.id)
                    await self.store.delete_sandbox(record.id)
            finally:
                await self.store.unlock("create:" + record.id, self.replica)

    async def _maintain_forever(self) -> None:
        while True:
            await asyncio.sleep(self.timing.maintenance_interval)
            try:
                await self.maintain()
            except Exception as e:  # the store may be restarting: try again next tick
                log.warning("maintenance pass failed: %s", e)

    async def maintain(self) -> None:
        self._ticks += 1
        await self.store.beat(self.replica, self.timing.replica_ttl)
        await self.jobs.start_unsure()
        if (
            await self.store.try_lock(
                "maintenance", self.replica, self.timing.maintenance_interval * 3
            )
            is not None
        ):
            return  # another replica is the reaper this round
        await self.reap()
        if self._ticks % 5 == 1:
            for record in await self.store.list_sandboxes():
                if record.status == "creating":
                    await self._recover_creating(record)
            await self.store.purge_jobs(time.time())

    # -- sandboxes ----------------------------------------------------------------------------

    async def _sync(self, record: SandboxRecord, force: bool = False) -> bool:
        """Make this replica's runtime see the sandbox another replica created (or re-created)."""
        if not force and self._synced.get(record.id) == record.created_at:
            return True
        if self._refresh is not None:
            found = await self._refresh(record.id)
        else:
            found = await self.service.runtime.get(record.id) is not None
        if found:
            self._synced[record.id] = record.created_at
        return found

    async def sandbox(self, who: Principal, sandbox_id: str) -> SandboxRecord:
        """The caller's sandbox, ready and visible to this replica's runtime, or SandboxNotFound."""
        record = await self.store.get_sandbox(sandbox_id)
        if record is None or not who.owns(record.owner):
            raise SandboxNotFound.of(sandbox_id)
        if record.status == "ready" and not await self._sync(record):
            raise SandboxNotFound.of(sandbox_id)
        running = await self.service.runtime.get(sandbox_id)
        return self._with_health([record], [running] if running else [])[0]

    @staticmethod
    def _with_health(
        records: list[SandboxRecord], running: list[SandboxInfo]
    ) -> list[SandboxRecord]:
        """A sandbox whose init died is `failed`, whatever its lease says (never `ready`)."""
        failed = {i.id for i in running if i.status == "failed"}
        return [r.model_copy(update={"status": "failed"}) if r.id in failed else r for r in records]

    async def create(
        self,
        who: Principal,
        spec: SandboxSpec,
        sandbox_id: str | None = None,
        snapshot: SnapshotInfo | None = None,
    ) -> SandboxRecord:
        """Idempotent on the id; runs to the end even if the caller goes away, so a retry finds it."""
        sandbox_id = check_id(sandbox_id) if sandbox_id else new_id()
        spec, quota = self._admit(who, spec)
        return await asyncio.shield(
            self._spawn(self._create(who, spec, sandbox_id, snapshot, quota))
        )

    def _admit(self, who: Principal, spec: SandboxSpec) -> tuple[SandboxSpec, Quota | None]:
        """The spec as it will be made (the service's default limits, a TTL no longer than the
        caller's maximum) and the caller's quota; 422 for what could never fit it."""
        quota = self.quotas(who)
        if quota is None:
            return self.service.resolve(spec), None
        quota.check_one(spec)
        ttl = min(quota.ttl or self.service.max_ttl, self.service.max_ttl)
        spec = with_defaults(spec, quota.cap(self.service.default_limits), ttl)
        quota.check_one(spec)  # the defaults count too
        return spec, quota

    async def _create(
        self,
        who: Principal,
        spec: SandboxSpec,
        sandbox_id: str,
        snapshot: SnapshotInfo | None,
        quota: Quota | None = None,
    ) -> SandboxRecord:
        now = time.time()
        lease = SandboxRecord(
            id=sandbox_id,
            owner=who.name,
            spec=spec,
            replica=self.replica,
            runtime=self.service.runtime.name,
            created_at=now,
            heartbeat_at=now,
            snapshot=snapshot.id if snapshot else None,
        )
        try:
            async with asyncio.timeout(self.timing.create_wait):
                while (existing := await self.store.claim_sandbox(lease, quota)) is not None:
                    if not who.owns(existing.owner):
                        raise SandboxConflict(
                            f"sandbox id {sandbox_id!r} is taken; pick another id"
                        )
                    if existing.spec != spec:
                        raise SandboxConflict(
                            f"sandbox {sandbox_id!r} exists with a different "
                            "spec; pick another id or delete it first"
                        )
                    if existing.status == "ready":
                        await self._sync(existing)
                        return existing
                    await self._recover_creating(existing)  # its creator died: the next claim wins
                    await asyncio.sleep(0.02)
        except TimeoutError:
            raise SandboxConflict(
                f"sandbox {sandbox_id!r} is still being created elsewhere"
            ) from None
        try:
            await self._forget(sandbox_id)
            info = await self.service.create(spec, sandbox_id, snapshot)
        except BaseException:
            with contextlib.suppress(Exception):
                await self.service.delete(sandbox_id)
            await self.store.delete_sandbox(sandbox_id)
            raise
        lease = lease.model_copy(
            update={"status": "ready", "runtime": info.runtime, "heartbeat_at": time.time()}
        )
        if not await self.store.put_sandbox(lease):  # deleted while it was being made
            with contextlib.suppress(Exception):
                await self.service.delete(sandbox_id)
            raise SandboxConflict(f"sandbox {sandbox_id!r} was deleted while it was being created")
        self._synced[sandbox_id] = lease.created_at
        return lease

    async def _forget(self, sandbox_id: str) -> None:
        """Drop a stale view of an id (deleted elsewhere) before creating it anew."""
        self._synced.pop(sandbox_id, None)
        if self._refresh is not None:
            await self._refresh(sandbox_id)

    async def wait_ready(self, who: Principal, sandbox_id: str, timeout: float) -> SandboxRecord:
        try:
            async with asyncio.timeout(timeout):
                while (record := await self.sandbox(who, sandbox_id)).status != "ready":
                    if record.status == "failed":
                        raise SandboxConflict(
                            f"sandbox {sandbox_id!r} has failed (its init process died); delete it"
                        )
                    await asyncio.sleep(0.05)
        except TimeoutError:
            raise WaitTimedOut(
                f"sandbox {sandbox_id!r} was not ready within {timeout:g} s; "
                "it is still being created: wait again"
            ) from None
        return record

    async def list(self, who: Principal, labels: dict[str, str]) -> list[SandboxRecord]:
        mine = [
            r
            for r in await self.store.list_sandboxes()
            if who.owns(r.owner) and all(r.spec.labels.get(k) == v for k, v in labels.items())
        ]
        return self._with_health(mine, await self.service.runtime.list())

    async def heartbeat(self, sandbox: SandboxRecord) -> SandboxRecord:
        record = sandbox.model_copy(update={"heartbeat_at": time.time()})
        if not await self.store.put_sandbox(record):
            raise SandboxNotFound.of(sandbox.id)
        return record

    async def delete(self, who: Principal, sandbox_id: str, reaped: bool = False) -> bool:
        """Idempotent. The sandbox goes first, its lease after: a crash in between leaves a lease
        that the next reconcile drops, never a sandbox without one."""
        record = await self.store.get_sandbox(sandbox_id)
        if record is None or not who.owns(record.owner):
            return False
        if record.status == "creating":
            with contextlib.suppress(PomonaError):
                record = await self.wait_ready(who, sandbox_id, 60)
        await self._sync(record, force=True)
        await self.service.delete(sandbox_id)
        await self.store.delete_sandbox(sandbox_id, reaped=reaped)
        self._synced.pop(sandbox_id, None)
        self._locks.pop(sandbox_id, None)
        return True

    async def reap(self) -> builtins.list[str]:
        """Delete every sandbox whose TTL ran out without a heartbeat."""
        reaped = []
        admin = Principal("reaper", admin=True)
        for sandbox_id in await self.store.expired(time.time()):
            record = await self.store.get_sandbox(sandbox_id)
            if (
                record
                and record.status == "ready"
                and await self.delete(admin, sandbox_id, reaped=True)
            ):
                log.info(
                    "reaped %s (owner %s): no heartbeat within its TTL", sandbox_id, record.owner
                )
                reaped.append(sandbox_id)
        return reaped

    # -- exec lock ----------------------------------------------------------------------------

    @asynccontextmanager
    async def exec_lock(self, sandbox_id: str) -> AsyncIterator[None]:
        """Serializes commands on one sandbox across replicas, in arrival order within one."""
        async with self._locks.setdefault(sandbox_id, asyncio.Lock()):
            name, me = "exec:" + sandbox_id, f"{self.replica}/{secrets.token_hex(4)}"
            delay, checked = 0.002, time.monotonic()
            while (holder := await self._try_lock(name, me)) is not None:
                if holder and time.monotonic() - checked > 0.5:
                    checked = time.monotonic()
                    with contextlib.suppress(Exception):
                        if not await self.store.alive(holder.split("/")[0]):
                            await self.store.steal_lock(name, holder)
                            continue
                await asyncio.sleep(delay)
                delay = min(delay * 2, 0.05)
            renew = self._spawn(self._renew(name, me))
            try:
                yield
            finally:
                renew.cancel()
                self._spawn(self._unlock(name, me))

    async def _try_lock(self, name: str, holder: str) -> str | None:
        """A store that is away (restarting) counts as contention: wait for it, do not fail."""
        try:
            return await self.store.try_lock(name, holder, self.timing.lock_ttl)
        except Exception as e:
            log.warning("exec lock %s: store unreachable (%s); waiting", name, e)
            return ""

    async def _renew(self, name: str, holder: str) -> None:
        while True:
            await asyncio.sleep(self.timing.lock_ttl / 3)
            with contextlib.suppress(Exception):
                await self.store.try_lock(name, holder, self.timing.lock_ttl)

    async def _unlock(self, name: str, holder: str) -> None:
        """Release, retrying while the store is away; the lock's TTL is the last resort."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.timing.lock_ttl):
                while True:
                    try:
                        return await self.store.unlock(name, holder)
                    except Exception:
                        await asyncio.sleep(0.2)

    # -- operations that run commands: under the exec lock --------------------------------------

    async def apply_patch(
        self, sandbox: SandboxRecord, patch: str, cwd: str | None, timeout: float
    ) -> PatchResult:
        async with self.exec_lock(sandbox.id):
            return await self.service.apply_patch(sandbox.id, patch, cwd, timeout)

    async def open_connection(
        self, sandbox: SandboxRecord, port: int
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await self.service.open_connection(sandbox.id, port)

    async def open_pty(
        self, sandbox: SandboxRecord, request: ExecRequest, rows: int, cols: int
    ) -> Pty:
        return await self.service.open_pty(sandbox.id, request, rows, cols)

    # -- snapshot and fork --------------------------------------------------------------------

    async def snapshot(
        self, who: Principal, sandbox: SandboxRecord, snapshot_id: str | None
    ) -> SnapshotInfo:
        sandbox_id = sandbox.id
        snapshot_id = check_id(snapshot_id or new_id("snap"), "snapshot id")
        try:
            info = await self.service.snapshot(sandbox_id, snapshot_id)
        except SandboxConflict:  # a retry of a snapshot that was taken: the same answer
            info = await self._snapshot(who, snapshot_id)
            if info.sandbox_id != sandbox_id:
                raise
            return info
        await self.store.set_snapshot_owner(snapshot_id, who.name)
        return info

    async def _snapshot(self, who: Principal, snapshot_id: str) -> SnapshotInfo:
        owner = await self.store.snapshot_owner(snapshot_id)
        found = next((s for s in await self.service.list_snapshots() if s.id == snapshot_id), None)
        if found is None or not who.owns(owner):
            raise SnapshotNotFound.of(snapshot_id)
        return found

    async def list_snapshots(self, who: Principal) -> builtins.list[SnapshotInfo]:
        return [
            s
            for s in await self.service.list_snapshots()
            if who.owns(await self.store.snapshot_owner(s.id))
        ]

    async def delete_snapshot(self, who: Principal, snapshot_id: str) -> bool:
        try:
            await self._snapshot(who, snapshot_id)
        except SnapshotNotFound:
            return False
        deleted = await self.service.delete_snapshot(snapshot_id)
        await self.store.set_snapshot_owner(snapshot_id, None)
        return deleted

    async def fork(
        self,
        who: Principal,
        snapshot_id: str,
        k: int,
        labels: dict[str, str],
        ids: builtins.list[str] | None,
    ) -> builtins.list[SandboxRecord]:
        """k sandboxes from one snapshot, each with its lease; all or nothing."""
        snapshot = await self._snapshot(who, snapshot_id)
        if ids is not None and len(ids) != k:
            raise SandboxConflict(f"fork got {len(ids)} sandbox ids for k={k}")
        spec = snapshot.spec.model_copy(update={"labels": {**snapshot.spec.labels, **labels}})
        ids = ids or [new_id() for _ in range(k)]
        results = await asyncio.gather(
            *(self.create(who, spec, i, snapshot) for i in ids), return_exceptions=True
        )
        failures = [r for r in results if isinstance(r, BaseException)]
        if failures:
            for r in results:
                if isinstance(r, SandboxRecord):
                    await self.delete(who, r.id)
            raise failures[0]
        return [r for r in results if not isinstance(r, BaseException)]
