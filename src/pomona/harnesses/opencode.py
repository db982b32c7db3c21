"""OpenCode: all three dialects through the AI SDK provider named in opencode.json. It takes its
working directory from $PWD, not from the process's cwd, so PWD is always set."""

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
from pomona.harnesses.mcp import opencode_servers

_SDK = {
    "chat": "@ai-sdk/openai-compatible",
    "responses": "@ai-sdk/openai",
    "anthropic": "@ai-sdk/anthropic",
}


class OpenCode(Harness):
    name = "opencode"
    version = "1.18.33"
    dialects = ("chat", "responses", "anthropic")
    install = NpmInstall("opencode-ai", version, bin="opencode")
    command = "opencode"
    transcript_globs = ("home/.local/share/opencode/opencode.db",)
    takes_mcp = True

    def launch(self, ctx: RunContext) -> Launch:
        # @ai-sdk/anthropic posts {baseURL}/messages, so it takes the /v1 URL too
        config = {
            "provider": {
                "proxy": {
                    "npm": _SDK[ctx.dialect],
                    "name": "Proxy",
                    "options": {"baseURL": ctx.base_url, "apiKey": API_KEY},
                    # images in (a browser tool's screenshot) as Claude Code and Codex send
                    # them: a custom provider's model is text-only unless it says otherwise
                    "models": {
                        ctx.model: {
                            "name": ctx.model,
                            "attachment": True,
                            "modalities": {"input": ["text", "image"], "output": ["text"]},
                        }
                    },
                }
            },
            "model": f"proxy/{ctx.model}",
            "autoupdate": False,
            "share": "disabled",
            "permission": {"*": "allow"},
        }
        if ctx.mcp:
            config["mcp"] = opencode_servers(ctx.mcp)
        path = f"{ctx.run_dir}/opencode.json"
        env = {
            "OPENCODE_CONFIG": path,
            "PWD": ctx.workdir,
            "OPENCODE_DISABLE_MODELS_FETCH": "1",
            "OPENCODE_DISABLE_AUTOUPDATE": "1",
            "XDG_DATA_HOME": f"{ctx.home}/.local/share",
            "XDG_CONFIG_HOME": f"{ctx.home}/.config",
            "XDG_CACHE_HOME": f"{ctx.home}/.cache",
            "XDG_STATE_HOME": f"{ctx.home}/.local/state",
        }
        argv = ["opencode", "run", "--format", "json", "-m", f"proxy/{ctx.model}", ctx.prompt]
        return Launch(argv, env=env, files={path: json_text(config)})

    def final_answer(self, out: Outputs) -> str | None:
        texts = [
            (e.get("part") or {}).get("text") for e in out.json_lines() if e.get("type") == "text"
        ]
        return next((t for t in reversed(texts) if isinstance(t, str) and t.strip()), None)

    def transcript(self, out: Outputs) -> list[dict]:
        return out.sqlite_rows("opencode.db", "SELECT * FROM part ORDER BY rowid")


HARNESS = OpenCode()
