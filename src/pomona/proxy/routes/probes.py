"""The routes anyone may reach: the root (what this is, which models it serves) and health."""

from __future__ import annotations

from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse

from pomona.proxy.dependencies import State

router = APIRouter()


@router.head("/")
async def head_root() -> Response:
    return Response(status_code=200)


@router.get("/")
async def root(state: State) -> Response:
    return JSONResponse({"service": "pomona proxy", "models": state.config.model_names()})


@router.get("/healthz")
async def healthz() -> Response:
    return JSONResponse({"ok": True})
