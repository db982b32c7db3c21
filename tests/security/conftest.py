"""The attacker's fixtures: sandboxes on `local` and `docker` reached in-process, and a real
service (uvicorn, API keys) reached over HTTP by two tenants. Every test here plays a party the
threat model (docs/security.md) does not trust: code inside a sandbox as uid 1000 or as root,
or a tenant holding a non-admin key."""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from pomona import SandboxClient
from tests.conftest import docker_available
from tests.service.conftest import running_service
from tests.service.harness import KEYS


@pytest.fixture(scope="session")
def local_client() -> Iterator[SandboxClient]:
    with SandboxClient("local", state_dir=tempfile.mkdtemp(prefix="security-local-")) as client:
        yield client


@pytest.fixture(scope="session")
def docker_client() -> Iterator[SandboxClient]:
    if not docker_available():
        pytest.skip("no Docker engine running (./dev services starts one)")
    with SandboxClient("docker", state_dir=tempfile.mkdtemp(prefix="security-docker-")) as client:
        yield client


@pytest.fixture(params=["local", "docker"])
def in_process(request: pytest.FixtureRequest) -> tuple[SandboxClient, str]:
    """(client, image) for each runtime a sandbox attack applies to."""
    if request.param == "local":
        return request.getfixturevalue("local_client"), "host"
    from tests.images import debian_image

    return request.getfixturevalue("docker_client"), debian_image()


@pytest.fixture(scope="session")
def allowed_mounts() -> Path:
    """The one host directory tenants may mount from (`pomona serve --mount-source`)."""
    path = Path(tempfile.mkdtemp(prefix="security-mountable-"))
    path.chmod(0o755)
    (path / "data.txt").write_text("shared read-only data\n")
    return path


@pytest.fixture(scope="session")
def payload_dir() -> Path:
    """Stands in for the harness payload: what the named source "tools" resolves to."""
    path = Path(tempfile.mkdtemp(prefix="security-tools-"))
    path.chmod(0o755)
    (path / "payload.txt").write_text("original payload\n")
    return path


@pytest.fixture(scope="session")
def service_url(allowed_mounts: Path, payload_dir: Path) -> Iterator[str]:
    mp = pytest.MonkeyPatch()
    mp.setenv("POMONA_TOOLS_DIR", str(payload_dir))
    try:
        with running_service(
            Path(tempfile.mkdtemp(prefix="security-service-")), mount_sources=[str(allowed_mounts)]
        ) as url:
            yield url
    finally:
        mp.undo()


@pytest.fixture
def tenant(service_url: str) -> Iterator[Callable[[str], httpx.Client]]:
    """tenant("alice") -> an httpx.Client with alice's key."""
    clients: list[httpx.Client] = []

    def make(name: str) -> httpx.Client:
        clients.append(
            httpx.Client(base_url=service_url, headers={"X-API-Key": KEYS[name]}, timeout=120)
        )
        return clients[-1]

    yield make
    for client in clients:
        client.close()


@pytest.fixture
def remote_client(service_url: str) -> Iterator[SandboxClient]:
    """The SDK over HTTP as tenant alice."""
    with SandboxClient(base_url=service_url, api_key=KEYS["alice"]) as client:
        yield client
