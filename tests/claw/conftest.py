"""Fixtures for the claw tests: the official checkouts (skipped, saying why, where absent), the
payload (claw-eval's CPython, which runs the benchmarks' own code in the sandboxes, and the
harnesses under test), one recording proxy and one local sandbox client per session, and the
scripted solutions (tests/claw/solutions/*.json: tool calls, shell commands and final words
that solve official tasks, kept here, not in the checkouts)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pomona import SandboxClient
from pomona.harnesses import payload, tools_mount
from pomona.proxy import ProxyConfig, ProxyServer
from pomona.proxy.control import gateway

HARNESSES = ["claw-eval", "openclaw", "claude-code", "opencode", "hermes", "codex", "pi"]
# ../shared/benchmarks from the repository's root (a worktree's root is one level deeper)
ROOT = Path(__file__).resolve().parents[2]
SHARED = next(
    (
        p / "shared" / "benchmarks"
        for p in (ROOT.parent, ROOT.parent.parent)
        if (p / "shared" / "benchmarks").is_dir()
    ),
    ROOT.parent / "shared" / "benchmarks",
)
CHECKOUTS = {"claw-eval": SHARED / "claw-eval", "qwenclawbench": SHARED / "qwenclawbench"}
SOLUTIONS = Path(__file__).parent / "solutions"


def checkout(kind: str) -> Path:
    path = CHECKOUTS[kind]
    if not path.is_dir():
        pytest.skip(f"no {kind} checkout at {path} (the official repository, as a user clones it)")
    return path


@pytest.fixture(scope="session")
def claw_eval_checkout() -> Path:
    return checkout("claw-eval")


@pytest.fixture(scope="session")
def qwen_checkout() -> Path:
    return checkout("qwenclawbench")


def solutions(kind: str) -> dict[str, Any]:
    return json.loads((SOLUTIONS / f"{kind.replace('-', '_')}.json").read_text())


def steps(solution: dict[str, Any]) -> tuple[str, ...]:
    """A solution as the scripted model's steps: tool calls of the MCP server `claw` (which the
    native loop offers under their own names), shell commands, final words."""
    out = []
    for step in solution["steps"]:
        if isinstance(step, dict) and "tool" in step:
            step = {"server": "claw", **step}
        out.append(step if isinstance(step, str) else json.dumps(step, ensure_ascii=False))
    return tuple(out)


def solved(kind: str, ids: list[str] | None = None) -> list[Any]:
    """The official tasks that have a scripted solution (or those of `ids`), each carrying it as
    its oracle (and a multi-turn task its simulated user's replies)."""
    from pomona.benchmarks.claw import load

    known = solutions(kind)
    chosen = ids or sorted(known)
    out = []
    for task in load(kind, str(checkout(kind)), only=chosen):
        name = task.id.split("/", 1)[1]
        extra = {"user_script": tuple(known[name].get("user", ()))} if kind == "claw-eval" else {}
        out.append(dataclasses.replace(task, solution=steps(known[name]), **extra))
    return out


@pytest.fixture(scope="session")
def unavailable() -> dict[str, str]:
    report = payload.install(HARNESSES)
    return {**report.unavailable, **report.failed}


@pytest.fixture(scope="session")
def need(unavailable: dict[str, str]) -> Callable[[str], None]:
    def check(name: str) -> None:
        if name in unavailable:
            pytest.skip(f"{name}: {unavailable[name]}")

    check("claw-eval")  # its CPython runs the benchmarks' own code for every harness
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
