"""A recorded call as a person reads it: the messages the model saw and what it answered.

Each dialect's request and response bodies become entries of one display shape,

    {"role": "system" | "user" | "assistant" | "tool", "parts": [part, ...]}
    part: {"type": "text" | "reasoning", "text"}
          {"type": "tool_call", "id", "name", "arguments"}        # arguments as JSON text
          {"type": "tool_result", "id", "text", "is_error"}
          {"type": "image", "source"}  |  {"type": "other", "kind", "json"}

Unlike the proxy's neutral form (`proxy/neutral.py`, what a policy answers to), nothing is
dropped: reasoning, images and unknown item types all show. Bodies are hostile input (a model
or a tool can write anything), so every field is read defensively and nothing here is HTML.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import partial
from typing import Any

from pomona.viewer.index import CALL_COLUMNS

Part = dict[str, Any]
Entry = dict[str, Any]
Item = tuple[Any, Callable[[], Entry]]
"""A request's conversation item as sent, and how to read it (only done for what is shown)."""

MAX_TEXT = 100_000
"""Characters of one part shown on the page; the raw rows always hold everything."""


def _text(value: Any) -> str:
    if isinstance(value, str):
        text = value
    elif value is None:
        text = ""
    else:
        text = json.dumps(value, ensure_ascii=False, indent=2)
    if len(text) > MAX_TEXT:
        return text[:MAX_TEXT] + f"\n… [{len(text) - MAX_TEXT} more characters in the raw row]"
    return text


