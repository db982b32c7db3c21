"""A harness's model calls answered by a trainer's own inference engine (verl's server manager,
slime's SGLang router), the seam under the verl agent loop and the slime rollout function.

Each call the harness makes is held by the proxy (`rollout(..., policy=EnginePolicy(...))`);
its conversation is rendered into prompt ids by the trainer's tokenizer (the chat template, tools
written in by toolcall.py where it renders none), the engine samples completion ids with their
logprobs, and the reply goes back to the harness parsed into text and tool calls carrying those
ids, so the proxy records the call token-exact. The episode's training sample is then what the
trajectory graph makes of the recorded calls (trainer/samples.py), as for any recorded run: a
harness that rewrites its history yields more than one branch, and only what the engine sampled
is masked in.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from pomona.proxy import toolcall
from pomona.proxy.dialects import TokenData
from pomona.proxy.local_model import neutral_to_template, parse_completion, rendered_ids
from pomona.proxy.neutral import Action
from pomona.trainer.episodes import Filters, load
from pomona.trainer.samples import TokenSample, samples

# prompt ids -> (completion ids, their logprobs or None)
Generate = Callable[[list[int]], tuple[list[int], list[float] | None]]


class EnginePolicy:
    """The in-process policy of `pomona.episodes.rollouts.rollout` that asks `generate` (which
    blocks: it is called on the episode's worker thread) for every main call of the harness."""

    def __init__(self, tokenizer: Any, generate: Generate):
        self.tokenizer, self.generate = tokenizer, generate
        self.rendering = toolcall.Rendering(tokenizer)

    def __call__(self, observation: dict[str, Any]) -> Action:
        messages, tools = neutral_to_template(observation)
        prompt = rendered_ids(self.rendering, messages, tools)
        ids, logprobs = self.generate(prompt)
        parsed = parse_completion(self.tokenizer, ids)
        return Action(parsed.text or None, parsed.tool_calls, TokenData(prompt, ids, logprobs))


def episode_samples(
    trajectories: str | os.PathLike[str], key: str, tokenizer: Any = None
) -> list[TokenSample]:
    """The recorded episode's token samples (one per branch of its graph; none when it recorded
    no call)."""
    found = [e for e in load(trajectories, Filters(include_failed=True)) if e.key == key]
    return samples(found[0], tokenizer) if found else []
