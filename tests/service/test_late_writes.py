"""Writes that lose a race with a delete: another replica deletes a sandbox while this one is
still creating it (after its 60 s wait) or between a heartbeat's read and its write. The lease
must stay deleted, and nothing may be left running without one."""

from __future__ import annotations

import asyncio

import pytest

from pomona.errors import SandboxConflict, SandboxNotFound
from pomona.orchestrator.runtimes.memory import MemoryRuntime
from pomona.orchestrator.server.coordinator import Coordinator
from pomona.orchestrator.server.principal import Principal
from pomona.orchestrator.server.store import SqliteStore
from pomona.orchestrator.service import SandboxService
from pomona.orchestrator.types import SandboxSpec
from tests.service import commands
from tests.service.conftest import FAST

TENANT = Principal("tenant")


def _coordinator(tmp_path) -> tuple[Coordinator, MemoryRuntime, SqliteStore]:
    runtime = MemoryRuntime(commands.handler)
    store = SqliteStore(tmp_path / "store.db")
    return Coordinator(SandboxService(runtime, reap_interval=10**9), store, FAST), runtime, store


def test_a_sandbox_deleted_while_it_was_created_is_not_brought_back(tmp_path, monkeypatch):
    coordinator, runtime, store = _coordinator(tmp_path)
    made = coordinator.service.create

    async def create_then_lose_the_lease(spec, sandbox_id, snapshot):
        info = await made(spec, sandbox_id, snapshot)
        await store.delete_sandbox(sandbox_id)  # another replica's delete, meanwhile
        return info

    monkeypatch.setattr(coordinator.service, "create", create_then_lose_the_lease)

    async def run() -> None:
        with pytest.raises(SandboxConflict, match="deleted while it was being created"):
            await coordinator.create(TENANT, SandboxSpec(), "raced")
        assert await store.get_sandbox("raced") is None
        assert await runtime.get("raced") is None  # nothing left running without a lease

    try:
        asyncio.run(run())
    finally:
        asyncio.run(store.close())


def test_a_heartbeat_after_a_delete_finds_the_sandbox_gone(tmp_path):
    coordinator, runtime, store = _coordinator(tmp_path)

    async def run() -> None:
        record = await coordinator.create(TENANT, SandboxSpec(), "beating")
        assert await coordinator.delete(TENANT, "beating")
        with pytest.raises(SandboxNotFound):
            await coordinator.heartbeat(record)  # read before the delete, written after
        assert await store.get_sandbox("beating") is None

    try:
        asyncio.run(run())
    finally:
        asyncio.run(store.close())
