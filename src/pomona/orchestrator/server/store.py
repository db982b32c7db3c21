"""The service's shared state: sandbox leases, exec jobs, locks and replica liveness.

Two backends with one contract. `SqliteStore` is the embedded default: one file, survives
restarts, and is safe for several processes on one machine. `RedisStore` is for several replicas
on several machines. Nothing here evicts: a record goes only when the service deletes it (Redis
must run with `maxmemory-policy noeviction`, which `RedisStore.start` checks).

Job retention (the documented schedule): a finished job is kept `JOB_RETENTION` seconds (1 h)
after it finished, and never outlives its sandbox by more than `JOB_GRACE` seconds (10 min).
Idempotency keys live exactly as long as their job.
"""

from __future__ import annotations

import json
import sqlite3
import time
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Literal, cast

from pydantic import BaseModel, Field

from pomona.errors import QuotaExceeded, SandboxConflict, StoreUnavailable
from pomona.orchestrator.server.quotas import Quota
from pomona.orchestrator.types import ExecRequest, ExecResult, SandboxInfo, SandboxSpec

JOB_RETENTION = 3600.0
JOB_GRACE = 600.0
REAPED_MEMORY = 120.0  # how long "which of my sandboxes were reaped" can still be asked

JobStatus = Literal["queued", "running", "succeeded", "failed", "cancelled"]


class SandboxRecord(BaseModel):
    """The lease: written before the runtime creates anything, removed after it deleted it."""

    id: str
    owner: str
    spec: SandboxSpec
    status: Literal["creating", "ready", "failed"] = "creating"
    replica: str = Field(description="the replica that created it (or is creating it)")
    runtime: str = ""
    created_at: float
    heartbeat_at: float
    snapshot: str | None = None

    @property
    def expires_at(self) -> float | None:
        return None if self.spec.timeout is None else self.heartbeat_at + self.spec.timeout

    def info(self) -> SandboxInfo:
        return SandboxInfo(
            id=self.id,
            runtime=self.runtime,
            status=self.status,
            spec=self.spec,
            created_at=self.created_at,
            expires_at=self.expires_at,
            snapshot=self.snapshot,
        )


class JobRecord(BaseModel):
    id: str
    sandbox_id: str
    owner: str
    replica: str
    request: ExecRequest
    status: JobStatus = "queued"
    result: ExecResult | None = None
    error: str | None = None
    error_type: str | None = Field(
        default=None, description="the error class, so SDKs can re-raise it"
    )
    created_at: float
    started_at: float | None = None
    completed_at: float | None = None
    cancel_requested: bool = False

    @property
    def done(self) -> bool:
        return self.status in ("succeeded", "failed", "cancelled")

    @property
    def expires_at(self) -> float:
        return (self.completed_at or self.created_at) + JOB_RETENTION


