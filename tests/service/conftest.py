"""Fixtures for the service tests: a real server (uvicorn in a thread, SQLite store) over the
local runtime, real HTTP clients per API key, and a real redis-server."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from pomona.orchestrator.server.app import build
from pomona.orchestrator.server.coordinator import Timing
from tests.service.harness import KEYS, RedisServer, server_thread, unmount

MAX_BODY = 2 * 2**20


@pytest.fixture(scope="session")
def state_root() -> Path:
    return Path(tempfile.mkdtemp(prefix="pomona-service-"))


@contextlib.contextmanager
def running_service(state: Path, **options) -> Iterator[str]:
    """The service on a free port; on exit every sandbox is gone and the store unmounted."""
    options.setdefault("timing", Timing(maintenance_interval=0.2, replica_ttl=1.5, lock_ttl=3.0))
    app = build("local", str(state), api_keys=KEYS, admins={"admin"}, **options)
    with server_thread(app) as url:
        try:
            yield url
        finally:
            with httpx.Client(base_url=url, headers={"X-API-Key": KEYS["admin"]}, timeout=60) as admin:
                for sandbox in admin.get("/sandboxes").json():
                    admin.delete(f"/sandboxes/{sandbox['id']}")
                for snapshot in admin.get("/snapshots").json():
                    admin.delete(f"/snapshots/{snapshot['id']}")
    unmount(state)


@pytest.fixture(scope="module")
def service_url(state_root: Path, request: pytest.FixtureRequest) -> Iterator[str]:
    with running_service(state_root / request.module.__name__.rsplit(".", 1)[-1],
                         max_body=MAX_BODY) as url:
        yield url


@pytest.fixture
def as_user(service_url: str) -> Iterator[Callable[[str], httpx.Client]]:
    """as_user("alice") -> an httpx.Client sending alice's key."""
    clients: list[httpx.Client] = []

    def make(name: str | None) -> httpx.Client:
        headers = {"X-API-Key": KEYS[name]} if name else {}
        clients.append(httpx.Client(base_url=service_url, headers=headers, timeout=60))
        return clients[-1]

    yield make
    for c in clients:
        c.close()


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer().start()
    yield server
    server.close()
