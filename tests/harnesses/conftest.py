"""Fixtures for the harness tests: the payload (installed once, through the same `install` a user
runs, so a fresh machine builds it and this one reuses /var/cache/pomona/tools), one recording
proxy with the scripted model and a dead upstream, and sandbox clients per runtime."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pomona import SandboxClient
from pomona.harnesses import get, names, payload, tools_mount
from pomona.proxy import ProxyConfig, ProxyServer
from pomona.proxy.control import gateway
from tests.conftest import docker_available

ALL = names()
STANDALONE = [n for n in ALL if get(n).standalone]  # the rest play only their benchmark's tasks


@pytest.fixture(scope="session")
def unavailable() -> dict[str, str]:
    """Install every harness (cached); name -> why, for those this machine cannot have."""
    report = payload.install(ALL)
    return {**report.unavailable, **report.failed}


@pytest.fixture(scope="session")
def need(unavailable: dict[str, str]) -> Callable[[str], None]:
    def check(name: str) -> None:
        if name in unavailable:
            pytest.skip(f"{name}: {unavailable[name]}")

    return check


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("harness-runs") / "runs"


@pytest.fixture(scope="session")
def proxy(runs: Path) -> Iterator[ProxyServer]:
    """The scripted model, plus `dead`: an upstream whose port nothing listens on."""
    dead = {
        "model_name": "dead",
        "litellm_params": {
            "model": "openai/dead",
            "api_base": f"http://127.0.0.1:{_closed_port()}/v1",
            "api_key": "x",
        },
    }
    with ProxyServer(ProxyConfig.from_model_list([dead], trajectories=runs)) as p:
        yield p


def _client(runtime: str, state: Path) -> Iterator[SandboxClient]:
    with SandboxClient(runtime, state_dir=str(state)) as c:
        yield c
    if runtime == "local":
        from pomona.orchestrator.runtimes.local import LocalRuntime

        LocalRuntime(state).unmount_store()


@pytest.fixture(scope="session")
def local_client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SandboxClient]:
    yield from _client("local", tmp_path_factory.mktemp("harness-local"))


@pytest.fixture(scope="session")
def docker_client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SandboxClient]:
    if not docker_available():
        pytest.skip("no Docker engine running (./dev services starts one)")
    yield from _client("docker", tmp_path_factory.mktemp("harness-docker"))


@pytest.fixture
def sandbox_for(proxy: ProxyServer) -> Iterator[Callable[..., Any]]:
    """Make a gateway sandbox (only the proxy reachable) with the payload mounted."""
    made = []

    def make(client: SandboxClient, image: str = "host") -> Any:
        sb = client.create_sandbox(
            image,
            network="gateway",
            gateway=gateway(proxy),
            mounts=[tools_mount()],
            timeout=900,
        )
        made.append(sb)
        return sb

    yield make
    for sb in made:
        sb.delete()
