"""verl's agent loop for recorded episodes: each row of `pomona export rl --format verl` becomes
verl's AgentLoopOutput as recorded, without generating anything.

Register it in an agent-loop config file (`actor_rollout_ref.rollout.agent.agent_loop_config_path`):

    - name: pomona_recorded
      _target_: pomona.trainer.verl_agent_loop.RecordedAgentLoop

and set `actor_rollout_ref.rollout.agent.default_agent_loop=pomona_recorded`. verl's own worker
then pads and batches the recorded prompt and response token ids as the engine saw and sampled
them, the response mask (1 on the model's tokens, 0 on tool output and template glue), the
engine's logprobs (`rollout_log_probs`) and the recorded reward (`rm_scores` on the last
response token), from which its trainer computes advantages and the loss. Nothing is
re-rendered, so what verl trains is what the model sampled.

Only importable where verl is installed (its own venv: tests/trainer/verl_venv.sh).
"""

from __future__ import annotations

from typing import Any

from verl.experimental.agent_loop.agent_loop import (
    AgentLoopBase,
    AgentLoopMetrics,
    AgentLoopOutput,
    register,
)

from pomona.trainer.graph import TrainingDataError


@register("pomona_recorded")
class RecordedAgentLoop(AgentLoopBase):
    """Hands verl the trajectory recorded in the row's `extra_info["agent_loop"]`."""

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        info = kwargs.get("extra_info") or {}
        fields = info.get("agent_loop")
        if not fields:
            raise TrainingDataError(
                f"row {info.get('index')!r} has no extra_info.agent_loop: export it with "
                "`pomona export rl --format verl`"
            )
        limits = {"prompt_ids": self.rollout_config.prompt_length,
                  "response_ids": self.rollout_config.response_length}  # fmt: skip
        for key, limit in limits.items():
            if len(fields[key]) > limit:
                raise TrainingDataError(
                    f"episode {info.get('episode')!r} branch {info.get('branch')}: {len(fields[key])} "
                    f"{key.split('_')[0]} tokens exceed the rollout's {key.split('_')[0]}_length "
                    f"{limit}: raise it (a recorded trajectory is never cut)"
                )
        return AgentLoopOutput(**fields, metrics=AgentLoopMetrics())