class Store(ABC):
    """Every method is one atomic step, so replicas never need to coordinate beyond it."""

    # sandboxes
    @abstractmethod
    async def claim_sandbox(
        self, record: SandboxRecord, quota: Quota | None = None
    ) -> SandboxRecord | None:
        """Insert the lease unless the id is taken; return the existing record if it is. With a
        quota, in the same atomic step: QuotaExceeded if the owner's live sandboxes leave no
        room for this one (quotas.py)."""

    @abstractmethod
    async def put_sandbox(self, record: SandboxRecord) -> bool:
        """Update a lease that exists; False, writing nothing, once it has been deleted: a late
        write (a heartbeat, a create finishing) never brings a deleted sandbox's lease back,
        where no quota would count it."""

    @abstractmethod
    async def get_sandbox(self, sandbox_id: str) -> SandboxRecord | None: ...

    @abstractmethod
    async def list_sandboxes(self) -> list[SandboxRecord]: ...

    @abstractmethod
    async def delete_sandbox(self, sandbox_id: str, reaped: bool = False) -> None:
        """Drop the lease; its jobs now expire within JOB_GRACE."""

    @abstractmethod
    async def expired(self, now: float) -> list[str]: ...

    @abstractmethod
    async def recently_reaped(self, owner: str | None) -> list[str]: ...

    # snapshots: only who owns them (the runtime keeps the layers)
    @abstractmethod
    async def set_snapshot_owner(self, snapshot_id: str, owner: str | None) -> None: ...

    @abstractmethod
    async def snapshot_owner(self, snapshot_id: str) -> str | None: ...

    # jobs
    @abstractmethod
    async def add_job(self, job: JobRecord, idempotency_key: str | None) -> JobRecord:
        """Store a new job, or return the job already stored under this idempotency key."""

    @abstractmethod
    async def put_job(self, job: JobRecord) -> None: ...

    @abstractmethod
    async def get_job(self, job_id: str) -> JobRecord | None: ...

    @abstractmethod
    async def purge_jobs(self, now: float) -> int: ...

    # locks and liveness
    @abstractmethod
    async def try_lock(self, name: str, holder: str, ttl: float) -> str | None:
        """Take the lock (or extend it if `holder` has it): None on success, else the holder."""

    @abstractmethod
    async def unlock(self, name: str, holder: str) -> None: ...

    @abstractmethod
    async def steal_lock(self, name: str, holder: str) -> bool:
        """Remove a lock held by `holder` (a replica found dead), only if it still holds it."""

    @abstractmethod
    async def beat(self, replica: str, ttl: float) -> None: ...

    @abstractmethod
    async def alive(self, replica: str) -> bool: ...

    @abstractmethod
    async def start(self) -> None:
        """Check the backend is fit for the job."""

    @abstractmethod
    async def close(self) -> None: ...


# -- SQLite ----------------------------------------------------------------------------------

SCHEMA = """
CREATE TABLE IF NOT EXISTS sandboxes (id TEXT PRIMARY KEY, owner TEXT, expires_at REAL, data TEXT);
CREATE INDEX IF NOT EXISTS sandboxes_usage ON sandboxes (owner,
  json_extract(data, '$.spec.limits.cpu'), json_extract(data, '$.spec.limits.memory'));
CREATE TABLE IF NOT EXISTS reaped (id TEXT, owner TEXT, at REAL);
CREATE TABLE IF NOT EXISTS snapshots (id TEXT PRIMARY KEY, owner TEXT);
CREATE TABLE IF NOT EXISTS jobs (id TEXT PRIMARY KEY, sandbox_id TEXT, idem TEXT UNIQUE,
                                 expires_at REAL, data TEXT);
CREATE INDEX IF NOT EXISTS jobs_sandbox ON jobs (sandbox_id);
CREATE TABLE IF NOT EXISTS locks (name TEXT PRIMARY KEY, holder TEXT, until REAL);
CREATE TABLE IF NOT EXISTS replicas (id TEXT PRIMARY KEY, until REAL);
"""


USAGE = (  # an owner's live sandboxes: how many, and their limits summed (from sandboxes_usage:
    # the JSON is not parsed per row, 8x faster at 2,000 rows)
    "SELECT count(*), total(json_extract(data, '$.spec.limits.cpu')), "
    "total(json_extract(data, '$.spec.limits.memory')) FROM sandboxes WHERE owner = ?"
)


