"""OpenClaw: all three dialects through a JSON config's provider; needs Node >= 24.16 (the payload's).
Its temporary state dir is deleted after a run, so --state-dir keeps the transcript."""

from __future__ import annotations

import json

from pomona.harnesses.base import (
    API_KEY,
    PI_AI_API,
    Harness,
    Launch,
    NpmInstall,
    Outputs,
    RunContext,
    json_text,
)
from pomona.harnesses.mcp import openclaw_servers


class OpenClaw(Harness):
    name = "openclaw"
    version = "2026.9.6"
    dialects = ("chat", "responses", "anthropic")
    install = NpmInstall("openclaw", version, bin="openclaw")
    command = "openclaw"
    transcript_globs = ("openclaw-state/agents/main/agent/openclaw-agent.sqlite",)
    takes_mcp = True

    def launch(self, ctx: RunContext) -> Launch:
        base = ctx.anthropic_base_url if ctx.dialect == "anthropic" else ctx.base_url
        model = {
            "id": ctx.model,
            "name": ctx.model,
            "reasoning": False,
            "input": ["text"],
            "contextWindow": 128000,
            "maxTokens": 4096,
        }
        config = {
            "models": {
                "mode": "merge",
                "providers": {
                    "proxy": {
                        "baseUrl": base,
                        "apiKey": API_KEY,
                        "api": PI_AI_API[ctx.dialect],
                        "models": [model],
                    }
                },
            },
            "agents": {"defaults": {"model": {"primary": f"proxy/{ctx.model}"}}},
        }
        if ctx.mcp:  # its own default stays: MCP tools behind Tool Search (tool_search, tool_call)
            config["mcp"] = {"servers": openclaw_servers(ctx.mcp)}
        path = f"{ctx.run_dir}/openclaw.json"
        argv = [
            "openclaw",
            "agent",
            "exec",
            ctx.prompt,
            "--config",
            path,
            "--model",
            f"proxy/{ctx.model}",
            "--json",
            "--timeout",
            str(max(1, int(ctx.timeout))),
            "--state-dir",
            f"{ctx.run_dir}/openclaw-state",
            "--cwd",
            ctx.workdir,
        ]
        return Launch(argv, files={path: json_text(config)}, dirs=[f"{ctx.run_dir}/openclaw-state"])

    def _envelope(self, out: Outputs) -> dict:
        text = out.stdout.strip()
        start = text.find("{")
        try:
            value = json.loads(text[start:]) if start >= 0 else {}
        except ValueError:
            lines = out.json_lines()
            value = lines[-1] if lines else {}
        return value if isinstance(value, dict) else {}

    def final_answer(self, out: Outputs) -> str | None:
        final = self._envelope(out).get("final")
        if isinstance(final, dict):
            final = final.get("text")
        return final if isinstance(final, str) and final.strip() else None

    def completed(self, out: Outputs) -> bool:
        return self._envelope(out).get("ok") is True and bool(self.final_answer(out))

    def transcript(self, out: Outputs) -> list[dict]:
        return out.sqlite_rows(
            "openclaw-agent.sqlite", "SELECT * FROM transcript_events ORDER BY rowid"
        )


HARNESS = OpenClaw()
