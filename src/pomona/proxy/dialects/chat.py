"""OpenAI Chat Completions (`/v1/chat/completions`), including vLLM's token-id extensions."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

from pomona.proxy.dialects.base import Dialect, Reply, TokenData, Tool, new_id, now, text_of
from pomona.proxy.sse import Frame, frame


class Chat(Dialect):
    name = "chat"

    def tools(self, body: dict[str, Any]) -> list[Tool]:
        out = []
        for t in body.get("tools") or []:
            fn = t.get("function") if isinstance(t, dict) else None
            if isinstance(fn, dict) and fn.get("name"):
                out.append(Tool(fn["name"], fn.get("parameters") or {}))
        for fn in body.get("functions") or []:  # the legacy spelling
            if isinstance(fn, dict) and fn.get("name"):
                out.append(Tool(fn["name"], fn.get("parameters") or {}))
        return out

    def _messages(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        return [m for m in body.get("messages") or [] if isinstance(m, dict)]

    def tool_results(self, body: dict[str, Any]) -> int:
        return sum(m.get("role") in ("tool", "function") for m in self._messages(body))

    def assistant_texts(self, body: dict[str, Any]) -> list[str]:
        return [
            text_of(m.get("content")) for m in self._messages(body) if m.get("role") == "assistant"
        ]

    def final(self, reply: Reply, model: str, body: dict[str, Any]) -> dict[str, Any]:
        if reply.tool_call:
            call = reply.tool_call
            message: dict[str, Any] = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": new_id("call_", 8),
                        "type": "function",
                        "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
                    }
                ],
            }
            finish = "tool_calls"
        else:
            message, finish = {"role": "assistant", "content": reply.text or ""}, "stop"
        choice: dict[str, Any] = {
            "index": 0,
            "message": message,
            "finish_reason": finish,
            "logprobs": None,
        }
        out: dict[str, Any] = {
            "id": new_id("chatcmpl-", 24),
            "object": "chat.completion",
            "created": now(),
            "model": model,
            "choices": [choice],
            "usage": {
                "prompt_tokens": reply.input_tokens,
                "completion_tokens": reply.output_tokens,
                "total_tokens": reply.input_tokens + reply.output_tokens,
            },
        }
        if reply.prompt_token_ids is not None:  # vLLM's `return_token_ids` shape
            out["prompt_token_ids"] = reply.prompt_token_ids
            choice["token_ids"] = reply.completion_token_ids
        if reply.logprobs is not None:
            choice["logprobs"] = {"content": reply.logprobs}
        return out

    def events(self, final: dict[str, Any], body: dict[str, Any]) -> Iterator[bytes]:
        head = {k: final[k] for k in ("id", "created", "model")}
        head["object"] = "chat.completion.chunk"

        def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
            c = {"index": 0, "delta": delta, "finish_reason": finish, **extra}
            return frame({**head, "choices": [c]})

        choice = final["choices"][0]
        msg = choice["message"]
        tokens = {k: choice[k] for k in ("token_ids", "logprobs") if choice.get(k) is not None}
        if "prompt_token_ids" in final:
            head_first = {**head, "prompt_token_ids": final["prompt_token_ids"]}
        else:
            head_first = head
        calls = msg.get("tool_calls") or []
        # after the first chunk: any text, then each call's opening and its arguments
        deltas: list[dict[str, Any]] = []
        if calls:
            first: dict[str, Any] = {"role": "assistant", "content": None}
            if msg.get("content"):
                deltas.append({"content": msg["content"]})
            for i, tc in enumerate(calls):
                opening = {
                    "index": i,
                    "id": tc["id"],
                    "type": "function",
                    "function": {"name": tc["function"]["name"], "arguments": ""},
                }
                if i == 0 and not deltas:
                    first["tool_calls"] = [opening]
                else:
                    deltas.append({"tool_calls": [opening]})
                args = tc["function"]["arguments"]
                deltas.append({"tool_calls": [{"index": i, "function": {"arguments": args}}]})
        else:
            first = {"role": "assistant", "content": ""}
            deltas.append({"content": msg.get("content") or ""})
        yield frame(
            {**head_first, "choices": [{"index": 0, "delta": first, "finish_reason": None}]}
        )
        for i, delta in enumerate(deltas):
            yield chunk(delta, None, **(tokens if i == len(deltas) - 1 else {}))
        yield chunk({}, choice["finish_reason"])
        if (body.get("stream_options") or {}).get("include_usage"):
            yield frame({**head, "choices": [], "usage": final["usage"]})
        yield frame("[DONE]")

    def is_terminal(self, f: Frame) -> bool:
        return f.data.strip() == "[DONE]"

    def assemble(self, frames: Iterable[Frame]) -> dict[str, Any] | None:
        out: dict[str, Any] | None = None
        choices: dict[int, dict[str, Any]] = {}
        for f in frames:
            chunk = f.json()
            if not isinstance(chunk, dict) or "choices" not in chunk:
                continue
            if out is None:
                out = {k: v for k, v in chunk.items() if k != "choices"}
                out["object"] = "chat.completion"
            for k in ("usage", "prompt_token_ids", "system_fingerprint"):
                if chunk.get(k) is not None:
                    out[k] = chunk[k]
            for c in chunk["choices"]:
                _merge_choice(
                    choices.setdefault(c.get("index", 0), _empty_choice(c.get("index", 0))), c
                )
        if out is None:
            return None
        out["choices"] = [choices[i] for i in sorted(choices)]
        return out

    def token_data(self, final: dict[str, Any]) -> TokenData:
        choices = final.get("choices") or [{}]
        c = choices[0] if choices else {}
        lp = (c.get("logprobs") or {}).get("content")
        return TokenData(
            final.get("prompt_token_ids"),
            c.get("token_ids"),
            [e.get("logprob") for e in lp] if lp else None,
        )


def _empty_choice(index: int) -> dict[str, Any]:
    return {
        "index": index,
        "message": {"role": "assistant", "content": None},
        "finish_reason": None,
        "logprobs": None,
    }


def _merge_choice(acc: dict[str, Any], c: dict[str, Any]) -> None:
    """Fold one streamed choice delta into the accumulated choice."""
    msg = acc["message"]
    for k, v in (c.get("delta") or {}).items():
        if k == "tool_calls":
            calls = msg.setdefault("tool_calls", [])
            for d in v or []:
                i = d.get("index", len(calls))
                while len(calls) <= i:
                    calls.append(
                        {"id": None, "type": "function", "function": {"name": "", "arguments": ""}}
                    )
                tc = calls[i]
                tc["id"] = d.get("id") or tc["id"]
                tc["type"] = d.get("type") or tc["type"]
                fn = d.get("function") or {}
                tc["function"]["name"] += fn.get("name") or ""
                tc["function"]["arguments"] += fn.get("arguments") or ""
        elif isinstance(v, str) and k != "role":
            msg[k] = (msg.get(k) or "") + v
        elif v is not None:
            msg[k] = v
    if c.get("finish_reason"):
        acc["finish_reason"] = c["finish_reason"]
    if c.get("token_ids"):
        acc["token_ids"] = acc.get("token_ids", []) + list(c["token_ids"])
    lp = (c.get("logprobs") or {}).get("content")
    if lp:
        acc["logprobs"] = {"content": (acc["logprobs"] or {}).get("content", []) + lp}
