"""pi (pi-coding-agent): all three dialects through one `models.json` provider; always streams."""

from __future__ import annotations

from pomona.harnesses.base import (
    API_KEY,
    PI_AI_API,
    Harness,
    Launch,
    NpmInstall,
    Outputs,
    RunContext,
    assistant_text,
    json_text,
)


class Pi(Harness):
    name = "pi"
    version = "0.73.1"
    dialects = ("chat", "responses", "anthropic")
    install = NpmInstall("@mariozechner/pi-coding-agent", version, bin="pi")
    command = "pi"
    transcript_globs = ("pi-sessions/**/*.jsonl",)

    def launch(self, ctx: RunContext) -> Launch:
        base = ctx.anthropic_base_url if ctx.dialect == "anthropic" else ctx.base_url
        models = {
            "providers": {
                "proxy": {
                    "baseUrl": base,
                    "api": PI_AI_API[ctx.dialect],
                    "apiKey": API_KEY,
                    "models": [{"id": ctx.model}],
                }
            }
        }
        agent_dir = f"{ctx.run_dir}/pi-agent"
        argv = [
            "pi",
            "-p",
            "--provider",
            "proxy",
            "--model",
            ctx.model,
            "--mode",
            "json",
            "--session-dir",
            f"{ctx.run_dir}/pi-sessions",
            ctx.prompt,
        ]
        return Launch(
            argv,
            env={"PI_CODING_AGENT_DIR": agent_dir, "PI_OFFLINE": "1"},
            files={f"{agent_dir}/models.json": json_text(models)},
        )

    def final_answer(self, out: Outputs) -> str | None:
        found = None
        for event in out.json_lines():
            messages = (
                event.get("messages")
                if event.get("type") == "agent_end"
                else [event.get("message")]
            )
            for m in messages or []:
                text = assistant_text(m)
                if text:
                    found = text
        return found

    def completed(self, out: Outputs) -> bool:
        ended = any(e.get("type") == "agent_end" for e in out.json_lines())
        return ended and bool(self.final_answer(out))


HARNESS = Pi()
