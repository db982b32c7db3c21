"""A private sandbox state directory per test session, so these tests never share the default
one with whatever else runs on the machine."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator

import pytest

from pomona import SandboxClient


@pytest.fixture(scope="session")
def state_dir() -> Iterator[str]:
    path = tempfile.mkdtemp(prefix="pomona-bench-")
    yield path
    from pomona.orchestrator.runtimes.local import LocalRuntime
    from pomona.orchestrator.sdk.shared import close_shared

    close_shared(path)
    LocalRuntime(path).unmount_store()
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def client(state_dir: str) -> SandboxClient:
    """The process's one client on that directory, shared with the environments and rollouts
    (two clients on one state directory would each reap the other's sandboxes)."""
    from pomona.orchestrator.sdk.shared import shared_client

    return shared_client("local", state_dir)
