"""The exec jobs of one service replica: a command submitted under an idempotency key runs at
most once, under the sandbox's exec lock, and its output is kept for streams and waits while it
runs; the record in the store says how it ended, to every replica.

Invariants (the fault tests check them): a job's idempotency key maps to one job id; a job whose
replica died is reported failed ("lost"), never re-run; a job whose store write went unanswered
is started once, by the replica that wrote it, if the store turns out to hold it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any

from pomona.errors import JobNotFound, PomonaError, SandboxConflict, WaitTimedOut, error_named
from pomona.orchestrator.server.principal import Principal
from pomona.orchestrator.server.store import JobRecord, SandboxRecord, Store
from pomona.orchestrator.server.timing import Timing
from pomona.orchestrator.service import SandboxService, new_id
from pomona.orchestrator.types import ExecChunk, ExecRequest, ExecResult


@dataclass
class _LiveJob:
    """A job this replica runs: its output so far, for streams and waits."""

    record: JobRecord
    chunks: list[ExecChunk] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    finished: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task | None = None
    on_finish: Callable[[], None] | None = None

    def notify(self) -> None:
        self.changed.set()
        self.changed = asyncio.Event()


class Jobs:
    """The jobs this replica runs, and what it knows of the others'. `exec_lock` and `spawn`
    are the coordinator's: its lock across replicas, and its background tasks."""

    def __init__(
        self,
        service: SandboxService,
        store: Store,
        timing: Timing,
        replica: str,
        exec_lock: Callable[[str], AbstractAsyncContextManager[None]],
        spawn: Callable[[Coroutine[Any, Any, Any]], asyncio.Task],
    ):
        self.service, self.store, self.timing, self.replica = service, store, timing, replica
        self.exec_lock, self._spawn = exec_lock, spawn
        self._jobs: dict[str, _LiveJob] = {}
        self._unsure: set[str] = set()  # jobs whose store write went unanswered

    def running(self) -> list[asyncio.Task]:
        """The tasks of the jobs still running here (cancelled when the replica closes)."""
        return [j.task for j in self._jobs.values() if j.task and not j.task.done()]

    async def submit(
        self,
        who: Principal,
        sandbox: SandboxRecord,
        request: ExecRequest,
        idempotency_key: str | None = None,
        on_finish: Callable[[], None] | None = None,
    ) -> tuple[JobRecord, bool]:
        """Start a job, or return the one already started under this key: (job, is_new).
        `on_finish` runs when a new job ends (the server frees its admission slot there)."""
        sandbox_id = sandbox.id
        job = JobRecord(
            id=new_id("job"),
            sandbox_id=sandbox_id,
            owner=who.name,
            replica=self.replica,
            request=request,
            created_at=time.time(),
        )
        key = self._job_key(who, sandbox_id, idempotency_key) if idempotency_key else None
        try:
            stored = await self.store.add_job(job, key)
        except Exception:
            self._unsure.add(job.id)  # written or not: maintenance finds out
            raise
        if stored.id != job.id:
            self._same_command(stored, request, idempotency_key)
            if not self._orphaned(stored):
                return stored, False
            job = stored  # an earlier attempt stored it, then lost the store's answer: run it now
        live = self._jobs[job.id] = _LiveJob(job, on_finish=on_finish)
        live.task = asyncio.create_task(self._run(live))
        return job, True

    @staticmethod
    def _job_key(who: Principal, sandbox_id: str, idempotency_key: str) -> str:
        return f"{who.name}:{sandbox_id}:{idempotency_key}"

    @staticmethod
    def _same_command(stored: JobRecord, request: ExecRequest, idempotency_key: str | None) -> None:
        if stored.request != request:
            raise SandboxConflict(
                f"idempotency key {idempotency_key!r} was used for a different "
                "command; use a new key per command"
            )

    async def start_unsure(self) -> None:
        """A job whose store write went unanswered may be stored (writes are atomic: all or
        nothing): then this replica owns it and no other starts it, as a retry that reaches another
        replica only waits for it. Started here, once, if it is stored and still queued."""
        for job_id in list(self._unsure):
            stored = await self.store.get_job(job_id)  # the store answers again: now we know
            self._unsure.discard(job_id)
            if stored is not None and self._orphaned(stored):
                live = self._jobs[stored.id] = _LiveJob(stored)
                live.task = asyncio.create_task(self._run(live))

    def _orphaned(self, job: JobRecord) -> bool:
        """A job this replica stored but never started: the store went away between writing it
        and answering (a Redis restart), so the attempt failed before the job was started, and
        nothing would ever run it. It is started by the retry that finds it, exactly once."""
        return job.status == "queued" and job.replica == self.replica and job.id not in self._jobs

    async def _run(self, live: _LiveJob) -> None:
        job = live.record
        watcher = None
        try:
            async with self.exec_lock(job.sandbox_id):
                job.status, job.started_at = "running", time.time()
                with contextlib.suppress(Exception):  # informational; the final write retries
                    await self.store.put_job(job)
                watcher = self._spawn(self._watch_cancel(job.id, asyncio.current_task()))
                async for item in self.service.exec_stream(job.sandbox_id, job.request):
                    if isinstance(item, ExecResult):
                        job.result = item
                    else:
                        live.chunks.append(item)
                        live.notify()
            job.status = "succeeded" if job.result and job.result.ok else "failed"
        except asyncio.CancelledError:
            job.status, job.error, job.error_type = (
                "cancelled",
                "the job was cancelled",
                "JobCancelled",
            )
        except Exception as e:
            job.status, job.error = "failed", str(e) or type(e).__name__
            job.error_type = type(e).__name__ if isinstance(e, PomonaError) else "SandboxFailed"
        finally:
            if watcher:
                watcher.cancel()
            job.completed_at = time.time()
            if live.on_finish:
                live.on_finish()
            live.finished.set()
            live.notify()
            self._spawn(self._persist(job))
            self._spawn(self._forget_job(job.id))

    async def _persist(self, job: JobRecord) -> None:
        """Write the finished job, retrying while the store is away (its waiters have it already)."""
        for attempt in range(600):
            try:
                return await self.store.put_job(job)
            except Exception:
                await asyncio.sleep(min(0.1 * 2**attempt, 1.0))

    async def _forget_job(self, job_id: str) -> None:
        await asyncio.sleep(self.timing.job_keep_local)
        self._jobs.pop(job_id, None)

    async def _watch_cancel(self, job_id: str, task: asyncio.Task | None) -> None:
        """A cancel sent to another replica arrives through the store."""
        while True:
            await asyncio.sleep(0.5)
            with contextlib.suppress(Exception):
                job = await self.store.get_job(job_id)
                if job and job.cancel_requested and task:
                    task.cancel()
                    return

    async def job(self, who: Principal, job_id: str) -> JobRecord:
        job: JobRecord | None
        if live := self._jobs.get(job_id):
            job = live.record
        else:
            job = await self.store.get_job(job_id)
            if (
                job
                and not job.done
                and job.replica != self.replica
                and not await self.store.alive(job.replica)
            ):
                job = await self._lost(job)
        if job is None or not who.owns(job.owner):
            raise JobNotFound.of(job_id)
        return job

    async def _lost(self, job: JobRecord) -> JobRecord:
        job.status, job.completed_at = "failed", time.time()
        job.error_type = "SandboxFailed"
        job.error = (
            f"job {job.id} was lost: the replica running it stopped mid-command. The "
            "command may have run partly; it was not re-run. Check the sandbox's state."
        )
        await self.store.put_job(job)
        return job

    async def wait(self, who: Principal, job_id: str, timeout: float | None) -> JobRecord:
        """The finished job, or WaitTimedOut (408) when `timeout` passes first."""
        job = await self.job(who, job_id)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                job = await self._finished(who, job)
        if not job.done:
            raise WaitTimedOut(
                f"job {job_id} is still {job.status} after {timeout:g} s; wait again "
                f"(GET /jobs/{job_id}/wait) or cancel it",
                job_id=job_id,
            )
        return job

    async def _finished(self, who: Principal, job: JobRecord) -> JobRecord:
        """The job once done: one this replica runs is awaited, another's is polled in the store."""
        if live := self._jobs.get(job.id):
            await live.finished.wait()
            return live.record
        delay = 0.01
        while not job.done:
            await asyncio.sleep(delay)
            delay = min(delay * 1.5, 0.25)
            job = await self.job(who, job.id)
        return job

    async def cancel(self, who: Principal, job_id: str) -> JobRecord:
        job = await self.job(who, job_id)
        if job.done:
            return job
        if (live := self._jobs.get(job_id)) and live.task:
            live.task.cancel()
            await asyncio.wait({live.task})
            return live.record
        job.cancel_requested = True
        await self.store.put_job(job)
        return await self.wait(who, job_id, 30)

    async def cancel_exec(
        self, who: Principal, sandbox: SandboxRecord, request: ExecRequest, idempotency_key: str
    ) -> JobRecord:
        """Cancel the exec sent with this key (a caller gave up on it mid-request): its job if it
        was submitted, else a job that stands for it, stored as cancelled under the key, so the
        exec, should it still arrive, answers as cancelled and never runs."""
        now = time.time()
        tombstone = JobRecord(
            id=new_id("job"),
            sandbox_id=sandbox.id,
            owner=who.name,
            replica=self.replica,
            request=request,
            status="cancelled",
            created_at=now,
            completed_at=now,
            error="the exec was cancelled before it started",
            error_type="JobCancelled",
        )
        stored = await self.store.add_job(
            tombstone, self._job_key(who, sandbox.id, idempotency_key)
        )
        if stored.id == tombstone.id:
            return tombstone
        self._same_command(stored, request, idempotency_key)
        return await self.cancel(who, stored.id)

    async def stream(self, who: Principal, job_id: str) -> AsyncIterator[ExecChunk | ExecResult]:
        """The job's output as it comes (from the start), then its result; a job another replica
        ran comes as its collected output."""
        live = self._jobs.get(job_id)
        if live is None:
            job = await self.wait(who, job_id, None)
            for stream in ("stdout", "stderr"):
                if job.result and getattr(job.result, stream):
                    yield ExecChunk(stream=stream, data=getattr(job.result, stream))
        else:
            sent = 0
            while True:
                changed = live.changed
                while sent < len(live.chunks):
                    sent += 1
                    yield live.chunks[sent - 1]
                if live.finished.is_set():
                    break
                await changed.wait()
            job = live.record
        if job.result is None:
            raise error_named(job.error_type, job.error or "the job failed")
        yield job.result
