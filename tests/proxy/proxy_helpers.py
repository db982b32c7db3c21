"""Helpers for the proxy tests: the shell tools harnesses offer, and reading recorded calls."""

from __future__ import annotations

import json
import time
from pathlib import Path

from pomona import trajectories

CHAT_BASH = {
    "type": "function",
    "function": {
        "name": "bash",
        "description": "run a shell command",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string"}},
            "required": ["command"],
        },
    },
}
RESPONSES_EXEC = {
    "type": "function",
    "name": "exec_command",
    "description": "run a command",
    "parameters": {
        "type": "object",
        "properties": {"cmd": {"type": "string"}},
        "required": ["cmd"],
    },
}
ANTHROPIC_BASH = {
    "name": "Bash",
    "description": "run a shell command",
    "input_schema": {
        "type": "object",
        "properties": {"command": {"type": "string"}},
        "required": ["command"],
    },
}
COMMAND = "echo hello > out.txt"


def calls(
    runs: Path, n: int | None = None, timeout: float = 30.0, episode: str | None = None
) -> list[dict]:
    """The recorded calls (of `episode`, if given), waiting for `n` of them: a stream is
    recorded as it closes, which may be just after the client has read its last byte."""
    deadline = time.monotonic() + timeout
    while True:
        rows = trajectories.read(runs, "calls").to_pylist() if runs.exists() else []
        rows = [r for r in rows if episode is None or r["episode"] == episode]
        if n is None or len(rows) >= n or time.monotonic() > deadline:
            return rows
        time.sleep(0.02)


def request_of(row: dict) -> dict:
    return json.loads(row["request"])


def response_of(row: dict) -> dict:
    return json.loads(row["response"])
