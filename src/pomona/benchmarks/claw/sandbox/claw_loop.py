"""Claw-Eval's own agent loop for one episode (`run_task`, as its `run --sandbox` calls it), as
root beside the trusted host: the model is the episode's proxy URL, the task's tools go through
Claw-Eval's ToolDispatcher to the mock services, its sandbox tools (shell, files, media) to
Claw-Eval's sandbox server running as the agent's user, its simulated user is Claw-Eval's
UserAgent. The configuration (system prompt, media, context window) is the checkout's own
config for the task's kind; its model, judge and keys are not used (the proxy routes the model).
The trace lands in HOME/run/traces, out of the agent's reach.

    claw_loop.py --task-dir D --model M --base-url URL --sandbox-url URL --trace-dir D [--user J]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # pomona-python runs with -I

from claw_common import BENCH  # noqa: E402


def config_for(task: object) -> Path | None:
    """The checkout's config for the task's kind, as its README pairs them."""
    if getattr(task, "user_agent").enabled:  # noqa: B009 - a pydantic model of the checkout's
        name = "config_user_agent.yaml"
    elif "multimodal" in getattr(task, "tags"):  # noqa: B009
        name = "config_multimodal.yaml"
    else:
        name = "config_general.yaml"
    path = BENCH / name
    return path if path.is_file() else None


def final_text(trace: Path) -> str:
    """The last assistant words of the trace: the loop's answer to the user."""
    from claw_eval.trace.reader import load_trace

    _, messages, *_ = load_trace(trace)
    texts = [m.message.text for m in messages if m.message.role == "assistant" and m.message.text]
    return texts[-1] if texts else ""


def wait_for(url: str, limit: float = 120.0) -> None:
    """Until the sandbox server answers (it starts beside this process)."""
    deadline = time.monotonic() + limit
    while True:
        try:
            urllib.request.urlopen(f"{url}/health", timeout=2).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise SystemExit(f"Claw-Eval's sandbox server at {url} did not answer") from None
            time.sleep(0.2)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--task-dir", type=Path, required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--base-url", required=True)
    p.add_argument("--sandbox-url", required=True)
    p.add_argument("--trace-dir", type=Path, required=True)
    p.add_argument("--user", help="the simulated user, JSON")
    args = p.parse_args(argv)
    sys.path.insert(0, str(BENCH / "src"))
    from claw_eval.config import Config, load_config
    from claw_eval.models.task import TaskDefinition
    from claw_eval.runner.loop import run_task
    from claw_eval.runner.providers.openai_compat import OpenAICompatProvider

    task = TaskDefinition.from_yaml(args.task_dir / "task.yaml")
    config = config_for(task)
    cfg = load_config(config) if config else Config()
    provider = OpenAICompatProvider(
        model_id=args.model, api_key="sk-pomona", base_url=args.base_url
    )
    user = None
    if args.user and task.user_agent.enabled:
        from claw_user import make_user

        user = make_user(json.loads(args.user))
    from claw_user import close_all

    wait_for(args.sandbox_url)
    try:
        trace = run_task(
            task,
            provider,
            trace_dir=args.trace_dir,
            sandbox_tools=True,
            sandbox_url=args.sandbox_url,
            prompt_cfg=cfg.prompt,
            model_cfg=cfg.model,
            media_cfg=cfg.media,
            user_agent=user,
        )
    finally:
        close_all()
    print(json.dumps({"pomona_final": final_text(trace), "trace": str(trace)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
