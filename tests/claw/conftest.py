"""Fixtures for the claw tests: the payload (claw-eval's CPython with the mcp and openai SDKs, and
the harnesses under test), one recording proxy, and one local sandbox client per session."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pomona import SandboxClient
from pomona.harnesses import payload, tools_mount
from pomona.proxy import ProxyConfig, ProxyServer
from pomona.proxy.control import gateway

HARNESSES = ["claw-eval", "openclaw", "claude-code", "opencode", "hermes", "codex", "pi"]


@pytest.fixture(scope="session")
def unavailable() -> dict[str, str]:
    report = payload.install(HARNESSES)
    return {**report.unavailable, **report.failed}


@pytest.fixture(scope="session")
def need(unavailable: dict[str, str]) -> Callable[[str], None]:
    def check(name: str) -> None:
        if name in unavailable:
            pytest.skip(f"{name}: {unavailable[name]}")

    check("claw-eval")  # its CPython runs the services and the MCP relay for every harness
    return check


@pytest.fixture(scope="session")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("claw-runs") / "runs"


@pytest.fixture(scope="session")
def proxy(runs: Path) -> Iterator[ProxyServer]:
    with ProxyServer(ProxyConfig(trajectories=runs)) as p:
        yield p


@pytest.fixture(scope="session")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SandboxClient]:
    state = tmp_path_factory.mktemp("claw-local")
    with SandboxClient("local", state_dir=str(state)) as c:
        yield c
    from pomona.orchestrator.runtimes.local import LocalRuntime

    LocalRuntime(state).unmount_store()


@pytest.fixture
def sandbox_for(proxy: ProxyServer, client: SandboxClient) -> Iterator[Callable[..., Any]]:
    """A gateway sandbox (only the proxy reachable) with the payload mounted."""
    made = []

    def make() -> Any:
        sb = client.create_sandbox(
            "host",
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
