"""ZeroClaw (zeroclaw-labs): a Rust binary that no registry this machine reaches publishes (not on
npm, PyPI or Debian), so the payload installs a prebuilt binary the user gives. Written from its
documentation only: config TOML in $ZEROCLAW_CONFIG_DIR, a `custom` provider slot for OpenAI
dialects and an `anthropic` slot for Messages, `zeroclaw agent -a ALIAS -m PROMPT`."""

from __future__ import annotations

from pomona.harnesses.base import API_KEY, BinaryInstall, Harness, Launch, Outputs, RunContext

WHY = "ZeroClaw is not published on npm, PyPI or Debian (the registries reachable here)"


class ZeroClaw(Harness):
    name = "zeroclaw"
    version = "0.8.4"
    dialects = ("chat", "responses", "anthropic")
    install = BinaryInstall("zeroclaw", source_env="POMONA_ZEROCLAW_BINARY", why=WHY)
    command = "zeroclaw"
    transcript_globs = ("zeroclaw-data/sessions/sessions.db",)

    def launch(self, ctx: RunContext) -> Launch:
        if ctx.dialect == "anthropic":
            provider = (
                f'[providers.models.anthropic.proxy]\nuri = "{ctx.anthropic_base_url}"\n'
                f'model = "{ctx.model}"\napi_key = "{API_KEY}"\n'
            )
            slot = "anthropic.proxy"
        else:
            wire = 'wire_api = "responses"\n' if ctx.dialect == "responses" else ""
            provider = (
                f'[providers.models.custom.proxy]\nuri = "{ctx.base_url}"\n'
                f'model = "{ctx.model}"\napi_key = "{API_KEY}"\n{wire}'
            )
            slot = "custom.proxy"
        config = f'{provider}\n[agents.gym]\nmodel_provider = "{slot}"\nrisk_profile = "yolo"\n'
        config_dir = f"{ctx.run_dir}/zeroclaw"
        env = {
            "ZEROCLAW_CONFIG_DIR": config_dir,
            "ZEROCLAW_DATA_DIR": f"{ctx.run_dir}/zeroclaw-data",
        }
        return Launch(
            ["zeroclaw", "agent", "-a", "gym", "-m", ctx.prompt],
            env=env,
            files={f"{config_dir}/config.toml": config},
        )

    def final_answer(self, out: Outputs) -> str | None:
        return out.stdout.strip().splitlines()[-1] if out.stdout.strip() else None

    def transcript(self, out: Outputs) -> list[dict]:
        return out.sqlite_rows("sessions.db", "SELECT * FROM messages ORDER BY rowid")


HARNESS = ZeroClaw()
