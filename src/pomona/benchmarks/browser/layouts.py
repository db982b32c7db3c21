"""Trajectories written in the layouts the official evaluators read, so their own scripts can
re-judge a Pomona run:

    WebVoyager       <root>/task<id>/interact_messages.json + screenshot<N>.png (N from 1)
                     (auto_eval.py reads the task from message [1] and the last k screenshots)
    Online-Mind2Web  <root>/<task_id>/result.json (schema "online-mind2web-v2") +
                     <task_id>/trajectory/<N>_screenshot.png; the action history ends with one
                     step for the answer (on the last screenshot), which Online-Mind2Web's
                     src/run.py drops before judging, so its judge sees the factual actions
                     only; the answer also sits apart in agent_final_answer
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def write_webvoyager(
    root: Path, task_id: str, messages: list[dict[str, Any]], screenshots: list[bytes]
) -> Path:
    folder = root / f"task{task_id}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "interact_messages.json").write_text(json.dumps(messages, indent=1))
    for n, png in enumerate(screenshots, 1):
        (folder / f"screenshot{n}.png").write_bytes(png)
    return folder


def write_mind2web(
    root: Path,
    row: dict[str, Any],
    steps: list[dict[str, Any]],
    screenshots: list[bytes],
    answer: str | None,
) -> Path:
    folder = root / row["task_id"]
    (folder / "trajectory").mkdir(parents=True, exist_ok=True)
    for n, png in enumerate(screenshots):
        (folder / "trajectory" / f"{n}_screenshot.png").write_bytes(png)
    history = [
        {
            "action": s["action"],
            "thought": s.get("thought", ""),
            "screenshot": f"trajectory/{s['screenshot']}_screenshot.png",
        }
        for s in steps
    ]
    if screenshots:  # the answer's step: run.py drops the last step's action, keeps its image
        last = f"trajectory/{len(screenshots) - 1}_screenshot.png"
        history.append({"action": f"ANSWER: {answer or ''}", "thought": "", "screenshot": last})
    result = {
        "schema_version": "online-mind2web-v2",
        "task_id": row["task_id"],
        "task": row["confirmed_task"],
        "website": row["website"],
        "action_history": history,
        "agent_final_answer": answer or "",
    }
    (folder / "result.json").write_text(json.dumps(result, indent=1))
    return folder


def webvoyager_messages(
    task: str, web: str, steps: list[dict[str, Any]], answer: str | None
) -> list[dict[str, Any]]:
    """A harness's browsing (it has no WebVoyager conversation of its own) as the chat messages
    WebVoyager's evaluator reads: the task in message [1] in its shape, one assistant turn per
    action, and the answer as the last `Action: ANSWER; ...`."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "A web agent's actions, recorded by Pomona."},
        {"role": "user", "content": f"Now given a task: {task} Please interact with {web} and get the answer."},
    ]  # fmt: skip
    for step in steps:
        thought = step.get("thought") or ""
        messages.append(
            {"role": "assistant", "content": f"Thought: {thought}\nAction: {step['action']}"}
        )
    if answer is not None:
        messages.append(
            {"role": "assistant", "content": f"Thought: done.\nAction: ANSWER; {answer}"}
        )
    return messages
