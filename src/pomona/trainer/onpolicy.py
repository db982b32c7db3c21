"""How much of what a data set trains was sampled by the engine under its model's pinned
sampling (pomona.proxy.sampling), per run, and why the rest was not.

A trained token counts as on-policy when it is one the engine sampled (recorded token ids, not
a rendering) in a call whose parameters, as sent to the engine, were the pinned ones. Every
other trained token is counted under the reason its call gives: its model has no pin, the
harness's auxiliary call was let through, the engine was sent other values, no engine was called
(the scripted model or a policy), or the tokens were rendered by a tokenizer.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from pomona.trainer.graph import RENDERED
from pomona.trainer.samples import TokenSample

RENDERED_REASON = "rendered by the tokenizer: no token ids from the engine"


@dataclass
class RunReport:
    trained_tokens: int = 0
    on_policy_tokens: int = 0
    off_policy: Counter[str] = field(default_factory=Counter)  # reason -> trained tokens

    def as_dict(self) -> dict[str, Any]:
        share = self.on_policy_tokens / self.trained_tokens if self.trained_tokens else None
        return {"trained_tokens": self.trained_tokens, "on_policy_tokens": self.on_policy_tokens,
                "on_policy_share": share, "off_policy": dict(self.off_policy)}  # fmt: skip


def report(items: Iterable[TokenSample]) -> dict[str, RunReport]:
    """Trained tokens per run (the episode's `run`; "" when it names none), on-policy or not."""
    runs: dict[str, RunReport] = {}
    for s in items:
        run = runs.setdefault(str(s.metadata.get("run") or ""), RunReport())
        for call, start, end in s.spans:
            n = sum(s.loss_mask[start:end])
            if not n:
                continue
            run.trained_tokens += n
            if s.tokens == RENDERED:
                run.off_policy[RENDERED_REASON] += n
            elif s.pinned.get(call):
                run.on_policy_tokens += n
            else:
                run.off_policy[s.pinned_reason.get(call) or "no sampling recorded"] += n
    return runs
