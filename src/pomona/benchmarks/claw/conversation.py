"""What the agent said and did, rebuilt from the proxy's record rather than from any one
harness's transcript format, so every harness is graded from the same evidence: the last policy
call's request holds the whole conversation (in the harness's dialect, read through the proxy's
dialect-neutral view), and the harness's final answer closes it.

Two renderings, in the benchmarks' own formats: a Claw-Eval trace (its JSONL events: the
messages as its loop logs them, the dispatches its ToolDispatcher recorded on the trusted host,
the services' audits), and OpenClaw session events for QwenClawBench's `grade(transcript, ...)`.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

from pomona.proxy.dialects import DIALECTS
from pomona.proxy.neutral import messages as neutral_messages

Message = dict[str, Any]
ASK_USER = "ask_user"
_MCP_PREFIX = re.compile(r"^(?:mcp__)?claw(?:__|_|\.|/)")  # how harnesses name server claw's tools
_GATEWAY = "tool_call"  # OpenClaw's Tool Search: tool_call {"id": NAME, "args": {...}}


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


def task_tool(name: str, arguments: Any, tools: set[str]) -> tuple[str, Any]:
    """A harness's call of a task tool under its task.yaml name (MCP namespaces and OpenClaw's
    deferred-tool gateway undone); any other tool keeps the harness's name."""
    if name == _GATEWAY and isinstance(arguments, dict) and isinstance(arguments.get("id"), str):
        inner = _MCP_PREFIX.sub("", arguments["id"])
        if inner in tools:
            return inner, arguments.get("args") or {}
    bare = _MCP_PREFIX.sub("", name)
    return (bare if bare in tools else name), arguments


def _now() -> str:
    return datetime.now(UTC).isoformat()


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def claw_eval_messages(talk: list[Message], prompt: str, tools: set[str]) -> list[dict[str, Any]]:
    """The conversation as Claw-Eval's loop logs it: the task's prompt as the first user turn,
    assistant turns of text and tool_use blocks, each turn's tool results in one user message;
    `ask_user` calls become what they are in its loop, the agent asking in words and the
    simulated user's reply as a `[user_agent]` user turn."""
    out: list[dict[str, Any]] = [{"role": "user", "content": [_text(prompt)]}]
    results: list[dict[str, Any]] = []
    asked: set[str] = set()

    def flush() -> None:
        if results:
            out.append({"role": "user", "content": list(results)})
            results.clear()

    for m in talk[1:] if talk and talk[0]["role"] == "user" else talk:
        if m["role"] == "tool":
            text = str(m.get("content") or "")
            if m.get("tool_call_id") in asked:
                flush()
                out.append({"role": "user", "content": [_text(f"[user_agent]\n{text}")]})
            else:
                results.append(
                    {
                        "type": "tool_result",
                        "tool_use_id": m.get("tool_call_id", ""),
                        "content": [_text(text)],
                    }
                )
            continue
        flush()
        blocks = [_text(str(m["content"]))] if m.get("content") else []
        for call in m.get("tool_calls") or []:
            name, args = task_tool(call["name"], call["arguments"], tools | {ASK_USER})
            if name == ASK_USER:
                asked.add(call["id"])
                blocks.append(_text(str((args or {}).get("question") or "")))
                continue
            blocks.append(
                {
                    "type": "tool_use",
                    "id": call["id"],
                    "name": name,
                    "input": args if isinstance(args, dict) else {},
                }
            )
        out.append({"role": m["role"], "content": blocks})
    flush()
    return out


def claw_eval_trace(
    *,
    task_id: str,
    model: str,
    prompt: str,
    talk: list[Message],
    tools: set[str],
    evidence: dict[str, Any],
    max_rounds: int,
) -> list[dict[str, Any]]:
    """The trial as a Claw-Eval trace (trace_start, message, tool_dispatch, audit_snapshot,
    trace_end events), which its own trace reader and graders take."""
    trace_id = evidence["trace_id"]
    events: list[dict[str, Any]] = [
        {"type": "trace_start", "trace_id": trace_id, "task_id": task_id, "model": model}
    ]
    for message in claw_eval_messages(talk, prompt, tools):
        events.append({"type": "message", "trace_id": trace_id, "message": message})
    events.extend(evidence["dispatches"])
    for name, audit in evidence["audits"].items():
        if "data" in audit:
            events.append(
                {
                    "type": "audit_snapshot",
                    "trace_id": trace_id,
                    "service_name": name,
                    "audit_url": audit["url"],
                    "audit_data": audit["data"],
                }
            )
    turns = evidence.get("user_turns") or []
    events.append(
        {
            "type": "trace_end",
            "trace_id": trace_id,
            "total_turns": sum(m["role"] == "assistant" for m in talk),
            "user_agent_rounds": len(turns),
            "user_agent_max_rounds": max_rounds if turns else 0,
            "user_agent_done": any(t.get("answer") is None for t in turns),
        }
    )
    stamp = _now()
    return [{**e, "timestamp": e.get("timestamp") or stamp} for e in events]


def openclaw_transcript(conversation: list[Message]) -> list[dict[str, Any]]:
    """As OpenClaw's session events ({"type": "message", "message": {...}}), in its shapes: a
    user turn's content is its text, an assistant turn's a list of text and toolCall items, a
    tool's result a toolResult message."""
    events: list[dict[str, Any]] = []
    for m in conversation:
        if m["role"] == "user":
            events.append({"type": "message", "message": {"role": "user", "content": m["content"]}})
            continue
        if m["role"] == "tool":
            message = {
                "role": "toolResult",
                "toolCallId": m.get("tool_call_id", ""),
                "content": [_text(str(m.get("content") or ""))],
            }
        else:
            content: list[dict[str, Any]] = []
            if m.get("content"):
                content.append(_text(str(m["content"])))
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
