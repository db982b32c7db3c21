"""The WebSocket sessions (relay.py speaks them): a terminal on a sandbox, Orchard's PTY frames,
and a raw TCP tunnel to a port inside one. They authenticate after accepting, so a refusal is a
close code the client can read."""

from __future__ import annotations

from fastapi import APIRouter, WebSocket

from pomona.orchestrator.server.dependencies import State
from pomona.orchestrator.server.relay import pty_session, tcp_tunnel

router = APIRouter()


@router.websocket("/sandboxes/{sandbox_id}/exec/pty")
async def pty(websocket: WebSocket, sandbox_id: str, state: State) -> None:
    await pty_session(websocket, state.keys.check, state.coordinator, sandbox_id)


@router.websocket("/sandboxes/{sandbox_id}/ports/{port}")
async def port_tunnel(websocket: WebSocket, sandbox_id: str, port: int, state: State) -> None:
    await tcp_tunnel(websocket, state.keys.check, state.coordinator, sandbox_id, port)