class SqliteStore(Store):
    """One file in WAL mode. Calls are short and run inline: a thread hop would cost more."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(
            self.path, isolation_level=None, check_same_thread=False, timeout=10
        )
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")  # durable across process crashes
        self.db.executescript(SCHEMA)

    def _one(self, sql: str, *args: object) -> tuple | None:
        return self.db.execute(sql, args).fetchone()

    async def start(self) -> None:
        self.db.execute("SELECT 1 FROM sandboxes LIMIT 1")

    async def close(self) -> None:
        self.db.close()

    async def claim_sandbox(
        self, record: SandboxRecord, quota: Quota | None = None
    ) -> SandboxRecord | None:
        row = (record.id, record.owner, record.expires_at, record.model_dump_json())
        if quota is None:
            cur = self.db.execute("INSERT OR IGNORE INTO sandboxes VALUES (?, ?, ?, ?)", row)
            return None if cur.rowcount else await self.get_sandbox(record.id)
        with self.db:  # one transaction: no other claim of this owner's in between
            self.db.execute("BEGIN IMMEDIATE")
            if existing := self._one("SELECT data FROM sandboxes WHERE id = ?", record.id):
                return SandboxRecord.model_validate_json(existing[0])
            count, cpu, memory = self._one(USAGE, record.owner) or (0, 0.0, 0.0)
            quota.check_usage(count, cpu, memory, record.spec)
            self.db.execute("INSERT INTO sandboxes VALUES (?, ?, ?, ?)", row)
        return None

    async def put_sandbox(self, record: SandboxRecord) -> bool:
        cursor = self.db.execute(
            "UPDATE sandboxes SET owner = ?, expires_at = ?, data = ? WHERE id = ?",
            (record.owner, record.expires_at, record.model_dump_json(), record.id),
        )
        return cursor.rowcount == 1

    async def get_sandbox(self, sandbox_id: str) -> SandboxRecord | None:
        row = self._one("SELECT data FROM sandboxes WHERE id = ?", sandbox_id)
        return SandboxRecord.model_validate_json(row[0]) if row else None

    async def list_sandboxes(self) -> list[SandboxRecord]:
        return [
            SandboxRecord.model_validate_json(r[0])
            for r in self.db.execute("SELECT data FROM sandboxes ORDER BY id")
        ]

    async def delete_sandbox(self, sandbox_id: str, reaped: bool = False) -> None:
        now = time.time()
        with self.db:
            self.db.execute("BEGIN IMMEDIATE")
            if reaped:
                self.db.execute(
                    "INSERT INTO reaped SELECT id, owner, ? FROM sandboxes WHERE id = ?",
                    (now, sandbox_id),
                )
            self.db.execute("DELETE FROM sandboxes WHERE id = ?", (sandbox_id,))
            self.db.execute(
                "UPDATE jobs SET expires_at = min(expires_at, ?) WHERE sandbox_id = ?",
                (now + JOB_GRACE, sandbox_id),
            )

    async def expired(self, now: float) -> list[str]:
        return [
            r[0]
            for r in self.db.execute(
                "SELECT id FROM sandboxes WHERE expires_at IS NOT NULL AND expires_at <= ?", (now,)
            )
        ]

    async def recently_reaped(self, owner: str | None) -> list[str]:
        since = time.time() - REAPED_MEMORY
        self.db.execute("DELETE FROM reaped WHERE at < ?", (since,))
        rows = self.db.execute("SELECT id, owner FROM reaped ORDER BY at")
        return [i for i, o in rows if owner is None or o == owner]

    async def set_snapshot_owner(self, snapshot_id: str, owner: str | None) -> None:
        if owner is None:
            self.db.execute("DELETE FROM snapshots WHERE id = ?", (snapshot_id,))
        else:
            self.db.execute("INSERT OR REPLACE INTO snapshots VALUES (?, ?)", (snapshot_id, owner))

    async def snapshot_owner(self, snapshot_id: str) -> str | None:
        row = self._one("SELECT owner FROM snapshots WHERE id = ?", snapshot_id)
        return row[0] if row else None

    async def add_job(self, job: JobRecord, idempotency_key: str | None) -> JobRecord:
        cur = self.db.execute(
            "INSERT OR IGNORE INTO jobs VALUES (?, ?, ?, ?, ?)",
            (job.id, job.sandbox_id, idempotency_key, job.expires_at, job.model_dump_json()),
        )
        if cur.rowcount:
            return job
        row = self._one("SELECT data FROM jobs WHERE idem = ?", idempotency_key)
        if row is None:  # the id itself collided: ids are random, so this is a caller bug
            raise SandboxConflict(f"job id {job.id} already exists")
        return JobRecord.model_validate_json(row[0])

    async def put_job(self, job: JobRecord) -> None:
        self.db.execute(  # a job of a deleted sandbox keeps its shortened expiry
            "UPDATE jobs SET data = ?, expires_at = CASE WHEN EXISTS (SELECT 1 FROM sandboxes s "
            "WHERE s.id = jobs.sandbox_id) THEN ? ELSE min(expires_at, ?) END WHERE id = ?",
            (job.model_dump_json(), job.expires_at, job.expires_at, job.id),
        )

    async def get_job(self, job_id: str) -> JobRecord | None:
        row = self._one("SELECT data FROM jobs WHERE id = ?", job_id)
        return JobRecord.model_validate_json(row[0]) if row else None

    async def purge_jobs(self, now: float) -> int:
        return self.db.execute("DELETE FROM jobs WHERE expires_at <= ?", (now,)).rowcount

    async def try_lock(self, name: str, holder: str, ttl: float) -> str | None:
        now = time.time()
        self.db.execute(
            "INSERT INTO locks VALUES (?, ?, ?) ON CONFLICT (name) DO UPDATE SET "
            "holder = excluded.holder, until = excluded.until WHERE locks.holder = excluded.holder "
            "OR locks.until < ?",
            (name, holder, now + ttl, now),
        )
        row = self._one("SELECT holder FROM locks WHERE name = ?", name)
        return None if row and row[0] == holder else (row[0] if row else "")

    async def unlock(self, name: str, holder: str) -> None:
        self.db.execute("DELETE FROM locks WHERE name = ? AND holder = ?", (name, holder))

    async def steal_lock(self, name: str, holder: str) -> bool:
        return bool(
            self.db.execute(
                "DELETE FROM locks WHERE name = ? AND holder = ?", (name, holder)
            ).rowcount
        )

    async def beat(self, replica: str, ttl: float) -> None:
        self.db.execute(
            "INSERT OR REPLACE INTO replicas VALUES (?, ?)", (replica, time.time() + ttl)
        )
        self.db.execute("DELETE FROM replicas WHERE until < ?", (time.time() - 3600,))

    async def alive(self, replica: str) -> bool:
        row = self._one("SELECT until FROM replicas WHERE id = ?", replica)
        return bool(row and row[0] >= time.time())


# -- Redis -----------------------------------------------------------------------------------

_UNLOCK = (
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"
)
_LOCK = """
local cur = redis.call('get', KEYS[1])
if cur == false or cur == ARGV[1] then
  redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2]) return false
