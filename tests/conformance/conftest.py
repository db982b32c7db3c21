"""The conformance suite runs every test once per runtime: what passes on `local` must pass on
`docker` (and on the HTTP transport once it exists). A runtime is skipped only when this machine
cannot run it, and the skip says why.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from pomona import SandboxClient
from tests.conftest import docker_available

RUNTIMES = ["local", "docker", "http", "kubernetes"]
# "http": the local runtime behind `pomona serve` (uvicorn in a thread, with API keys), reached
# through the SDK's HTTP transport. Tests that drive a runtime directly skip it, saying why.
IN_PROCESS_ONLY = {"test_leaks.py": "a SIGKILLed service replica is tests/service/test_faults.py"}
# "kubernetes": runs when KUBECONFIG points at a cluster (docs/kubernetes.md), with the image in
# POMONA_K8S_TEST_IMAGE loaded on its nodes. These tests need the test process's own host:
ON_THE_TEST_HOST = {
    "test_read_only_host_mount": "host-path mounts; pods get the payload from tools_image",
    "test_gateway_mode_reaches_only_the_allowed_port": "a pod cannot reach the test process's loopback",
    "test_gateway_keeps_a_half_closed_connection_open": "a pod cannot reach the test process's loopback",
    "test_full_mode_reaches_the_host": "a pod cannot reach the test process's loopback",
    "test_sigkilled_owner_leaves_nothing_behind": "it inspects this host's processes and containers",
    "test_fork_bomb_stops_at_the_pids_limit": "Kubernetes has no per-pod pids limit (podPidsLimit is per node)",
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        reason = IN_PROCESS_ONLY.get(item.path.name)
        if params.get("runtime_name") == "http" and reason:
            item.add_marker(pytest.mark.skip(reason=f"in-process only; {reason}"))
        host_only = ON_THE_TEST_HOST.get(item.originalname)
        if params.get("runtime_name") == "kubernetes" and host_only:
            item.add_marker(
                pytest.mark.skip(
                    reason=f"needs the test host: {host_only}; tests/kubernetes covers it offline"
                )
            )


@pytest.fixture(scope="session")
def state_root() -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="pomona-conformance-"))
    yield root


def _image_for(runtime: str) -> str:
    if runtime in ("local", "http"):
        return "host"
    if runtime == "kubernetes":
        return os.environ.get("POMONA_K8S_TEST_IMAGE", "pomona-test/debian:bookworm")
    from tests.images import debian_image

    return debian_image()


@pytest.fixture(scope="session", params=RUNTIMES)
def runtime_name(request: pytest.FixtureRequest) -> str:
    if request.param == "docker" and not docker_available():
        pytest.skip("no Docker engine running (./dev services starts one)")
    if request.param == "kubernetes" and not os.environ.get("KUBECONFIG"):
        pytest.skip(
            "no Kubernetes cluster: no control plane can run on this machine; point "
            "KUBECONFIG at one (kind, k3s, managed) to run the suite on the kubernetes runtime"
        )
    return request.param


@pytest.fixture(scope="session")
def client(
    runtime_name: str, state_root: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SandboxClient]:
    if runtime_name == "http":
        yield from _http_client(state_root / "http", tmp_path_factory.getbasetemp())
        return
    state = state_root / runtime_name
    with SandboxClient(runtime_name, state_dir=str(state)) as c:
        yield c
    leftovers = SandboxClient(runtime_name, state_dir=str(state), auto_cleanup=False)
    try:
        assert leftovers.list_sandboxes() == [], "the suite left sandboxes behind"
    finally:
        leftovers.close()
    if runtime_name == "local":
        from pomona.orchestrator.runtimes.local import LocalRuntime

        LocalRuntime(state).unmount_store()


def _http_client(state: Path, mountable: Path) -> Iterator[SandboxClient]:
    """The tenant may mount host paths under the test's temporary directories only."""
    from pomona.orchestrator.server.app import build
    from tests.service.harness import KEYS, server_thread, unmount

    app = build(
        "local", str(state), api_keys=KEYS, admins={"admin"}, mount_sources=[str(mountable)]
    )
    with server_thread(app) as url:
        with SandboxClient(base_url=url, api_key=KEYS["alice"]) as c:
            yield c
        leftovers = SandboxClient(base_url=url, api_key=KEYS["admin"], auto_cleanup=False)
        try:
            assert leftovers.list_sandboxes() == [], "the suite left sandboxes behind"
        finally:
            leftovers.close()
    unmount(state)


@pytest.fixture(scope="session")
def image(runtime_name: str) -> str:
    return _image_for(runtime_name)


@pytest.fixture
def sandbox(client: SandboxClient, image: str):
    with client.create_sandbox(image, timeout=600, labels={"suite": "conformance"}) as sb:
        yield sb


def host_processes_matching(pattern: str) -> list[str]:
    out = subprocess.run(["pgrep", "-af", pattern], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if str(os.getpid()) not in line.split()[0]]
