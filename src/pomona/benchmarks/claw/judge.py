"""The judges of the two benchmarks are their own code (Claw-Eval's LLMJudge, QwenClawBench's
judge call), run in the verifier sandbox with their own prompts and reply parsing; what Pomona
gives them is a model behind the recording proxy: one proxy episode per graded trial, opened
here with `role: judge`, the judged episode and the judge's model in its row (its `model`
column is the judge's, not the agent's), so every prompt and reply is recorded and no judge's
episode counts as anyone's attempt.

`scripted` is the offline stand-in: the proxy's scripted model answers every judge call with a
fixed verdict in the benchmark's reply format. Runs judged so are labelled `judge: scripted` in
their benchmark's name, so they never share a leaderboard row with runs a real model judged.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pomona.proxy.control import ProxyControl, calls_of

SCRIPTED = "scripted"


@dataclass(frozen=True)
class JudgeSpec:
    """Which model judges, and what the scripted stand-in answers (a score in 0..1)."""

    model: str = SCRIPTED
    verdict: float = 1.0

    @property
    def scripted(self) -> bool:
        return self.model == SCRIPTED

    @property
    def label(self) -> str:
        """How a run's benchmark name says who judged it."""
        return f"judge: {self.model}"

    def scripted_reply(self, kind: str) -> str:
        """The stand-in's fixed answer in the benchmark's own reply format."""
        if kind == "claw-eval":
            return json.dumps({"score": self.verdict, "reasoning": "scripted judge"})
        return json.dumps(
            {"scores": {"overall": self.verdict}, "total": self.verdict, "notes": "scripted judge"}
        )


def open_judge(
    proxy: ProxyControl, judge: JudgeSpec, kind: str, of: str, task: str
) -> dict[str, str]:
    """The judge's proxy episode for one graded trial (its row's `model` is the judge's)."""
    return proxy.open_episode(
        model=judge.model,
        metadata={"role": "judge", "of": of, "judged_task": task, "judge": judge.model},
        # the stand-in answers every call of the trial (a grader may ask several times)
        script=[] if judge.scripted else None,
        final=judge.scripted_reply(kind) if judge.scripted else "done",
        tool_less_calls="main",  # a judge's tool-less request is its turn, not a side call
    )


def close_judge(proxy: ProxyControl, key: str, failure: str | None = None) -> None:
    if failure:
        proxy.close_episode(key, failure_kind="verifier", failure_message=failure)
    else:
        proxy.close_episode(key)


def judge_calls(proxy: ProxyControl, key: str) -> list[dict[str, Any]]:
    """Every prompt the judge was sent and its reply, as the proxy recorded them."""
    out = []
    for call in calls_of(proxy, key) or []:
        try:
            request = json.loads(call.get("request") or "{}")
            response = json.loads(call.get("response") or "{}")
        except ValueError:
            request, response = {}, {}
        choices = response.get("choices") or [{}]
        out.append(
            {
                "model": call.get("model"),
                "messages": request.get("messages"),
                "reply": (choices[0].get("message") or {}).get("content"),
                "status": call.get("status"),
            }
        )
    return out
