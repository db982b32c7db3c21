"""Personal-assistant benchmarks: Claw-Eval (task.yaml) and QwenClawBench (task_*.md), run from
the user's checkout with the benchmarks' own services, graders, judge prompts and scoring, through
real harnesses given the tasks' tools over MCP. See docs/claw.md."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pomona.benchmarks.claw.judge import JudgeSpec


def judge_from_env() -> JudgeSpec:
    """The judge model: POMONA_JUDGE_MODEL, a model the proxy routes (default: the scripted
    stand-in)."""
    return JudgeSpec(os.environ.get("POMONA_JUDGE_MODEL") or "scripted")


def _label(kind: str, path: str | None, judge: JudgeSpec) -> str:
    """The benchmark's name in episode rows: which task set, and who judged (so runs judged by
    different models, the scripted stand-in above all, never share a leaderboard row)."""
    from pomona.benchmarks.swebench.datasets import label_of

    name = f"{kind}:{label_of(path)}" if path else f"{kind}-local"
    return f"{name} [{judge.label}]"


def load(kind: str, path: str | Path | None = None, only: Iterable[str] | None = None) -> list[Any]:
    """The tasks of `claw-eval` or `qwenclawbench`: those of the checkout at `path`, or Pomona's
    local set (whose framework comes from the checkout POMONA_CLAW_EVAL / POMONA_QWENCLAWBENCH
    names). `only`: task ids to load (others are not read at all). Tasks that cannot run here are
    returned with the reason in metadata["unavailable"]."""
    judge = judge_from_env()
    chosen = set(only) if only else None
    label = _label(kind, str(path) if path else None, judge)
    if kind == "claw-eval":
        from pomona.benchmarks.claw import claw_eval
        from pomona.benchmarks.claw.checkout import ClawEvalCheckout

        user = os.environ.get("POMONA_USER_MODEL") or "scripted"
        if path:
            found = ClawEvalCheckout.at(path)
            return list(
                claw_eval.tasks(found.root, found, label, chosen, judge=judge, user_model=user)
            )
        framework = ClawEvalCheckout.from_env()
        return list(
            claw_eval.tasks(claw_eval.DATA, framework, label, chosen, judge=judge, user_model=user)
        )
    from pomona.benchmarks.claw import qwenclawbench
    from pomona.benchmarks.claw.checkout import QwenCheckout

    if path:
        qwen = QwenCheckout.at(path)
        return list(qwenclawbench.tasks(qwen.dataset, qwen, label, chosen, judge=judge))
    engine = QwenCheckout.from_env()
    return list(qwenclawbench.tasks(qwenclawbench.DATA, engine, label, chosen, judge=judge))
