"""Sandboxes: create, list by label, get, wait for, keep alive, delete; the caller's share of the
machine (Orchard's /resources) and reaping on demand."""

from __future__ import annotations

import os
from typing import Annotated

from fastapi import APIRouter, Query

from pomona.errors import InvalidRequest
from pomona.orchestrator.api_models import (
    Capacity,
    CreateSandboxRequest,
    Deleted,
    ErrorBody,
    HeartbeatAck,
    Node,
    Reaped,
    Resources,
    SandboxUsage,
    SandboxView,
)
from pomona.orchestrator.server.dependencies import Coord, OwnedSandbox, State, Who
from pomona.orchestrator.server.errors import CREATES, ERRORS
from pomona.orchestrator.types import check_text

router = APIRouter()


def _labels(label: list[str]) -> dict[str, str]:
    pairs = {}
    check_text(label, "a label filter")
    for item in label:
        k, sep, v = item.partition("=")
        if not sep or not k:
            raise InvalidRequest(f"label filter {item!r} is not key=value")
        pairs[k] = v
    return pairs


def _machine() -> Capacity:
    pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return Capacity(cpu=float(os.cpu_count() or 1), memory_bytes=pages)


@router.get("/resources", response_model=Resources, responses=ERRORS)
async def resources(who: Who, coord: Coord) -> Resources:
    machine = _machine()
    mine = await coord.list(who, {})
    cpu = sum(r.spec.limits.cpu or 0 for r in mine)
    memory = sum(r.spec.limits.memory or 0 for r in mine)
    requested = Capacity(cpu=cpu, memory_bytes=memory)
    return Resources(
        nodes=[Node(name=os.uname().nodename, capacity=machine, allocatable=machine)],
        total_capacity=machine,
        total_allocatable=machine,
        total_requested=requested,
        available=Capacity(
            cpu=max(0.0, machine.cpu - cpu), memory_bytes=max(0, machine.memory_bytes - memory)
        ),
        sandbox_pods=[
            SandboxUsage(
                name=r.id,
                phase=r.status,
                cpu_request=r.spec.limits.cpu,
                memory_request_bytes=r.spec.limits.memory,
            )
            for r in mine
        ],
    )


@router.post("/reap", response_model=Reaped, responses=ERRORS)
async def reap(who: Who, coord: Coord) -> Reaped:
    await coord.reap()
    return Reaped(reaped=await coord.store.recently_reaped(None if who.admin else who.name))


@router.post("/sandboxes", response_model=SandboxView, responses=CREATES)
async def create(body: CreateSandboxRequest, who: Who, state: State) -> SandboxView:
    state.policy.check_spec(who, body.spec())
    async with state.creates.slot():
        return SandboxView.of(await state.coordinator.create(who, body.spec(), body.sandbox_id))


@router.get("/sandboxes", response_model=list[SandboxView], responses=ERRORS)
async def list_sandboxes(
    who: Who,
    coord: Coord,
    label: Annotated[list[str], Query(description="key=value; repeat to require several")] = [],  # noqa: B006
) -> list[SandboxView]:
    return [SandboxView.of(r) for r in await coord.list(who, _labels(label))]


@router.get("/sandboxes/{sandbox_id}", response_model=SandboxView, responses=ERRORS)
async def get_sandbox(sandbox: OwnedSandbox) -> SandboxView:
    return SandboxView.of(sandbox)


@router.get(
    "/sandboxes/{sandbox_id}/wait",
    response_model=SandboxView,
    responses={**ERRORS, 408: {"model": ErrorBody, "description": "still creating"}},
)
async def wait_sandbox(
    sandbox_id: str, who: Who, coord: Coord, timeout: Annotated[float, Query(gt=0, le=86400)] = 3600
) -> SandboxView:
    return SandboxView.of(await coord.wait_ready(who, sandbox_id, timeout))


@router.delete("/sandboxes/{sandbox_id}", response_model=Deleted, responses=ERRORS)
async def delete(sandbox_id: str, who: Who, coord: Coord) -> Deleted:
    return Deleted(sandbox_id=sandbox_id, existed=await coord.delete(who, sandbox_id))


@router.post("/sandboxes/{sandbox_id}/heartbeat", response_model=HeartbeatAck, responses=ERRORS)
async def heartbeat(sandbox: OwnedSandbox, coord: Coord) -> HeartbeatAck:
    record = await coord.heartbeat(sandbox)
    return HeartbeatAck(
        sandbox_id=record.id, expires_at=record.expires_at, sandbox=SandboxView.of(record)
    )
