"""Fixtures for the service tests: the real server (uvicorn in a thread, SQLite store, API keys)
over the memory runtime (runtimes/memory.py, a named test double, with the commands of
tests/service/commands.py) where what is tested is the service's own behaviour, or over the
local runtime where it is the runtime's; real HTTP clients per API key; a real redis-server."""

from __future__ import annotations

import contextlib
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from pomona.orchestrator.runtimes.memory import MemoryRuntime
from pomona.orchestrator.server.app import build, create_app
from pomona.orchestrator.server.coordinator import Coordinator
from pomona.orchestrator.server.keys import KeyRing
from pomona.orchestrator.server.state import ServiceState
from pomona.orchestrator.server.store import SqliteStore, Store
from pomona.orchestrator.server.timing import Timing
from pomona.orchestrator.service import SandboxService
from tests.service import commands
from tests.service.harness import KEYS, RedisServer, server_thread, unmount

MAX_BODY = 2 * 2**20
FAST = Timing(maintenance_interval=0.2, replica_ttl=1.5, lock_ttl=3.0)


@pytest.fixture(scope="session")
def state_root() -> Path:
    return Path(tempfile.mkdtemp(prefix="pomona-service-"))


@contextlib.contextmanager
def running_service(state: Path, **options) -> Iterator[str]:
    """The service over the local runtime on a free port; on exit every sandbox is gone and the
    store unmounted."""
    options.setdefault("timing", FAST)
    app = build("local", str(state), api_keys=KEYS, admins={"admin"}, **options)
    with server_thread(app) as url:
        try:
            yield url
        finally:
            with httpx.Client(
                base_url=url, headers={"X-API-Key": KEYS["admin"]}, timeout=60
            ) as admin:
                for sandbox in admin.get("/sandboxes").json():
                    admin.delete(f"/sandboxes/{sandbox['id']}")
                for snapshot in admin.get("/snapshots").json():
                    admin.delete(f"/snapshots/{snapshot['id']}")
    unmount(state)


@dataclass
class MemoryService:
    url: str
    runtime: MemoryRuntime
    state: ServiceState  # the app's: its admission queues and file slots, to wait on in tests


@contextlib.contextmanager
def memory_service(state: Path, store: Store | None = None, **options) -> Iterator[MemoryService]:
    """The service over a memory runtime on a free port (its store is SQLite under `state`)."""
    state.mkdir(parents=True, exist_ok=True)
    runtime = MemoryRuntime(commands.handler)
    service = SandboxService(runtime, reap_interval=10**9)  # the coordinator reaps
    coordinator = Coordinator(service, store or SqliteStore(state / "store.db"), FAST)
    app = create_app(coordinator, KeyRing(KEYS), **options)
    with server_thread(app) as url:
        yield MemoryService(url, runtime, ServiceState.of(app))


@pytest.fixture(scope="module")
def memory(state_root: Path, request: pytest.FixtureRequest) -> Iterator[MemoryService]:
    with memory_service(
        state_root / f"memory-{request.module.__name__.rsplit('.', 1)[-1]}", max_body=MAX_BODY
    ) as served:
        yield served


@pytest.fixture(scope="module")
def service_url(state_root: Path, request: pytest.FixtureRequest) -> Iterator[str]:
    """The service over the local runtime."""
    with running_service(
        state_root / request.module.__name__.rsplit(".", 1)[-1], max_body=MAX_BODY
    ) as url:
        yield url


def poll(condition: Callable[[], object], what: str, limit: float = 60.0) -> None:
    """Wait for a condition another thread makes true (the limit only bounds a hang)."""
    deadline = time.monotonic() + limit
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} did not happen")
        time.sleep(0.005)


def clients(url: str) -> Iterator[Callable[[str | None], httpx.Client]]:
    made: list[httpx.Client] = []

    def make(name: str | None) -> httpx.Client:
        headers = {"X-API-Key": KEYS[name]} if name else {}
        made.append(httpx.Client(base_url=url, headers=headers, timeout=60))
        return made[-1]

    yield make
    for c in made:
        c.close()


@pytest.fixture
def as_user(memory: MemoryService) -> Iterator[Callable[[str | None], httpx.Client]]:
    """as_user("alice") -> an httpx.Client to the memory-runtime service sending alice's key."""
    yield from clients(memory.url)


@pytest.fixture
def as_user_local(service_url: str) -> Iterator[Callable[[str | None], httpx.Client]]:
    """as_user_local("alice") -> the same, to the local-runtime service."""
    yield from clients(service_url)


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer().start()
    yield server
    server.close()