end
return cur
"""


_ADD_JOB = """
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'EX', ARGV[3]) then
  redis.call('SET', KEYS[2], ARGV[2], 'EX', ARGV[3])
  redis.call('SADD', KEYS[3], ARGV[1])
  return false
end
return redis.call('GET', KEYS[1])
"""


# KEYS: sb:{id}, sbs, usage:{owner}; ARGV: record, id, expiry score, cpu, memory, and the
# maxima of sandboxes, cpu, memory ('' for none). The owner's usage is kept beside its leases.
_CLAIM = """
local existing = redis.call('GET', KEYS[1])
if existing then return {'exists', existing} end
local u = redis.call('HMGET', KEYS[3], 'n', 'cpu', 'memory')
local n, cpu, mem = tonumber(u[1] or '0'), tonumber(u[2] or '0'), tonumber(u[3] or '0')
local function over(most, held, asked)
  return most ~= '' and held + asked > tonumber(most)
end
if over(ARGV[6], n, 1) or over(ARGV[7], cpu, tonumber(ARGV[4]))
   or over(ARGV[8], mem, tonumber(ARGV[5])) then
  return {'quota', tostring(n), tostring(cpu), tostring(mem)}
end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[2])
redis.call('HINCRBY', KEYS[3], 'n', 1)
redis.call('HINCRBYFLOAT', KEYS[3], 'cpu', ARGV[4])
redis.call('HINCRBYFLOAT', KEYS[3], 'memory', ARGV[5])
return false
"""
# KEYS: sb:{id}, sbs; ARGV: record, id, expiry score. Only a lease that still exists.
_UPDATE = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[2])
return 1
"""
# KEYS: sb:{id}, sbs, reaped; ARGV: id, now, reaped (1 or 0), key prefix
_DELETE = """
local raw = redis.call('GET', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[1])
if not raw then return false end
redis.call('DEL', KEYS[1])
local record = cjson.decode(raw)
local limits = record['spec']['limits']
local usage = ARGV[4] .. 'usage:' .. record['owner']
if redis.call('HINCRBY', usage, 'n', -1) <= 0 then
  redis.call('DEL', usage)
else
  redis.call('HINCRBYFLOAT', usage, 'cpu', -(tonumber(limits['cpu']) or 0))
  redis.call('HINCRBYFLOAT', usage, 'memory', -(tonumber(limits['memory']) or 0))
end
if ARGV[3] == '1' then
  redis.call('ZADD', KEYS[3], ARGV[2], cjson.encode({ARGV[1], record['owner']}))
end
return true
"""


