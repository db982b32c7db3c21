"""mini-swe-agent: Python, non-streaming, one bash call per turn; it ends only when a command's
output starts with COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT (its submit protocol)."""

from __future__ import annotations

import json

from pomona.harnesses.base import API_KEY, Harness, Launch, Outputs, PypiInstall, RunContext

_PREFIX = {"chat": "openai", "anthropic": "anthropic", "responses": "openai"}
MODEL_ENDINGS = ("Submitted", "RepeatedFormatError", "LimitsExceeded")  # its agents/default.py


class MiniSweAgent(Harness):
    name = "mini-swe-agent"
    version = "2.4.6"
    dialects = ("chat", "anthropic", "responses")
    install = PypiInstall((f"mini-swe-agent=={version}", "litellm==1.110.2"), script="mini")
    command = "mini"
    transcript_globs = ("traj.json",)
    submit_command = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"

    def launch(self, ctx: RunContext) -> Launch:
        base = ctx.anthropic_base_url if ctx.dialect == "anthropic" else ctx.base_url
        # `-c mini.yaml` must be repeated whenever any other -c is given
        argv = [
            "mini",
            "-m",
            f"{_PREFIX[ctx.dialect]}/{ctx.model}",
            "-t",
            ctx.prompt,
            "-y",
            "--exit-immediately",
            "-c",
            "mini.yaml",
            "-c",
            f"model.model_kwargs.api_base={base}",
            "-c",
            "model.cost_tracking=ignore_errors",
            "-o",
            f"{ctx.run_dir}/traj.json",
        ]
        if ctx.dialect == "responses":
            argv += ["--model-class", "litellm_response"]
        env = {
            "MSWEA_CONFIGURED": "true",
            "MSWEA_COST_TRACKING": "ignore_errors",
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "OPENAI_API_KEY": API_KEY,
            "ANTHROPIC_API_KEY": API_KEY,
            "MSWEA_GLOBAL_CONFIG_DIR": f"{ctx.home}/.config/mini-swe-agent",
        }
        return Launch(argv, env=env)

    def _trajectory(self, out: Outputs) -> dict:
        raw = out.files.get("traj.json")
        try:
            value = json.loads(raw) if raw else {}
        except ValueError:
            return {}
        return value if isinstance(value, dict) else {}

    def final_answer(self, out: Outputs) -> str | None:
        info = self._trajectory(out).get("info") or {}
        submission = info.get("submission")
        if isinstance(submission, str) and submission.strip():
            return submission.strip()
        return "submitted" if info.get("exit_status") == "Submitted" else None

    def completed(self, out: Outputs) -> bool:
        """Whether mini-swe-agent ended its run by its own rules: the model submitted, or it ended
        on what the model did (`RepeatedFormatError`: replies with no valid call, again and again;
        `LimitsExceeded`: its step or cost limit). Those episodes are the model's, graded as
        left; an exception's name (the API failing) or no trajectory is not an ending of its own."""
        status = (self._trajectory(out).get("info") or {}).get("exit_status")
        return status in MODEL_ENDINGS

    def transcript(self, out: Outputs) -> list[dict]:
        return list(self._trajectory(out).get("messages") or [])


HARNESS = MiniSweAgent()
