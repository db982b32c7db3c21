"""Claude Code: Anthropic Messages only, pointed by ANTHROPIC_BASE_URL (without /v1)."""

from __future__ import annotations

from pomona.harnesses.base import (
    API_KEY,
    Harness,
    Launch,
    NpmInstall,
    Outputs,
    RunContext,
    json_text,
)
from pomona.harnesses.mcp import mcp_servers_json


class ClaudeCode(Harness):
    name = "claude-code"
    version = "2.1.332"
    dialects = ("anthropic",)
    install = NpmInstall(
        "@anthropic-ai/claude-code", version, bin="claude", native="bin/claude.exe"
    )
    command = "claude"
    transcript_globs = ("home/.claude/projects/**/*.jsonl",)
    takes_mcp = True

    def launch(self, ctx: RunContext) -> Launch:
        argv = [
            "claude",
            "-p",
            ctx.prompt,
            "--output-format",
            "stream-json",
            "--verbose",
            "--dangerously-skip-permissions",
            "--model",
            ctx.model,
        ]
        env = {
            "ANTHROPIC_BASE_URL": ctx.anthropic_base_url,
            "ANTHROPIC_API_KEY": API_KEY,
            "IS_SANDBOX": "1",  # it refuses --dangerously-skip-permissions as root otherwise
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
        }
        files = {}
        if ctx.mcp:
            path = f"{ctx.run_dir}/mcp.json"
            files[path] = json_text(mcp_servers_json(ctx.mcp))
            argv += ["--mcp-config", path, "--strict-mcp-config"]
            # MCP tools offered directly, not deferred behind ToolSearch; a slow server may start
            env.update(ENABLE_TOOL_SEARCH="false", MCP_TIMEOUT="60000")
        return Launch(argv, env=env, files=files)

    def final_answer(self, out: Outputs) -> str | None:
        results = [e for e in out.json_lines() if e.get("type") == "result"]
        text = results[-1].get("result") if results else None
        return text if isinstance(text, str) and text.strip() else None

    def completed(self, out: Outputs) -> bool:
        results = [e for e in out.json_lines() if e.get("type") == "result"]
        return bool(results) and not results[-1].get("is_error") and bool(self.final_answer(out))


HARNESS = ClaudeCode()