def _arguments(value: Any) -> str:
    """Tool-call arguments as indented JSON when they are JSON, else as they came."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return _text(value)
    return _text(
        value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, indent=2)
    )


def _other(kind: Any, value: Any) -> Part:
    return {"type": "other", "kind": str(kind), "json": _text(value)}


# --- content blocks shared by the dialects ----------------------------------------------------


def _content_parts(content: Any) -> list[Part]:
    """A `content` field: a string, or a list of typed blocks in any of the three dialects."""
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": _text(content)}] if content else []
    if not isinstance(content, list):
        return [_other(type(content).__name__, content)]
    return [p for block in content for p in _block(block)]


def _block(block: Any) -> list[Part]:
    if isinstance(block, str):
        return [{"type": "text", "text": _text(block)}]
    if not isinstance(block, dict):
        return [_other(type(block).__name__, block)]
    kind = block.get("type")
    if kind in ("text", "input_text", "output_text"):
        return [{"type": "text", "text": _text(block.get("text"))}]
    if kind in ("thinking", "reasoning_text", "summary_text"):
        return [{"type": "reasoning", "text": _text(block.get("thinking", block.get("text")))}]
    if kind == "redacted_thinking":
        return [{"type": "reasoning", "text": "[redacted thinking]"}]
    if kind == "tool_use":
        return [_tool_call(block.get("id"), block.get("name"), block.get("input"))]
    if kind == "tool_result":
        return [_tool_result(block.get("tool_use_id"), block.get("content"), block.get("is_error"))]
    if kind in ("image", "image_url", "input_image"):
        return [{"type": "image", "source": _image_source(block)}]
    if kind == "refusal":
        return [{"type": "text", "text": _text(block.get("refusal"))}]
    return [_other(kind, block)]


def _image_source(block: dict[str, Any]) -> str:
    """Where an image came from, never its bytes (a data URL is summarised, not shown)."""
    source = block.get("source") or block.get("image_url") or block.get("url") or ""
    if isinstance(source, dict):
        source = source.get("url") or source.get("media_type") or source.get("type") or ""
    source = str(source)
    return f"{source[:40]}… ({len(source)} characters)" if source.startswith("data:") else source


def _tool_call(call_id: Any, name: Any, arguments: Any) -> Part:
    return {
        "type": "tool_call",
        "id": str(call_id or ""),
        "name": str(name or ""),
        "arguments": _arguments(arguments),
    }


def _tool_result(call_id: Any, content: Any, is_error: Any = None) -> Part:
    if isinstance(content, list):
        text = "\n".join(p.get("text", "") for p in _content_parts(content) if "text" in p)
    else:
        text = _text(content)
    return {
        "type": "tool_result",
        "id": str(call_id or ""),
        "text": text,
        "is_error": bool(is_error),
    }


def _said(role: str, content: Any) -> Item:
    """A top-level field (instructions, system) or a bare input string, as a message."""
    return content, lambda: {"role": role, "parts": _content_parts(content)}


# --- chat completions ---------------------------------------------------------------------------


def _chat_message(m: Any) -> Entry:
    if not isinstance(m, dict):
        return {"role": "user", "parts": [_other(type(m).__name__, m)]}
    role = str(m.get("role") or "user")
    parts: list[Part] = []
    reasoning = m.get("reasoning_content") or m.get("reasoning")
    if reasoning:
        parts.append({"type": "reasoning", "text": _text(reasoning)})
    if role in ("tool", "function"):
        parts.append(_tool_result(m.get("tool_call_id") or m.get("name"), m.get("content")))
        return {"role": "tool", "parts": parts}
    parts += _content_parts(m.get("content"))
    for call in m.get("tool_calls") or []:
        fn = call.get("function") if isinstance(call, dict) else None
        if isinstance(fn, dict):
            parts.append(_tool_call(call.get("id"), fn.get("name"), fn.get("arguments")))
        else:
            parts.append(_other("tool_call", call))
    role = "system" if role == "developer" else role
    return {"role": role, "parts": parts}


def _chat_request(body: dict[str, Any]) -> list[Item]:
    messages = body.get("messages")
    return [(m, partial(_chat_message, m)) for m in messages] if isinstance(messages, list) else []


def _chat_response(body: dict[str, Any]) -> list[Entry]:
    choices = body.get("choices")
    if not isinstance(choices, list):
        return []
    return [
        _chat_message(c.get("message") or c.get("delta") or {})
        for c in choices
        if isinstance(c, dict)
    ]


# --- responses ----------------------------------------------------------------------------------


def _response_item(item: Any) -> Entry:
    if not isinstance(item, dict):
        return {"role": "user", "parts": [_other(type(item).__name__, item)]}
    kind = item.get("type") or "message"
    if kind == "message":
        role = str(item.get("role") or "user")
        role = "system" if role == "developer" else role
        return {"role": role, "parts": _content_parts(item.get("content"))}
    if kind == "reasoning":
        texts = [s.get("text", "") for s in item.get("summary") or [] if isinstance(s, dict)]
        texts += [c.get("text", "") for c in item.get("content") or [] if isinstance(c, dict)]
        text = "\n".join(t for t in texts if t) or (
            "[encrypted reasoning]" if item.get("encrypted_content") else ""
        )
        return {"role": "assistant", "parts": [{"type": "reasoning", "text": _text(text)}]}
    if kind in ("function_call", "custom_tool_call"):
        args = item.get("arguments", item.get("input"))
        return {
            "role": "assistant",
            "parts": [_tool_call(item.get("call_id"), item.get("name"), args)],
        }
    if kind == "local_shell_call":
        action = item.get("action")
        return {
            "role": "assistant",
            "parts": [_tool_call(item.get("call_id"), "local_shell", action)],
        }
    if kind.endswith("_output"):
        return {"role": "tool", "parts": [_tool_result(item.get("call_id"), item.get("output"))]}
    return {"role": "assistant", "parts": [_other(kind, item)]}


def _responses_request(body: dict[str, Any]) -> list[Item]:
    out = [_said("system", body["instructions"])] if body.get("instructions") else []
    items = body.get("input")
    if isinstance(items, str):
        return [*out, _said("user", items)]
    return (
        out + [(i, partial(_response_item, i)) for i in items] if isinstance(items, list) else out
    )


def _responses_response(body: dict[str, Any]) -> list[Entry]:
    output = body.get("output")
    return [_response_item(i) for i in output] if isinstance(output, list) else []


# --- anthropic messages -------------------------------------------------------------------------


def _anthropic_message(m: Any) -> Entry:
    if not isinstance(m, dict):
        return {"role": "user", "parts": [_other(type(m).__name__, m)]}
    parts = _content_parts(m.get("content"))
    role = str(m.get("role") or "user")
    if role == "user" and parts and all(p["type"] == "tool_result" for p in parts):
        role = "tool"
    return {"role": role, "parts": parts}


def _anthropic_request(body: dict[str, Any]) -> list[Item]:
    out = [_said("system", body["system"])] if body.get("system") else []
    messages = body.get("messages")
    if not isinstance(messages, list):
        return out
    return out + [(m, partial(_anthropic_message, m)) for m in messages]


def _anthropic_response(body: dict[str, Any]) -> list[Entry]:
    if "content" not in body:
        return []
    return [{"role": "assistant", "parts": _content_parts(body.get("content"))}]


READERS = {
    "chat": (_chat_request, _chat_response),
    "responses": (_responses_request, _responses_response),
    "anthropic": (_anthropic_request, _anthropic_response),
}


def _json(text: str | None) -> Any:
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def tools_offered(body: Any) -> list[str]:
    """Names of the tools a request offers, whatever the dialect."""
    names = []
    for tool in body.get("tools") or [] if isinstance(body, dict) else []:
        if isinstance(tool, dict):
            function = tool.get("function")
            fn = function if isinstance(function, dict) else tool
            names.append(str(fn.get("name") or tool.get("type") or "?"))
    return names


def timeline(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The episode's calls in order, each with the messages new since the previous call of the
    same kind (main turns and side calls apart), how many it sent again (`earlier`), its answer
    and what the proxy measured. Only the new messages are read into the display shape: a long
    episode re-sends its whole history every turn, so reading all of it would grow with its
    square (`sent_messages` gives one call's whole list)."""
    previous: dict[bool, list[Any]] = {}
    out = []
    for call in calls:
        dialect = call.get("dialect") or "chat"
        read_request, read_response = READERS.get(dialect, READERS["chat"])
        request = _json(call.get("request"))
        response = _json(call.get("response"))
        side = bool(call.get("side"))
        messages: list[Entry] = []
        first_new = 0
        if isinstance(request, dict):
            items = read_request(request)
            sent = [raw for raw, _ in items]
            if side in previous:
                before = previous[side]
                while (
                    first_new < min(len(sent), len(before)) and sent[first_new] == before[first_new]
                ):
                    first_new += 1
            previous[side] = sent
            messages = [{**read(), "new": True} for _, read in items[first_new:]]
        answer = read_response(response) if isinstance(response, dict) else []
        out.append(
            {
                **{k: jsonable(call.get(k)) for k in SHOWN_COLUMNS},
                "messages": messages,
                "earlier": first_new,
                "answer": answer,
                "tools": tools_offered(request),
                "request_unparsed": None
                if isinstance(request, dict)
                else _text(call.get("request")),
                "response_unparsed": None
                if isinstance(response, dict) or not call.get("response")
                else _text(call.get("response")),
                "prompt_tokens_recorded": len(call.get("prompt_token_ids") or []),
                "completion_tokens_recorded": len(call.get("completion_token_ids") or []),
            }
        )
    return out


def sent_messages(call: dict[str, Any], earlier: int) -> list[Entry]:
    """Every message of the call's request; those past the first `earlier` flagged `new`."""
    request = _json(call.get("request"))
    if not isinstance(request, dict):
        return []
    read_request = READERS.get(call.get("dialect") or "chat", READERS["chat"])[0]
    return [{**read(), "new": i >= earlier} for i, (_, read) in enumerate(read_request(request))]


SHOWN_COLUMNS = (*CALL_COLUMNS, "path", "requested_model")
"""The call's own columns on the page; bodies and token ids are in the raw rows."""


def jsonable(value: Any) -> Any:
    """A JSON-ready value (timestamps as ISO 8601)."""
    return value.isoformat() if hasattr(value, "isoformat") else value
