"""Claw-Eval's native loop as a harness (`claw-eval`): OpenAI function calling with the task's
tools, for parity with Claw-Eval's published numbers, which come from its own loop rather than
from a real assistant CLI. Pomona's implementation (benchmarks/claw/sandbox/loop.py) runs inside
the sandbox on the payload's private CPython with the `mcp` and `openai` SDKs; it takes a task's
tools from MCP servers (the same relay every other harness gets) and plays a multi-turn task's
simulated user. The payload's `pomona-python` also runs the mock services and the MCP relay."""

from __future__ import annotations

from pathlib import Path

from pomona.harnesses.base import Harness, Launch, Outputs, PypiInstall, RunContext, json_text
from pomona.harnesses.mcp import McpUnsupported

LOOP = Path(__file__).parents[1] / "benchmarks" / "claw" / "sandbox" / "loop.py"


class ClawEval(Harness):
    name = "claw-eval"
    version = "1.0"  # Pomona's loop; the SDKs it runs on are pinned below
    dialects = ("chat",)
    install = PypiInstall(("mcp==2.3.0", "openai==2.24.0"), script="")
    command = "pomona-python"
    transcript_globs = ("trace.jsonl",)
    takes_mcp = True

    def launch(self, ctx: RunContext) -> Launch:
        loop = f"{ctx.run_dir}/loop.py"
        files = {loop: LOOP.read_text()}
        argv = [
            "pomona-python",
            loop,
            "--base-url",
            ctx.base_url,
            "--model",
            ctx.model,
            "--prompt",
            ctx.prompt,
            "--trace",
            f"{ctx.run_dir}/trace.jsonl",
            "--workdir",
            ctx.workdir,
        ]
        if ctx.mcp:
            if any(not s.stdio for s in ctx.mcp):
                raise McpUnsupported("claw-eval's loop connects to stdio MCP servers only")
            servers = {s.name: {"command": list(s.command), "env": dict(s.env)} for s in ctx.mcp}
            files[f"{ctx.run_dir}/mcp.json"] = json_text(servers)
            argv += ["--mcp", f"{ctx.run_dir}/mcp.json"]
        return Launch(argv, files=files)

    def final_answer(self, out: Outputs) -> str | None:
        finals = [e.get("text") for e in out.json_lines() if e.get("type") == "final"]
        text = finals[-1] if finals else None
        return text if isinstance(text, str) and text.strip() else None

    def completed(self, out: Outputs) -> bool:
        return any(e.get("type") == "final" for e in out.json_lines()) and bool(
            self.final_answer(out)
        )

    def transcript(self, out: Outputs) -> list[dict]:
        return out.file_lines("trace.jsonl")


HARNESS = ClawEval()
