"""Kimi CLI: Python >= 3.12; chat (openai_legacy), Responses or Anthropic by provider type.
1.51.0 is the last working release: 1.52.0 is a stub that points to a curl-installed successor."""

from __future__ import annotations

from pomona.harnesses.base import (
    API_KEY,
    Harness,
    Launch,
    Outputs,
    PypiInstall,
    RunContext,
    assistant_text,
)

_TYPE = {"chat": "openai_legacy", "responses": "openai_responses", "anthropic": "anthropic"}


class Kimi(Harness):
    name = "kimi"
    version = "1.51.0"
    dialects = ("chat", "responses", "anthropic")
    install = PypiInstall(
        (f"kimi-cli=={version}", "anthropic==0.87.0"), script="kimi", python=(3, 12)
    )
    command = "kimi"
    transcript_globs = ("home/.kimi/sessions/**/context.jsonl",)

    def launch(self, ctx: RunContext) -> Launch:
        base = ctx.anthropic_base_url if ctx.dialect == "anthropic" else ctx.base_url
        config = (
            f'default_model = "m"\n\n[providers.proxy]\ntype = "{_TYPE[ctx.dialect]}"\n'
            f'base_url = "{base}"\napi_key = "{API_KEY}"\n\n[models.m]\nprovider = "proxy"\n'
            f'model = "{ctx.model}"\nmax_context_size = 131072\n'
        )
        path = f"{ctx.run_dir}/kimi.toml"
        argv = [
            "kimi",
            "--print",
            "-p",
            ctx.prompt,
            "--output-format",
            "stream-json",
            "--yolo",
            "--config-file",
            path,
            "--work-dir",
            ctx.workdir,
        ]
        return Launch(argv, files={path: config})

    def final_answer(self, out: Outputs) -> str | None:
        found = None
        for event in out.json_lines():
            text = assistant_text(event) or assistant_text(event.get("message"))
            if text:
                found = text
        return found


HARNESS = Kimi()
