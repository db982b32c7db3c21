"""Commands: exec as a job (answered at once, or when done with `wait`), streamed as NDJSON,
jobs read, awaited and cancelled; apply_patch. Every command takes an exec admission slot."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Header, Query
from fastapi.responses import StreamingResponse

from pomona.errors import InvalidRequest, PomonaError
from pomona.orchestrator.api_models import ErrorBody, ExecBody, JobView, PatchBody, PatchView
from pomona.orchestrator.server.coordinator import Principal
from pomona.orchestrator.server.dependencies import Coord, OwnedSandbox, State, Who
from pomona.orchestrator.server.errors import ERRORS
from pomona.orchestrator.server.state import ServiceState
from pomona.orchestrator.server.store import JobRecord, SandboxRecord
from pomona.orchestrator.types import ExecChunk

router = APIRouter()
IdempotencyKey = Annotated[str | None, Header(alias="Idempotency-Key", max_length=200)]


async def _submit(
    state: ServiceState, who: Principal, sandbox: SandboxRecord, body: ExecBody, key: str | None
) -> JobRecord:
    """Start the job (or find the one this key started) under an exec slot, which a new job
    holds until it ends."""
    execs = state.execs
    await execs.acquire()
    try:
        job, new = await state.coordinator.jobs.submit(
            who, sandbox, body.exec_request(), key or body.idempotency_key, on_finish=execs.release
        )
    except BaseException:
        execs.release()
        raise
    if not new:
        execs.release()
    return job


@router.post(
    "/sandboxes/{sandbox_id}/exec",
    responses={
        **ERRORS,
        408: {
            "model": ErrorBody,
            "description": "wait=true expired: POST again with the "
            "same Idempotency-Key to keep waiting",
        },
    },
)
async def exec_(
    sandbox: OwnedSandbox,
    body: ExecBody,
    who: Who,
    state: State,
    idempotency_key: IdempotencyKey = None,
) -> JobView:
    job = await _submit(state, who, sandbox, body, idempotency_key)
    if body.wait:
        job = await state.coordinator.jobs.wait(who, job.id, (body.timeout or 3600) + 60)
    return JobView.of(job)


@router.post(
    "/sandboxes/{sandbox_id}/exec/stream",
    response_class=StreamingResponse,
    responses={
        **ERRORS,
        200: {
            "description": "NDJSON: {type: chunk, stream, data} lines, "
            "then {type: result, ...ExecResult} or {type: error}",
            "content": {"application/x-ndjson": {}},
        },
    },
)
async def exec_stream(
    sandbox: OwnedSandbox,
    body: ExecBody,
    who: Who,
    state: State,
    idempotency_key: IdempotencyKey = None,
) -> StreamingResponse:
    job = await _submit(state, who, sandbox, body, idempotency_key)

    async def lines() -> AsyncIterator[bytes]:
        try:
            async for item in state.coordinator.jobs.stream(who, job.id):
                kind = {"type": "chunk"} if isinstance(item, ExecChunk) else {"type": "result"}
                yield json.dumps({**kind, **item.model_dump()}).encode() + b"\n"
        except PomonaError as e:
            yield (
                json.dumps({"type": "error", "error": type(e).__name__, "detail": str(e)}).encode()
                + b"\n"
            )

    return StreamingResponse(
        lines(), media_type="application/x-ndjson", headers={"X-Job-Id": job.id}
    )


@router.post("/sandboxes/{sandbox_id}/exec/cancel", response_model=JobView, responses=ERRORS)
async def cancel_exec(
    sandbox: OwnedSandbox,
    body: ExecBody,
    who: Who,
    coord: Coord,
    idempotency_key: IdempotencyKey = None,
) -> JobView:
    """Cancel the exec sent with this Idempotency-Key and body, whether or not it has arrived:
    its job is cancelled, or, if it has not arrived yet, it never runs (it answers as cancelled).
    What an interrupted SDK call sends."""
    key = idempotency_key or body.idempotency_key
    if not key:
        raise InvalidRequest("cancelling an exec needs the Idempotency-Key it was sent with")
    return JobView.of(await coord.jobs.cancel_exec(who, sandbox, body.exec_request(), key))


@router.get("/jobs/{job_id}", response_model=JobView, responses=ERRORS)
async def get_job(job_id: str, who: Who, coord: Coord) -> JobView:
    return JobView.of(await coord.jobs.job(who, job_id))


@router.get(
    "/jobs/{job_id}/wait",
    response_model=JobView,
    responses={**ERRORS, 408: {"model": ErrorBody, "description": "still running: wait again"}},
)
async def wait_job(
    job_id: str, who: Who, coord: Coord, timeout: Annotated[float, Query(gt=0, le=86400)] = 300
) -> JobView:
    return JobView.of(await coord.jobs.wait(who, job_id, timeout))


@router.post("/jobs/{job_id}/cancel", response_model=JobView, responses=ERRORS)
async def cancel_job(job_id: str, who: Who, coord: Coord) -> JobView:
    return JobView.of(await coord.jobs.cancel(who, job_id))


@router.post("/sandboxes/{sandbox_id}/apply_patch", response_model=PatchView, responses=ERRORS)
async def apply_patch(sandbox: OwnedSandbox, body: PatchBody, state: State) -> PatchView:
    async with state.execs.slot():
        result = await state.coordinator.apply_patch(
            sandbox, body.patch, body.cwd, body.timeout_seconds
        )
    return PatchView(**result.model_dump())
