"""What the agent said and did, rebuilt from the proxy's record rather than from any one
harness's transcript format, so every harness is graded from the same evidence: the last policy
call's request holds the whole conversation (in the harness's dialect, read through the proxy's
dialect-neutral view), and the harness's final answer closes it.

Two renderings of it: Claw-Eval's trace messages (content blocks text / tool_use / tool_result)
and OpenClaw's session JSONL events, which QwenClawBench's `grade(transcript, ...)` reads.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from pomona.benchmarks.claw.judge import Judge
from pomona.proxy.control import ProxyControl, calls_of
from pomona.proxy.dialects import DIALECTS
from pomona.proxy.neutral import messages as neutral_messages

if TYPE_CHECKING:
    from pomona.benchmarks.task import Task
    from pomona.harnesses.runner import HarnessResult
    from pomona.orchestrator.sdk.client import Sandbox

Message = dict[str, Any]


def evidence(
    task: Task,
    sandbox: Sandbox,
    run: HarnessResult | None,
    proxy: ProxyControl | None,
    judge_model: str,
    judge_verdict: float,
) -> dict[str, Any]:
    """What a Claw task is scored on: its scorer's artifacts from the sandbox and, when the run
    went through the proxy, the conversation the proxy recorded and a judge whose judgements are
    recorded beside the judged episode."""
    artifacts = task.scorer.collect(task, sandbox)
    if run is not None and proxy is not None:
        recorded = calls_of(proxy, run.episode) or []
        artifacts["conversation"] = from_calls(recorded, run.final_answer)
        artifacts["judge"] = Judge(proxy, judge_model, judge_verdict, of=run.episode)
    return artifacts


def from_calls(calls: list[dict[str, Any]], final_answer: str | None) -> list[Message]:
    """The neutral conversation of an episode's recorded calls (system prompts dropped)."""
    main = [c for c in calls if not c.get("side") and c.get("request")]
    out: list[Message] = []
    if main:
        last = main[-1]
        try:
            body = json.loads(last["request"])
        except ValueError:
            body = {}
        dialect = DIALECTS.get(last.get("dialect") or "chat", DIALECTS["chat"])
        out = [m for m in neutral_messages(dialect, body) if m.get("role") != "system"]
    if final_answer:
        out.append({"role": "assistant", "content": final_answer})
    return out


def claw_eval_messages(conversation: list[Message]) -> list[dict[str, Any]]:
    """As Claw-Eval's messages: {"role", "content": [blocks]}; tool results are user turns."""
    out = []
    for m in conversation:
        if m["role"] == "tool":
            out.append(
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": m.get("tool_call_id", ""),
                            "content": [{"type": "text", "text": m.get("content") or ""}],
                        }
                    ],
                }
            )
            continue
        blocks: list[dict[str, Any]] = []
        if m.get("content"):
            blocks.append({"type": "text", "text": m["content"]})
        for call in m.get("tool_calls") or []:
            blocks.append(
                {
                    "type": "tool_use",
                    "id": call["id"],
                    "name": call["name"],
                    "input": call["arguments"] if isinstance(call["arguments"], dict) else {},
                }
            )
        out.append({"role": m["role"], "content": blocks})
    return out


def openclaw_transcript(conversation: list[Message]) -> list[dict[str, Any]]:
    """As OpenClaw session JSONL events ({"type": "message", "message": {...}})."""
    events = []
    for m in conversation:
        if m["role"] == "tool":
            message = {
                "role": "toolResult",
                "toolCallId": m.get("tool_call_id", ""),
                "content": [{"type": "text", "text": m.get("content") or ""}],
            }
        else:
            content: list[dict[str, Any]] = []
            if m.get("content"):
                content.append({"type": "text", "text": m["content"]})
            for call in m.get("tool_calls") or []:
                content.append(
                    {
                        "type": "toolCall",
                        "id": call["id"],
                        "name": call["name"],
                        "arguments": call["arguments"],
                    }
                )
            message = {"role": m["role"], "content": content}
        events.append({"type": "message", "message": message})
    return events


def text(conversation: list[Message]) -> str:
    """A readable transcript for judges: who said what, and which tools were called."""
    lines = []
    for m in conversation:
        if m["role"] == "tool":
            lines.append(f"[tool result] {str(m.get('content') or '')[:2000]}")
            continue
        if m.get("content"):
            lines.append(f"[{m['role']}] {m['content']}")
        for call in m.get("tool_calls") or []:
            lines.append(
                f"[{m['role']} calls {call['name']}] {json.dumps(call['arguments'])[:2000]}"
            )
    return "\n".join(lines)
