"""OpenAI Responses (`/v1/responses`): Codex's only dialect; every SSE event has an `event:` line."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

from pomona.proxy.dialects.base import Dialect, Reply, Tool, error_type, new_id, now, text_of
from pomona.proxy.sse import Frame, frame

_TERMINAL = ("response.completed", "response.failed", "response.incomplete")


class Responses(Dialect):
    name = "responses"

    def tools(self, body: dict[str, Any]) -> list[Tool]:
        out = []
        for t in body.get("tools") or []:
            if not isinstance(t, dict):
                continue
            if t.get("type") == "function" and t.get("name"):
                out.append(Tool(t["name"], t.get("parameters") or {}))
            elif t.get("type") == "namespace" and t.get("name"):
                # Codex 0.171 groups an MCP server's tools: {"type": "namespace", "name":
                # "mcp__SRV", "tools": [functions]}; offered here under their joined names
                out += [
                    Tool(f"{t['name']}__{f['name']}", f.get("parameters") or {})
                    for f in t.get("tools") or []
                    if isinstance(f, dict) and f.get("type") == "function" and f.get("name")
                ]
            elif t.get("type") == "local_shell":
                out.append(Tool("local_shell", {}, kind="local_shell"))
        return out

    def _items(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        items = body.get("input")
        return [i for i in items if isinstance(i, dict)] if isinstance(items, list) else []

    def tool_results(self, body: dict[str, Any]) -> int:
        return sum(str(i.get("type", "")).endswith("_output") for i in self._items(body))

    def assistant_texts(self, body: dict[str, Any]) -> list[str]:
        return [
            text_of(i.get("content")) for i in self._items(body) if i.get("role") == "assistant"
        ]

    def stream_error(self, status: int, message: str) -> bytes:
        return frame(
            {"type": "error", "code": error_type(status), "message": message, "param": None},
            "error",
        )

    def final(self, reply: Reply, model: str, body: dict[str, Any]) -> dict[str, Any]:
        call = reply.tool_call
        item: dict[str, Any]
        if call and call.kind == "local_shell":
            item = {
                "type": "local_shell_call",
                "id": new_id("lsh_", 8),
                "call_id": new_id("call_", 8),
                "status": "completed",
                "action": {"type": "exec", "command": call.arguments["command"], "env": {}},
            }
        elif call:
            item = {
                "type": "function_call",
                "id": new_id("fc_", 8),
                "call_id": new_id("call_", 8),
                **_namespaced(call.name, body),
                "arguments": json.dumps(call.arguments),
                "status": "completed",
            }
        else:
            item = {
                "type": "message",
                "id": new_id("msg_", 8),
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": reply.text or "", "annotations": []}],
            }
        out = _envelope(new_id("resp_", 16), model, "completed", [item])
        out["usage"] = {
            "input_tokens": reply.input_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": reply.output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": reply.input_tokens + reply.output_tokens,
        }
        if not body.get("stream") and item["type"] == "message":
            out["output_text"] = reply.text or ""
        return out

    def events(self, final: dict[str, Any], body: dict[str, Any]) -> Iterator[bytes]:
        seq = 0

        def ev(kind: str, **data: Any) -> bytes:
            nonlocal seq
            out = frame({"type": kind, "sequence_number": seq, **data}, kind)
            seq += 1
            return out

        opening = _envelope(final["id"], final["model"], "in_progress", [])
        opening["created_at"] = final.get("created_at", now())
        yield ev("response.created", response=opening)
        yield ev("response.in_progress", response=opening)
        for idx, item in enumerate(final.get("output") or []):
            yield from _item_events(ev, idx, item)
        done = {k: v for k, v in final.items() if k != "output_text"}
        yield ev("response.completed", response=done)

    def is_terminal(self, f: Frame) -> bool:
        return (f.event or "") in _TERMINAL or '"type":"response.completed"' in f.data

    def assemble(self, frames: Iterable[Frame]) -> dict[str, Any] | None:
        response: dict[str, Any] | None = None
        items: dict[Any, Any] = {}
        for f in frames:
            data = f.json()
            if not isinstance(data, dict):
                continue
            kind = data.get("type", f.event)
            if kind in _TERMINAL or kind in ("response.created", "response.in_progress"):
                snapshot = data.get("response")
                response = snapshot if isinstance(snapshot, dict) and snapshot else response
            elif kind == "response.output_item.done":
                items[data.get("output_index", len(items))] = data.get("item")
        if response is None:
            return None
        if not response.get("output") and items:
            response = {**response, "output": [items[i] for i in sorted(items)]}
        return response


def _envelope(rid: str, model: str, status: str, output: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "id": rid,
        "object": "response",
        "created_at": now(),
        "status": status,
        "model": model,
        "output": output,
        "error": None,
        "incomplete_details": None,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": None,
    }


def _item_events(ev: Any, idx: int, item: dict[str, Any]) -> Iterator[bytes]:
    """The full per-item event sequence; pi, OpenCode and Kimi break on anything less."""
    kind = item.get("type")
    if kind == "function_call":
        ref = {"item_id": item["id"], "output_index": idx}
        yield ev(
            "response.output_item.added",
            output_index=idx,
            item={**item, "arguments": "", "status": "in_progress"},
        )
        yield ev("response.function_call_arguments.delta", **ref, delta=item["arguments"])
        yield ev("response.function_call_arguments.done", **ref, arguments=item["arguments"])
    elif kind == "message":
        yield ev(
            "response.output_item.added",
            output_index=idx,
            item={**item, "status": "in_progress", "content": []},
        )
        for ci, part in enumerate(item.get("content") or []):
            ref = {"item_id": item["id"], "output_index": idx, "content_index": ci}
            text = part.get("text", "")
            yield ev("response.content_part.added", **ref, part={**part, "text": ""})
            yield ev("response.output_text.delta", **ref, delta=text)
            yield ev("response.output_text.done", **ref, text=text)
            yield ev("response.content_part.done", **ref, part=part)
    else:
        yield ev("response.output_item.added", output_index=idx, item=item)
    yield ev("response.output_item.done", output_index=idx, item=item)


def _namespaced(name: str, body: dict[str, Any]) -> dict[str, str]:
    """A call of a namespaced tool names the tool and its namespace apart, as the API does."""
    for t in body.get("tools") or []:
        if isinstance(t, dict) and t.get("type") == "namespace" and t.get("name"):
            prefix = f"{t['name']}__"
            if name.startswith(prefix):
                return {"name": name.removeprefix(prefix), "namespace": t["name"]}
    return {"name": name}
