"""Anthropic Messages (`/v1/messages`, `?beta=true`): the official SDKs need the `event:` lines."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

from pomona.proxy.dialects.base import Dialect, Reply, Tool, error_type, new_id, text_of
from pomona.proxy.sse import Frame, frame


class Anthropic(Dialect):
    name = "anthropic"

    def tools(self, body: dict[str, Any]) -> list[Tool]:
        out = []
        for t in body.get("tools") or []:
            if isinstance(t, dict) and t.get("name"):
                # Server tools such as {"type": "bash_20250124", "name": "bash"} have no schema.
                out.append(Tool(t["name"], t.get("input_schema") or {}))
        return out

    def _messages(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        return [m for m in body.get("messages") or [] if isinstance(m, dict)]

    def tool_results(self, body: dict[str, Any]) -> int:
        return sum(
            isinstance(b, dict) and b.get("type") == "tool_result"
            for m in self._messages(body)
            if isinstance(m.get("content"), list)
            for b in m["content"]
        )

    def assistant_texts(self, body: dict[str, Any]) -> list[str]:
        return [
            text_of(m.get("content")) for m in self._messages(body) if m.get("role") == "assistant"
        ]

    def error(self, status: int, message: str, code: str | None = None) -> dict[str, Any]:
        return {"type": "error", "error": {"type": error_type(status), "message": message}}

    def stream_error(self, status: int, message: str) -> bytes:
        return frame(self.error(status, message), "error")

    def final(self, reply: Reply, model: str, body: dict[str, Any]) -> dict[str, Any]:
        if reply.tool_call:
            block = {
                "type": "tool_use",
                "id": new_id("toolu_", 12),
                "name": reply.tool_call.name,
                "input": reply.tool_call.arguments,
            }
            stop = "tool_use"
        else:
            block, stop = {"type": "text", "text": reply.text or ""}, "end_turn"
        return {
            "id": new_id("msg_", 16),
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [block],
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": {
                "input_tokens": reply.input_tokens,
                "output_tokens": reply.output_tokens,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0,
            },
        }

    def events(self, final: dict[str, Any], body: dict[str, Any]) -> Iterator[bytes]:
        def ev(kind: str, **data: Any) -> bytes:
            return frame({"type": kind, **data}, kind)

        usage = final["usage"]
        start = {
            **final,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {**usage, "output_tokens": 1},
        }
        yield ev("message_start", message=start)
        for i, block in enumerate(final["content"]):
            yield from _block_events(ev, i, block)
        delta = {"stop_reason": final["stop_reason"], "stop_sequence": final.get("stop_sequence")}
        yield ev("message_delta", delta=delta, usage={"output_tokens": usage["output_tokens"]})
        yield ev("message_stop")

    def is_terminal(self, f: Frame) -> bool:
        return f.event == "message_stop" or '"type":"message_stop"' in f.data

    def assemble(self, frames: Iterable[Frame]) -> dict[str, Any] | None:
        message: dict[str, Any] | None = None
        partial: dict[int, str] = {}
        for f in frames:
            data = f.json()
            if not isinstance(data, dict):
                continue
            kind = data.get("type")
            if kind == "message_start":
                message = {**data["message"], "content": []}
            elif message is None:
                continue
            elif kind == "content_block_start":
                message["content"].append(dict(data["content_block"]))
            elif kind == "content_block_delta":
                _apply_delta(
                    message["content"][data["index"]], data["delta"], partial, data["index"]
                )
            elif kind == "content_block_stop" and data["index"] in partial:
                block = message["content"][data["index"]]
                raw = partial.pop(data["index"])
                try:
                    block["input"] = json.loads(raw) if raw else {}
                except ValueError:
                    block["input"] = raw
            elif kind == "message_delta":
                message.update(data.get("delta") or {})
                message["usage"] = {**(message.get("usage") or {}), **(data.get("usage") or {})}
        return message


def _apply_delta(
    block: dict[str, Any], delta: dict[str, Any], partial: dict[int, str], index: int
) -> None:
    kind = delta.get("type")
    if kind == "input_json_delta":
        partial[index] = partial.get(index, "") + delta.get("partial_json", "")
    elif kind == "text_delta":
        block["text"] = block.get("text", "") + delta.get("text", "")
    elif kind == "thinking_delta":
        block["thinking"] = block.get("thinking", "") + delta.get("thinking", "")
    elif kind == "signature_delta":
        block["signature"] = block.get("signature", "") + delta.get("signature", "")
    elif kind == "citations_delta":
        block.setdefault("citations", []).append(delta.get("citation"))


def _block_events(ev: Any, i: int, block: dict[str, Any]) -> Iterator[bytes]:
    kind = block["type"]
    if kind == "tool_use":
        yield ev("content_block_start", index=i, content_block={**block, "input": {}})
        yield ev(
            "content_block_delta",
            index=i,
            delta={"type": "input_json_delta", "partial_json": json.dumps(block["input"])},
        )
    elif kind == "text":
        yield ev("content_block_start", index=i, content_block={**block, "text": ""})
        yield ev(
            "content_block_delta", index=i, delta={"type": "text_delta", "text": block["text"]}
        )
    elif kind == "thinking":
        yield ev(
            "content_block_start", index=i, content_block={**block, "thinking": "", "signature": ""}
        )
        yield ev(
            "content_block_delta",
            index=i,
            delta={"type": "thinking_delta", "thinking": block["thinking"]},
        )
        yield ev(
            "content_block_delta",
            index=i,
            delta={"type": "signature_delta", "signature": block.get("signature", "")},
        )
    else:
        yield ev("content_block_start", index=i, content_block=block)
    yield ev("content_block_stop", index=i)
