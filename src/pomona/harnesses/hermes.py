"""Hermes Agent (Nous Research): Python; chat by default, Anthropic Messages by api_mode, Responses
through a named provider with the codex_responses transport. `-z` is its one-shot mode."""

from __future__ import annotations

import yaml

from pomona.harnesses.base import API_KEY, Harness, Launch, Outputs, PypiInstall, RunContext
from pomona.harnesses.mcp import hermes_servers


class Hermes(Harness):
    name = "hermes"
    version = "0.19.0"
    dialects = ("chat", "anthropic", "responses")
    # the anthropic SDK pin: 2.x breaks Hermes with an httpx Timeout error. edge-tts: Hermes
    # pip-installs it at every start when missing, which costs ~8 s of DNS retries offline.
    # [mcp]: its MCP client (without it, mcp_servers in config.yaml are silently ignored)
    install = PypiInstall(
        (f"hermes-agent[anthropic,mcp]=={version}", "anthropic==0.87.0", "edge-tts==7.2.7"),
        script="hermes",
        distribution="hermes-agent",
    )
    command = "hermes"
    transcript_globs = ("hermes-home/state.db", "hermes-home/logs/*.log")
    takes_mcp = True

    def launch(self, ctx: RunContext) -> Launch:
        if ctx.dialect == "responses":
            config = {
                "providers": {
                    "proxy": {
                        "api": ctx.base_url,
                        "transport": "codex_responses",
                        "key_env": "PROXY_API_KEY",
                    }
                },
                "model": {
                    "provider": "custom:proxy",
                    "default": ctx.model,
                    "context_length": 131072,
                },
            }
        else:
            model = {
                "provider": "custom",
                "default": ctx.model,
                "api_key": API_KEY,
                "context_length": 131072,
                "base_url": ctx.base_url,
            }
            if ctx.dialect == "anthropic":
                model.update(base_url=ctx.anthropic_base_url, api_mode="anthropic_messages")
            config = {"model": model}
        # its own browser needs a browser install of Hermes' (agent-browser or a cloud one) that no
        # sandbox has: offered, its tools only time out; a task's browser comes over MCP
        config["agent"] = {"disabled_toolsets": ["browser"]}
        if ctx.mcp:
            config["mcp_servers"] = hermes_servers(ctx.mcp)
        home = f"{ctx.run_dir}/hermes-home"
        return Launch(
            ["hermes", "-z", ctx.prompt],
            env={"HERMES_HOME": home, "PROXY_API_KEY": API_KEY},
            files={f"{home}/config.yaml": yaml.safe_dump(config, sort_keys=False)},
        )

    def final_answer(self, out: Outputs) -> str | None:
        rows = self.transcript(out)
        texts = [r.get("content") for r in rows if r.get("role") == "assistant"]
        text = next((t for t in reversed(texts) if isinstance(t, str) and t.strip()), None)
        return text or (out.stdout.strip() or None)

    def completed(self, out: Outputs) -> bool:
        rows = self.transcript(out)
        return bool(rows) and rows[-1].get("role") == "assistant" and bool(self.final_answer(out))

    def transcript(self, out: Outputs) -> list[dict]:
        return out.sqlite_rows("state.db", "SELECT * FROM messages ORDER BY rowid")


HARNESS = Hermes()
