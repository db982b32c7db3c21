"""What the service's routes depend on, as FastAPI dependencies: the app's state, the caller
(from the API key), the caller's own sandbox that a URL names, and a file-operation slot.

Each raises a PomonaError that the app's one handler answers (errors.py). All are `async def`,
so none costs a trip through the thread pool.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import Depends, Security
from fastapi.security import APIKeyHeader
from starlette.requests import HTTPConnection

from pomona.orchestrator.server.coordinator import Coordinator, Principal
from pomona.orchestrator.server.state import ServiceState
from pomona.orchestrator.server.store import SandboxRecord


async def service_state(connection: HTTPConnection) -> ServiceState:
    return ServiceState.of(connection.app)


State = Annotated[ServiceState, Depends(service_state)]


async def coordinator(state: State) -> Coordinator:
    return state.coordinator


Coord = Annotated[Coordinator, Depends(coordinator)]
_api_key = APIKeyHeader(name="X-API-Key", auto_error=False)


async def principal(state: State, key: Annotated[str | None, Security(_api_key)]) -> Principal:
    """Who is calling: 401 without a key, 403 with one the service does not know."""
    return state.keys.check(key)


Who = Annotated[Principal, Security(principal)]


async def owned_sandbox(sandbox_id: str, who: Who, coord: Coord) -> SandboxRecord:
    """The sandbox the URL names, if the caller may see it (404 otherwise: never "not yours")."""
    return await coord.sandbox(who, sandbox_id)


OwnedSandbox = Annotated[SandboxRecord, Depends(owned_sandbox)]


async def file_slot(who: Who, state: State) -> AsyncIterator[None]:
    """One of the caller's bounded file-operation slots for the route's work (503 when all are
    taken), released when the route returns."""
    async with state.policy.file_slot(who):
        yield


FileSlot = Depends(file_slot, scope="function")
