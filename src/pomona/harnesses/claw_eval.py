"""Claw-Eval's own agent loop as a harness (`claw-eval`): its `run_task` from the user's
checkout, as its `claw-eval run --sandbox` runs it, for parity with Claw-Eval's published
numbers (which come from this loop, not from an assistant CLI). It runs Claw-Eval tasks only:
the loop is started by the task's trusted host inside the sandbox, as root, with its sandbox
tools served by Claw-Eval's sandbox server running as the agent's user (see
benchmarks/claw/sandbox/claw_native.py); its trace is the trial's evidence.

The payload (`pomona harnesses install claw-eval`) is a private CPython with the Python packages
Claw-Eval's code imports (its pyproject's core, mock and sandbox-server dependencies, pinned) and
the MCP SDK; its `pomona-python` also runs the benchmarks' services, relays and graders."""

from __future__ import annotations

import shlex

from pomona.harnesses.base import Harness, Launch, Outputs, PypiInstall, RunContext

LAUNCHER = "/opt/pomona-claw/agent/claw_native.py"  # laid out by the task (benchmarks/claw)


class ClawEval(Harness):
    name = "claw-eval"
    version = "2.0"  # Pomona's launcher; the loop is the checkout's own
    dialects = ("chat",)
    install = PypiInstall(
        (
            "mcp==2.3.0",
            "openai==3.57.0",
            "httpx==0.28.1",
            "pydantic==2.14.4",
            "PyYAML==6.0.4",
            "fastapi==0.165.0",
            "uvicorn==0.54.0",
            "pypdf==7.1.1",
            "pillow==13.0.0",
        ),
        script="",
    )
    command = "pomona-python"
    takes_mcp = True  # the task's MCP relay is offered; the loop reaches the same tools itself
    standalone = False  # the launcher is laid out by a Claw-Eval task

    def launch(self, ctx: RunContext) -> Launch:
        refuse = f"claw-eval is Claw-Eval's own loop: it plays Claw-Eval tasks only (no {LAUNCHER})"
        argv = ["pomona-python", LAUNCHER, "--model", ctx.model, "--base-url", ctx.base_url]
        script = f"test -f {LAUNCHER} || {{ echo {shlex.quote(refuse)} >&2; exit 2; }}; exec "
        return Launch(["sh", "-c", script + shlex.join(argv)])

    def final_answer(self, out: Outputs) -> str | None:
        finals = [e.get("text") for e in out.json_lines() if e.get("type") == "final"]
        text = finals[-1] if finals else None
        return text if isinstance(text, str) and text.strip() else None

    def completed(self, out: Outputs) -> bool:
        return any(e.get("type") == "final" for e in out.json_lines())


HARNESS = ClawEval()
