"""Personal-assistant benchmarks: Claw-Eval (task.yaml) and QwenClawBench (task_*.md), their
mock services, graders, judges and scoring, run through real harnesses with the task's tools
given over MCP. See docs/claw.md."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def oracle_steps(values: Any) -> tuple[str, ...]:
    """Scripted-model steps as the proxy takes them: JSON steps (tool calls, text) as strings."""
    return tuple(v if isinstance(v, str) else json.dumps(v) for v in values or ())


def load(kind: str, path: str | Path | None = None) -> list[Any]:
    """The tasks of `claw-eval` or `qwenclawbench`: Pomona's local set, or those under `path`.
    The judge and the simulated user are models the proxy routes: POMONA_JUDGE_MODEL and
    POMONA_USER_MODEL (default `scripted`, the offline stand-ins)."""
    options = {"judge_model": os.environ.get("POMONA_JUDGE_MODEL", "scripted")}
    if kind == "claw-eval":
        from pomona.benchmarks.claw import claw_eval

        options["user_model"] = os.environ.get("POMONA_USER_MODEL", "scripted")
        return list(
            claw_eval.tasks(
                path or claw_eval.DATA, "claw-eval" if path else "claw-eval-local", **options
            )
        )
    from pomona.benchmarks.claw import qwenclawbench

    return list(
        qwenclawbench.tasks(
            path or qwenclawbench.DATA,
            "qwenclawbench" if path else "qwenclawbench-local",
            **options,
        )
    )
