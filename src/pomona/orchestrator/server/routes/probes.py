"""The routes anyone may reach: what this is, and whether it is up."""

from __future__ import annotations

from fastapi import APIRouter

from pomona.orchestrator.api_models import Health, ServiceInfo
from pomona.orchestrator.server.dependencies import Coord

VERSION = "0.1.0"
router = APIRouter()


@router.get("/", response_model=ServiceInfo)
async def root(coord: Coord) -> ServiceInfo:
    return ServiceInfo(version=VERSION, replica=coord.replica)


@router.get("/health", response_model=Health)
async def health() -> Health:
    return Health()
