"""Fixtures for the harness-backed envs and rollouts: a sandbox state directory, a recording
proxy per test (with one route to a dead upstream), and a policy written in the test."""

from __future__ import annotations

import json
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pomona.harnesses import payload
from pomona.proxy import ProxyConfig, ProxyServer

HARNESSES = ("pi", "claude-code")  # fast, and between them chat, responses and anthropic
SHELL_TOOLS = ("bash", "Bash", "exec_command", "shell", "exec")


@pytest.fixture(scope="session")
def harnesses_ready() -> None:
    missing = payload.ensure(HARNESSES)
    if missing:
        pytest.skip(f"harness payload unavailable: {missing}")


@pytest.fixture(scope="session")
def gym_state(harnesses_ready: None) -> Iterator[str]:
    path = tempfile.mkdtemp(prefix="pomona-gym-harness-")
    yield path
    from pomona.gym.sandboxes import _close_all
    from pomona.orchestrator.runtimes.local import LocalRuntime

    _close_all()
    LocalRuntime(path).unmount_store()


def dead_port() -> int:
    """A local port with nothing listening: connecting to it is refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    return tmp_path / "runs"


@pytest.fixture
def gym_proxy(runs: Path) -> Iterator[ProxyServer]:
    dead = {"model_name": "dead", "litellm_params": {
        "model": "openai/dead", "api_base": f"http://127.0.0.1:{dead_port()}/v1", "api_key": "x"}}
    config = ProxyConfig.from_model_list([dead], trajectories=runs, connect_timeout=2)
    with ProxyServer(config) as proxy:
        yield proxy


def solve_with(commands: list[str]):
    """A policy: the shell-tool call for each command in turn, then a final message. It reads
    only the observation, so it works for every harness and dialect."""

    def act(obs: dict[str, str]) -> dict[str, Any]:
        messages, tools = json.loads(obs["messages"]), json.loads(obs["tools"])
        done = sum(m["role"] == "tool" for m in messages)
        if done >= len(commands):
            return {"text": "done"}
        by_name = {t["name"]: t for t in tools}
        name = next(n for n in SHELL_TOOLS if n in by_name)
        props = by_name[name]["parameters"].get("properties") or {}
        key = "cmd" if "cmd" in props else "command"
        return {"tool_calls": [{"name": name, "arguments": {key: commands[done]}}]}

    return act
