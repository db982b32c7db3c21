"""Compile each local task's `plan` (steps by element text, as a person would write them) into
its `reference_actions` (WebVoyager actions with the mark numbers the pages really show), by
playing the plan in a real BrowserEnv, and check that the oracle accepts the result.

The sites are deterministic, so the numbers hold for every later run; the oracle model replays
them. Run after changing a site or a task:

    python -m pomona.gym.browser_references [--state-dir D]

Plan steps: `click TEXT`, `type LABEL :: TEXT` (LABEL is the field's placeholder or text),
`scroll up|down`, `back`, `google`, `answer TEXT` (default `answer Done.`). An element not in
view is scrolled to.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from pomona.benchmarks.browser import tasks as local
from pomona.browser_env.marks import Mark
from pomona.errors import PomonaError

MAX_SCROLLS = 6


class PlanFailed(PomonaError, RuntimeError):
    """A task's plan did not replay to a passing episode: its reference actions are not kept."""


def _find(marks: list[Mark], label: str, typing: bool) -> Mark | None:
    for m in marks:
        if typing and m.typeable and label in (m.placeholder, m.text):
            return m
        if not typing and not m.typeable and m.text == label:
            return m
    return None


def compile_plan(env: Any, task_id: str) -> tuple[list[str], dict[str, Any]]:
    """Play the task's plan in `env` (a BrowserEnv); returns its actions and the final info."""
    _, info = env.reset(options={"task": task_id})
    task = env.unwrapped.task
    out: list[str] = []

    def do(action: str) -> dict[str, Any]:
        _, _, terminated, truncated, step_info = env.step(action)
        if step_info.get("failure", "none") != "none" or step_info.get("error"):
            raise PlanFailed(f"{task_id}: {action!r} failed: {step_info}")
        out.append(action)
        return step_info

    plan = list(task.metadata["plan"])
    if not plan[-1].startswith("answer "):
        plan.append("answer Done.")  # the episode ends on an answer even when the task is an errand
    for step in plan:
        verb, _, rest = step.partition(" ")
        if verb == "answer":
            return out + [f"ANSWER; {rest}"], do(f"ANSWER; {rest}")
        if verb in ("scroll", "back", "google"):
            info = do(
                {"scroll": f"Scroll [WINDOW]; {rest}", "back": "GoBack", "google": "Google"}[verb]
            )
            continue
        label, _, text = rest.partition(" :: ")
        for _ in range(MAX_SCROLLS):
            mark = _find(info["marks"], label, verb == "type")
            if mark is not None:
                break
            info = do("Scroll [WINDOW]; down")
        else:
            raise PlanFailed(f"{task_id}: no element {label!r} at {info['url']}")
        info = do(f"Type [{mark.index}]; {text}" if verb == "type" else f"Click [{mark.index}]")
    raise AssertionError("unreachable: the plan ends with an answer")


def main(argv: list[str] | None = None) -> int:
    import gymnasium as gym

    from pomona.gym import register_envs

    register_envs()

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--state-dir")
    args = parser.parse_args(argv)
    rows = [dict(r) for r in local.records()]
    env = gym.make(
        "pomona/BrowserEnv-v0", benchmark="webvoyager-local", state_dir=args.state_dir, max_steps=40
    )
    failed = []
    try:
        for row in rows:
            row.pop("reference_actions", None)
            row["reference_actions"], info = compile_plan(env, row["id"])
            verdict = info.get("score", {})
            print(
                f"{row['id']}: {len(row['reference_actions'])} actions, oracle "
                f"{'passes' if verdict.get('resolved') else 'FAILS'}"
            )
            if not verdict.get("resolved"):
                failed.append((row["id"], verdict.get("details")))
    finally:
        env.close()
    if failed:
        for task_id, details in failed:
            print(f"  {task_id}: {json.dumps(details)[:400]}")
        return 1
    local.TASKS_FILE.write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(f"wrote {local.TASKS_FILE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
