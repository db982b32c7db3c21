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

RUNTIMES = ["local", "docker", "http", "kubernetes", "gvisor"]
# "gvisor": the docker runtime with isolation="gvisor" (runsc, ptrace platform; make_runtime's
# name for it). The whole suite
# under it takes many minutes here (each exec costs ~0.5 s), more than CI's budget allows, so it
# runs when POMONA_TEST_GVISOR=1; tests/security/test_differential.py probes it in every run.
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


# What differs under gVisor (Debian's runsc 2022-12, ptrace platform), named here so a run with
# POMONA_TEST_GVISOR=1 is green only for what holds; docs/security.md says the same.
UNDER_GVISOR = {
    "test_write_read_list_stat_remove": "this runsc refuses statx(AT_NO_AUTOMOUNT), which "
    "coreutils 9's stat and ls -l use (EINVAL)",
    "test_memory_hog_is_killed": "the memory limit holds the whole sandbox (the Sentry with it): "
    "a hog ends the sandbox, not only itself",
    "test_fork_bomb_stops_at_the_pids_limit": "the pids limit counts the Sentry's own threads: "
    "a limit of 40 cannot start gVisor",
    "test_cpu_limit_caps_cpu_time": "inside, CPU time is gVisor's own accounting, not the "
    "host cgroup's, so the sandbox cannot measure its throttling",
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        reason = IN_PROCESS_ONLY.get(item.path.name)
        if params.get("runtime_name") == "http" and reason:
            item.add_marker(pytest.mark.skip(reason=f"in-process only; {reason}"))
        if params.get("runtime_name") == "gvisor" and item.originalname in UNDER_GVISOR:
            item.add_marker(pytest.mark.skip(reason=f"gVisor: {UNDER_GVISOR[item.originalname]}"))
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


ROOTLESS = os.geteuid() != 0  # the suite as an ordinary user: test_rootless.py runs it so


def _image_for(runtime: str) -> str:
    if ROOTLESS:  # an ordinary user's local runtime takes OCI images only
        return os.environ["POMONA_TEST_LOCAL_IMAGE"]
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
    if request.param == "gvisor" and not os.environ.get("POMONA_TEST_GVISOR"):
        pytest.skip(
            "the suite under gVisor runs with POMONA_TEST_GVISOR=1 (minutes: ~0.5 s an exec)"
        )
    if request.param == "gvisor" and not docker_available():
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
    runtime, options = (
        ("docker", {"isolation": "gvisor"}) if runtime_name == "gvisor" else (runtime_name, {})
    )
    with SandboxClient(runtime, state_dir=str(state), **options) as c:
        yield c
    leftovers = SandboxClient(runtime, state_dir=str(state), auto_cleanup=False, **options)
    try:
        assert leftovers.list_sandboxes() == [], "the suite left sandboxes behind"
    finally:
        leftovers.close()
    if runtime_name == "local" and not ROOTLESS:  # as an ordinary user no store is mounted
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
