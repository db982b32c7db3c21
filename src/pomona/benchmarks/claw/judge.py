"""LLM judges through the recording proxy: every judgement is a proxy episode of its own
(metadata role=judge, the judged episode), so it is recorded like any other call and any model
the proxy routes can judge. The prompts are Pomona's own words; the reply formats are the
benchmarks': Claw-Eval's {"score": 0..1, "reasoning"} and QwenClawBench's {"scores": {...},
"total", "notes"}.

`model="scripted"` is the offline stand-in: the proxy's scripted model answers with the fixed
`verdict` (a score), named as such in every result; tests and oracle runs use it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from openai import OpenAI

from pomona.benchmarks.task import VerifierError
from pomona.proxy.control import ProxyControl

CLAW_SYSTEM = (
    "You grade the work of an AI assistant. You get the user's request, what the assistant "
    "said, what it did (taken from the services' own logs, not from its claims) and a rubric. "
    "Score how well the rubric is met from 0.0 (not at all) to 1.0 (fully). Answer with one "
    'JSON object only: {"score": <number>, "reasoning": "<one or two sentences>"}'
)
QWEN_SYSTEM = (
    "You grade an AI agent's run of a task. You get the task, the behaviour expected, a summary "
    "of the transcript and a rubric of criteria. Score each criterion from 0.0 to 1.0. Answer "
    'with one JSON object only: {"scores": {"<criterion>": <number>, ...}, "total": <number '
    'from 0.0 to 1.0>, "notes": "<short justification>"}'
)


@dataclass
class JudgeResult:
    score: float
    reasoning: str


@dataclass
class Judge:
    proxy: ProxyControl
    model: str = "scripted"
    verdict: float = 1.0  # the scripted stand-in's fixed score
    of: str = ""  # the judged episode, recorded in each judgement's metadata
    calls: list[dict[str, Any]] = field(default_factory=list)

    @property
    def name(self) -> str:
        return (
            f"scripted (fixed verdict {self.verdict})" if self.model == "scripted" else self.model
        )

    def _ask(self, system: str, user: str, scripted_reply: str) -> str:
        script = [json.dumps({"text": scripted_reply})] if self.model == "scripted" else None
        try:
            episode = self.proxy.open_episode(
                model=self.model,
                metadata={"role": "judge", "of": self.of},
                script=script,
                tool_less_calls="main",  # a judge's tool-less request is its turn, not a side call
            )
            reply = OpenAI(
                base_url=episode["base_url"], api_key="sk-pomona", max_retries=3
            ).chat.completions.create(
                model=self.model,
                temperature=0,
                messages=[{"role": "system", "content": system}, {"role": "user", "content": user}],
            )
            self.proxy.close_episode(episode["key"])
        except Exception as e:  # noqa: BLE001 - a judge that cannot answer is the verifier's failure
            raise VerifierError(f"the judge ({self.name}) did not answer: {e!r}") from e
        text = reply.choices[0].message.content or ""
        self.calls.append({"judge": self.name, "reply": text[:4000]})
        return text

    def evaluate(
        self, task_prompt: str, conversation: str, actions_summary: str, rubric: str
    ) -> JudgeResult:
        """Claw-Eval's judge call (the signature its graders use)."""
        user = (
            f"## Request\n{task_prompt}\n\n## Conversation\n{conversation}\n\n"
            f"## Actions (service logs)\n{actions_summary}\n\n## Rubric\n{rubric}"
        )
        scripted = json.dumps({"score": self.verdict, "reasoning": "scripted judge"})
        value = parse_json(self._ask(CLAW_SYSTEM, user, scripted))
        try:
            score = max(0.0, min(1.0, float(value["score"])))
        except (KeyError, TypeError, ValueError) as e:
            raise VerifierError(f"the judge's reply has no score: {value}") from e
        return JudgeResult(score, str(value.get("reasoning", "")))

    def evaluate_actions(self, task_prompt: str, artifacts: str, rubric: str) -> JudgeResult:
        return self.evaluate(task_prompt, "(not shown)", artifacts, rubric)

    def rubric_total(
        self, task: str, expected: str, transcript: str, rubric: str
    ) -> dict[str, Any]:
        """QwenClawBench's judge call: {"scores", "total", "notes"}, total in 0..1."""
        user = (
            f"## Task\n{task}\n\n## Expected behaviour\n{expected}\n\n## Transcript summary\n"
            f"{transcript}\n\n## Rubric\n{rubric}"
        )
        scripted = json.dumps(
            {"scores": {"overall": self.verdict}, "total": self.verdict, "notes": "scripted judge"}
        )
        value = parse_json(self._ask(QWEN_SYSTEM, user, scripted))
        try:
            value["total"] = max(0.0, min(1.0, float(value["total"])))
        except (KeyError, TypeError, ValueError) as e:
            raise VerifierError(f"the judge's reply has no total: {value}") from e
        return value


def parse_json(text: str) -> dict[str, Any]:
    """The first JSON object in a reply (models wrap it in prose or code fences)."""
    text = re.sub(r"^```(?:json)?\s*|\s*```$", "", text.strip())
    start = text.find("{")
    while start >= 0:
        try:
            value, _ = json.JSONDecoder().raw_decode(text[start:])
            if isinstance(value, dict):
                return value
        except ValueError:
            pass
        start = text.find("{", start + 1)
    raise VerifierError(f"the judge's reply is not JSON: {text[:300]!r}")
