"""The routes anyone may reach: what this is, and whether it is up."""

from __future__ import annotations

from fastapi import APIRouter

from pomona.orchestrator.api_models import Health, ServiceInfo

VERSION = "0.1.0"
router = APIRouter()


@router.get("/", response_model=ServiceInfo)
async def root() -> ServiceInfo:
    return ServiceInfo(version=VERSION)


@router.get("/health", response_model=Health)
async def health() -> Health:
    return Health()
