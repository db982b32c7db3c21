"""Fixtures for the harness-backed envs and rollouts: a sandbox state directory, a recording
proxy per test (with one route to a dead upstream), and a policy written in the test."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pomona.harnesses import payload
from pomona.proxy import ModelRoute, ProxyConfig, ProxyServer

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
    from pomona.orchestrator.runtimes.local import LocalRuntime
    from pomona.orchestrator.sdk.shared import close_shared

    close_shared(path)
    LocalRuntime(path).unmount_store()


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    return tmp_path / "runs"


@pytest.fixture
def gym_proxy(runs: Path) -> Iterator[ProxyServer]:
    """A recording proxy whose model "broken" is routed to an upstream that rejects every call
    (this same proxy, asked for a model it does not have: a 404 no SDK retries)."""
    with ProxyServer(ProxyConfig(trajectories=runs)) as proxy:
        broken = {
            "model_name": "broken",
            "litellm_params": {
                "model": "openai/no-such-model",
                "api_base": f"{proxy.url}/v1",
                "api_key": "x",
            },
        }
        proxy.config.models.append(ModelRoute.from_entry(broken))
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
