"""Token faithfulness: may consecutive calls of an episode be merged into one token sample?

A multi-turn RL sample is only exact when each call's prompt token ids start with the previous
call's prompt + completion ids (the harness replayed the model's own tokens). When a harness
rewrites history (tool-call ids, trimmed reasoning, re-rendered templates) the ids diverge and
the turns must be trained as separate samples. This records which case each call is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Verdict:
    faithful: bool | None  # None: nothing to judge (no token ids)
    reason: str


def judge(
    prompt_ids: Sequence[int] | None,
    previous: Sequence[int] | None,
) -> Verdict:
    """Does `prompt_ids` extend `previous` (the prior main call's prompt + completion ids)?"""
    if prompt_ids is None:
        return Verdict(None, "no prompt token ids from the upstream")
    if previous is None:
        return Verdict(True, "first call of the episode")
    n = len(previous)
    for i, (a, b) in enumerate(zip(prompt_ids, previous, strict=False)):
        if a != b:
            return Verdict(
                False, f"prompt diverges from previous prompt+completion at token {i} of {n}"
            )
    if len(prompt_ids) < n:
        return Verdict(
            False,
            f"prompt ({len(prompt_ids)} tokens) is shorter than previous prompt+completion ({n})",
        )
    return Verdict(
        True, f"prompt extends previous prompt+completion ({n} tokens) by {len(prompt_ids) - n}"
    )
