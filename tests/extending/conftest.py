"""A private sandbox state directory per test session, so these tests never share the default
one with whatever else runs on the machine; and every registry a recipe adds to put back as it
was after each test, so no toy leaks into the rest of the suite (a toy harness once did:
tests/harnesses then looked for its payload)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator

import pytest

from pomona import SandboxClient


@pytest.fixture(autouse=True)
def registries_as_they_were() -> Iterator[None]:
    from pomona.benchmarks import registry
    from pomona.harnesses import registry as harnesses
    from pomona.orchestrator import runtimes
    from pomona.proxy import upstream, upstreams  # noqa: F401 - upstreams adds the default kind

    tables = [harnesses._added, registry._REGISTRY, runtimes.RUNTIMES, upstream.KINDS]
    saved = [dict(t) for t in tables]
    yield
    for table, before in zip(tables, saved, strict=True):
        table.clear()
        table.update(before)


@pytest.fixture(scope="session")
def state_dir() -> Iterator[str]:
    path = tempfile.mkdtemp(prefix="pomona-extending-")
    yield path
    from pomona.orchestrator.runtimes.local import LocalRuntime
    from pomona.orchestrator.sdk.shared import _close_all

    _close_all()
    LocalRuntime(path).unmount_store()
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def client(state_dir: str) -> SandboxClient:
    """The process's one client on that directory, shared with the environments and rollouts
    (two clients on one state directory would each reap the other's sandboxes)."""
    from pomona.orchestrator.sdk.shared import shared_client

    return shared_client("local", state_dir)