class RedisStore(Store):
    """Keys under one prefix: sb:{id} (JSON), sbs (zset by expiry, +inf without TTL), usage:{owner}
    (its live sandboxes' count, CPU and memory), job:{id}, idem:{key} -> job id (both with the
    job's expiry), lock:{name}, replica:{id}, reaped (zset).

    The client decodes every reply to str (decode_responses=True); redis-py's hints cannot tell
    that from the call (they say bytes | str, and for z-commands also the WITHSCORES pairs we never
    ask for), so replies are cast to what this client returns."""

    def __init__(self, url: str, prefix: str = "pomona:"):
        import redis.asyncio as redis

        self.redis = redis.Redis.from_url(
            url, decode_responses=True, health_check_interval=5, socket_connect_timeout=2
        )
        self.p = prefix
        self._lock = self.redis.register_script(_LOCK)
        self._unlock = self.redis.register_script(_UNLOCK)
        self._add_job = self.redis.register_script(_ADD_JOB)
        self._claim = self.redis.register_script(_CLAIM)
        self._delete = self.redis.register_script(_DELETE)
        self._update = self.redis.register_script(_UPDATE)

    async def start(self) -> None:
        try:
            reply = await self.redis.config_get("maxmemory-policy")
        except Exception:  # CONFIG may be disabled on managed Redis: nothing to check then
            return
        policy = reply.get("maxmemory-policy")
        if policy and policy != "noeviction":
            raise StoreUnavailable(
                f"Redis evicts keys (maxmemory-policy={policy}): the store needs "
                "noeviction, or live sandboxes could lose their records"
            )

    async def close(self) -> None:
        await self.redis.aclose()

    @staticmethod
    def _score(record: SandboxRecord) -> float | str:
        return "+inf" if record.expires_at is None else record.expires_at

    async def claim_sandbox(
        self, record: SandboxRecord, quota: Quota | None = None
    ) -> SandboxRecord | None:
        limits, most = record.spec.limits, quota or Quota(None, None, None, None)
        answer = await self._claim(
            keys=[self.p + "sb:" + record.id, self.p + "sbs", self.p + "usage:" + record.owner],
            args=[
                record.model_dump_json(),
                record.id,
                self._score(record),
                limits.cpu or 0,
                limits.memory or 0,
                *("" if m is None else m for m in (most.sandboxes, most.cpu, most.memory)),
            ],
        )
        if not answer:
            return None
        if answer[0] == "exists":
            return SandboxRecord.model_validate_json(answer[1])
        count, cpu, memory = (float(x) for x in answer[1:])
        most.check_usage(int(count), cpu, memory, record.spec)  # raises, saying which
        raise QuotaExceeded("this key's quota is used up: delete sandboxes first")

    async def put_sandbox(self, record: SandboxRecord) -> bool:
        updated = await self._update(
            keys=[self.p + "sb:" + record.id, self.p + "sbs"],
            args=[record.model_dump_json(), record.id, self._score(record)],
        )
        return bool(updated)

    async def get_sandbox(self, sandbox_id: str) -> SandboxRecord | None:
        raw = await self.redis.get(self.p + "sb:" + sandbox_id)
        return SandboxRecord.model_validate_json(raw) if raw else None

    async def list_sandboxes(self) -> list[SandboxRecord]:
        ids = cast(list[str], await self.redis.zrange(self.p + "sbs", 0, -1))
        if not ids:
            return []
        raws = await self.redis.mget([self.p + "sb:" + i for i in ids])
        return sorted((SandboxRecord.model_validate_json(r) for r in raws if r), key=lambda r: r.id)

    async def delete_sandbox(self, sandbox_id: str, reaped: bool = False) -> None:
        await self._delete(
            keys=[self.p + "sb:" + sandbox_id, self.p + "sbs", self.p + "reaped"],
            args=[sandbox_id, time.time(), "1" if reaped else "0", self.p],
        )
        # jobs of a deleted sandbox: at most JOB_GRACE more
        for job_id in cast(set[str], await self.redis.smembers(self.p + "jobs:" + sandbox_id)):
            await self.redis.expire(self.p + "job:" + job_id, int(JOB_GRACE), lt=True)
        await self.redis.expire(self.p + "jobs:" + sandbox_id, int(JOB_GRACE))

    async def expired(self, now: float) -> list[str]:
        return cast(list[str], await self.redis.zrangebyscore(self.p + "sbs", "-inf", now))

    async def recently_reaped(self, owner: str | None) -> list[str]:
        key = self.p + "reaped"
        await self.redis.zremrangebyscore(key, "-inf", time.time() - REAPED_MEMORY)
        pairs = [json.loads(m) for m in cast(list[str], await self.redis.zrange(key, 0, -1))]
        return [i for i, o in pairs if owner is None or o == owner]

    async def set_snapshot_owner(self, snapshot_id: str, owner: str | None) -> None:
        if owner is None:
            await self.redis.hdel(self.p + "snapshots", snapshot_id)
        else:
            await self.redis.hset(self.p + "snapshots", snapshot_id, owner)

    async def snapshot_owner(self, snapshot_id: str) -> str | None:
        return cast(str | None, await self.redis.hget(self.p + "snapshots", snapshot_id))

    def _job_ttl(self, job: JobRecord) -> int:
        return max(1, int(job.expires_at - time.time()))

    async def add_job(self, job: JobRecord, idempotency_key: str | None) -> JobRecord:
        # one script: the idempotency key and the job are written together or not at all
        idem = self.p + "idem:" + (idempotency_key or job.id)
        existing_id = await self._add_job(
            keys=[idem, self.p + "job:" + job.id, self.p + "jobs:" + job.sandbox_id],
            args=[job.id, job.model_dump_json(), self._job_ttl(job)],
        )
        if not existing_id:
            return job
        if existing := await self.get_job(existing_id):
            return existing
        # the key survived a store crash that lost its job (Redis lost its last writes): the
        # command may have run; it is never run again, and the caller is told so
        lost = job.model_copy(
            update={
                "id": existing_id,
                "status": "failed",
                "completed_at": time.time(),
                "error_type": "SandboxFailed",
                "error": "this job's record was lost in a store restart; "
                "the command may have run and was not re-run. Check the sandbox's state.",
            }
        )
        await self.put_job(lost)
        return lost

    async def put_job(self, job: JobRecord) -> None:
        key = self.p + "job:" + job.id
        ttl = self._job_ttl(job)
        if not await self.redis.exists(
            self.p + "sb:" + job.sandbox_id
        ):  # keep the shortened expiry
            ttl = min(ttl, max(1, await self.redis.ttl(key)))
        await self.redis.set(key, job.model_dump_json(), ex=ttl)

    async def get_job(self, job_id: str) -> JobRecord | None:
        raw = await self.redis.get(self.p + "job:" + job_id)
        return JobRecord.model_validate_json(raw) if raw else None

    async def purge_jobs(self, now: float) -> int:
        return 0  # Redis expires job keys itself

    async def try_lock(self, name: str, holder: str, ttl: float) -> str | None:
        return await self._lock(keys=[self.p + "lock:" + name], args=[holder, int(ttl * 1000)])

    async def unlock(self, name: str, holder: str) -> None:
        await self._unlock(keys=[self.p + "lock:" + name], args=[holder])

    async def steal_lock(self, name: str, holder: str) -> bool:
        return bool(await self._unlock(keys=[self.p + "lock:" + name], args=[holder]))

    async def beat(self, replica: str, ttl: float) -> None:
        await self.redis.set(self.p + "replica:" + replica, "1", px=int(ttl * 1000))

    async def alive(self, replica: str) -> bool:
        return bool(await self.redis.exists(self.p + "replica:" + replica))


def open_store(redis_url: str | None, state_dir: str | Path) -> Store:
    """Redis when a URL is given (several replicas), else SQLite in the state directory."""
    return RedisStore(redis_url) if redis_url else SqliteStore(Path(state_dir) / "service.db")
