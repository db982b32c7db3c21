"""Snapshots of the caller's sandboxes, and forks from them: k new sandboxes from one state."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body

from pomona.orchestrator.api_models import ForkBody, SandboxView, SnapshotBody, SnapshotDeleted
from pomona.orchestrator.server.dependencies import Coord, OwnedSandbox, State, Who
from pomona.orchestrator.server.errors import CREATES, ERRORS
from pomona.orchestrator.types import SnapshotInfo

router = APIRouter()


@router.post("/sandboxes/{sandbox_id}/snapshot", response_model=SnapshotInfo, responses=ERRORS)
async def snapshot(
    sandbox: OwnedSandbox,
    who: Who,
    coord: Coord,
    body: Annotated[SnapshotBody | None, Body()] = None,
) -> SnapshotInfo:
    return await coord.snapshot(who, sandbox, body.snapshot_id if body else None)


@router.get("/snapshots", response_model=list[SnapshotInfo], responses=ERRORS)
async def list_snapshots(who: Who, coord: Coord) -> list[SnapshotInfo]:
    return await coord.list_snapshots(who)


@router.delete("/snapshots/{snapshot_id}", response_model=SnapshotDeleted, responses=ERRORS)
async def delete_snapshot(snapshot_id: str, who: Who, coord: Coord) -> SnapshotDeleted:
    return SnapshotDeleted(
        snapshot_id=snapshot_id, deleted=await coord.delete_snapshot(who, snapshot_id)
    )


@router.post("/snapshots/{snapshot_id}/fork", response_model=list[SandboxView], responses=CREATES)
async def fork(snapshot_id: str, body: ForkBody, who: Who, state: State) -> list[SandboxView]:
    async with state.creates.slot():
        records = await state.coordinator.fork(
            who, snapshot_id, body.k, body.labels, body.sandbox_ids
        )
    return [SandboxView.of(r) for r in records]
