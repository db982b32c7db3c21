"""Codex CLI: Responses only, configured by a custom provider in $CODEX_HOME/config.toml
(it ignores OPENAI_BASE_URL, and its built-in provider tries a WebSocket first)."""

from __future__ import annotations

from pomona.harnesses.base import API_KEY, Harness, Launch, NpmInstall, Outputs, RunContext
from pomona.harnesses.mcp import codex_toml


class Codex(Harness):
    name = "codex"
    version = "0.171.0"
    dialects = ("responses",)
    install = NpmInstall("@openai/codex", version, bin="codex")
    command = "codex"
    transcript_globs = ("codex-home/sessions/**/*.jsonl",)
    takes_mcp = True

    def launch(self, ctx: RunContext) -> Launch:
        config = (
            f'model = "{ctx.model}"\nmodel_provider = "proxy"\n\n[model_providers.proxy]\n'
            f'name = "proxy"\nbase_url = "{ctx.base_url}"\nenv_key = "PROXY_API_KEY"\n'
            'wire_api = "responses"\n'
        ) + codex_toml(ctx.mcp)
        home = f"{ctx.run_dir}/codex-home"
        # its own sandbox is off: Pomona's sandbox is the boundary (codex's bwrap fails nested)
        argv = [
            "codex",
            "exec",
            "--skip-git-repo-check",
            "--dangerously-bypass-approvals-and-sandbox",
            "--json",
            "-C",
            ctx.workdir,
            "-m",
            ctx.model,
            ctx.prompt,
        ]
        return Launch(
            argv,
            env={"CODEX_HOME": home, "PROXY_API_KEY": API_KEY},
            files={f"{home}/config.toml": config},
        )

    def final_answer(self, out: Outputs) -> str | None:
        texts = [
            e["item"].get("text")
            for e in out.json_lines()
            if e.get("type") == "item.completed"
            and (e.get("item") or {}).get("type") == "agent_message"
        ]
        return next((t for t in reversed(texts) if isinstance(t, str) and t.strip()), None)

    def completed(self, out: Outputs) -> bool:
        events = out.json_lines()
        return any(e.get("type") == "turn.completed" for e in events) and bool(
            self.final_answer(out)
        )


HARNESS = Codex()
