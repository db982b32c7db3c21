"""The dialect-neutral view of a model call, for policies that should not care about the wire.

A policy sees every request as the same shape whichever dialect the harness speaks:

    messages: [{"role": "system" | "user" | "assistant" | "tool", "content": str,
                "tool_calls": [{"id", "name", "arguments": dict}],   # assistant turns only
                "tool_call_id": str}]                                 # tool results only
    tools:    [{"name", "description", "parameters": JSON schema}]

and answers with an `Action`: text and/or tool calls. `render` dresses the action in the
caller's dialect with that dialect's own builders, so a policy reply is byte-for-byte the shape
the scripted model and the upstreams produce (reference/harnesses.md §5).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from pomona.proxy.dialects import Dialect, Reply, ToolCall
from pomona.proxy.dialects.base import TokenData, text_of
from pomona.proxy.errors import MalformedRequest

Message = dict[str, Any]


# --- requests -> neutral messages and tools ---------------------------------------------------


def _arguments(value: Any) -> Any:
    """Tool-call arguments as a dict when they are JSON text; left as they are otherwise."""
    if isinstance(value, str):
        try:
            return json.loads(value) if value.strip() else {}
        except ValueError:
            return value
    return value if value is not None else {}


def _call(call_id: Any, name: Any, arguments: Any) -> dict[str, Any]:
    return {"id": str(call_id or ""), "name": str(name or ""), "arguments": _arguments(arguments)}


def _append_call(messages: list[Message], call: dict[str, Any]) -> None:
    """Parallel tool calls arrive as separate items (Responses) but form one assistant turn."""
    if messages and messages[-1]["role"] == "assistant":
        messages[-1].setdefault("tool_calls", []).append(call)
    else:
        messages.append({"role": "assistant", "content": "", "tool_calls": [call]})


def _chat(body: dict[str, Any]) -> list[Message]:
    out: list[Message] = []
    for m in body.get("messages") or []:
        if not isinstance(m, dict):
            continue
        role = m.get("role", "user")
        if role in ("system", "developer"):
            out.append({"role": "system", "content": text_of(m.get("content"))})
        elif role in ("tool", "function"):
            out.append(
                {
                    "role": "tool",
                    "content": text_of(m.get("content")),
                    "tool_call_id": str(m.get("tool_call_id") or m.get("name") or ""),
                }
            )
        elif role == "assistant":
            msg: Message = {"role": "assistant", "content": text_of(m.get("content"))}
            calls = [
                _call(
                    c.get("id"),
                    (c.get("function") or {}).get("name"),
                    (c.get("function") or {}).get("arguments"),
                )
                for c in m.get("tool_calls") or []
                if isinstance(c, dict)
            ]
            if calls:
                msg["tool_calls"] = calls
            out.append(msg)
        else:
            out.append({"role": "user", "content": text_of(m.get("content"))})
    return out


def _responses(body: dict[str, Any]) -> list[Message]:
    out: list[Message] = []
    if body.get("instructions"):
        out.append({"role": "system", "content": text_of(body["instructions"])})
    items = body.get("input")
    if isinstance(items, str):
        return [*out, {"role": "user", "content": items}]
    for item in items if isinstance(items, list) else []:
        if not isinstance(item, dict):
            continue
        kind = item.get("type") or "message"
        if kind == "message":
            role = item.get("role", "user")
            role = "system" if role in ("system", "developer") else role
            out.append({"role": role, "content": text_of(item.get("content"))})
        elif kind in ("function_call", "custom_tool_call"):
            _append_call(
                out,
                _call(
                    item.get("call_id"), item.get("name"), item.get("arguments", item.get("input"))
                ),
            )
        elif kind == "local_shell_call":
            _append_call(out, _call(item.get("call_id"), "local_shell", item.get("action")))
        elif kind.endswith("_output"):
            out.append(
                {
                    "role": "tool",
                    "content": text_of(item.get("output")),
                    "tool_call_id": str(item.get("call_id") or ""),
                }
            )
        # reasoning items and anything else carry nothing a policy answers to
    return out


def _anthropic(body: dict[str, Any]) -> list[Message]:
    out: list[Message] = []
    if body.get("system"):
        out.append({"role": "system", "content": text_of(body["system"])})
    for m in body.get("messages") or []:
        if not isinstance(m, dict):
            continue
        role, content = m.get("role", "user"), m.get("content")
        if role == "system":  # Claude Code's mid-conversation system messages
            out.append({"role": "system", "content": text_of(content)})
            continue
        if isinstance(content, str):
            out.append({"role": role, "content": content})
            continue
        texts: list[str] = []
        calls: list[dict[str, Any]] = []
        for block in content or []:
            if not isinstance(block, dict):
                continue
            kind = block.get("type")
            if kind == "text":
                texts.append(block.get("text", ""))
            elif kind == "tool_use":
                calls.append(_call(block.get("id"), block.get("name"), block.get("input")))
            elif kind == "tool_result":
                out.append(
                    {
                        "role": "tool",
                        "content": text_of(block.get("content")),
                        "tool_call_id": str(block.get("tool_use_id") or ""),
                    }
                )
        if texts or calls:
            msg: Message = {"role": role, "content": "".join(texts)}
            if calls:
                msg["tool_calls"] = calls
            out.append(msg)
    return out


_READERS = {"chat": _chat, "responses": _responses, "anthropic": _anthropic}


def messages(dialect: Dialect, body: dict[str, Any]) -> list[Message]:
    """The conversation of a request in the neutral shape."""
    return _READERS[dialect.name](body)


def tools(dialect: Dialect, body: dict[str, Any]) -> list[dict[str, Any]]:
    """The function tools a request offers, in the neutral shape (other tool types dropped)."""
    out = []
    for t in body.get("tools") or []:
        if not isinstance(t, dict):
            continue
        fn = t.get("function") if dialect.name == "chat" else t
        if not isinstance(fn, dict) or not fn.get("name"):
            if t.get("type") == "local_shell":
                out.append({"name": "local_shell", "description": "", "parameters": {}})
            continue
        if dialect.name == "responses" and t.get("type") != "function":
            continue
        schema = fn.get("input_schema" if dialect.name == "anthropic" else "parameters") or {}
        out.append(
            {"name": fn["name"], "description": fn.get("description") or "", "parameters": schema}
        )
    return out


# --- neutral actions -> the caller's dialect --------------------------------------------------


@dataclass
class Action:
    """A policy's reply: text and/or tool calls, in no dialect in particular. `tokens`: the
    prompt and sampled ids (and logprobs) of a policy that generated the reply itself (a
    trainer's engine), answered in vLLM's fields so the proxy records the call token-exact
    (Chat Completions callers only: the other dialects have no place for them)."""

    text: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    tokens: TokenData | None = None

    @classmethod
    def parse(cls, value: Action | dict[str, Any] | str) -> Action:
        """Accept an Action, {"text", "tool_calls": [{"name", "arguments"}]}, its JSON text, or
        plain text (anything that is not a JSON object is the assistant's text)."""
        if isinstance(value, Action):
            return value
        if isinstance(value, str):
            try:
                decoded = json.loads(value)
            except ValueError:
                return cls(text=value)
            if not isinstance(decoded, dict):
                return cls(text=value)
            value = decoded
        if not isinstance(value, dict):
            raise MalformedRequest(
                f"an action is a dict, a JSON object or text, not {type(value).__name__}"
            )
        calls = []
        for c in value.get("tool_calls") or []:
            if not isinstance(c, dict) or not isinstance(c.get("name"), str):
                raise MalformedRequest(f"a tool call needs a name and arguments: {c!r}")
            args = _arguments(c.get("arguments"))
            if not isinstance(args, dict):
                raise MalformedRequest(f"tool call arguments must be a JSON object: {c!r}")
            calls.append(ToolCall(c["name"], args, kind=c.get("kind", "function")))
        text = value.get("text")
        if text is not None and not isinstance(text, str):
            raise MalformedRequest(f"action text must be a string: {text!r}")
        return cls(text=text, tool_calls=calls)

    def to_dict(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "tool_calls": [{"name": c.name, "arguments": c.arguments} for c in self.tool_calls],
        }


def render(dialect: Dialect, action: Action, model: str, body: dict[str, Any]) -> dict[str, Any]:
    """The dialect's final response object for an action. Each part goes through the dialect's
    own builder; the parts are then joined the way that dialect carries several outputs."""
    parts = [Reply(tool_call=c) for c in action.tool_calls]
    if action.text or not parts:
        parts.insert(0, Reply(text=action.text or ""))
    finals = [dialect.final(p, model, body) for p in parts]
    if action.tokens is not None and dialect.name == "chat":
        _with_tokens(finals[0], action.tokens)
    if len(finals) == 1:
        return finals[0]
    head = finals[0]
    if dialect.name == "chat":
        message = head["choices"][0]["message"]
        message["tool_calls"] = [
            tc for f in finals for tc in f["choices"][0]["message"].get("tool_calls") or []
        ]
        message["content"] = action.text or None
        head["choices"][0]["finish_reason"] = "tool_calls"
    elif dialect.name == "responses":
        head["output"] = [item for f in finals for item in f["output"]]
    else:
        head["content"] = [block for f in finals for block in f["content"]]
        head["stop_reason"] = "tool_use"
    return head


def _with_tokens(final: dict[str, Any], tokens: TokenData) -> None:
    """vLLM's `return_token_ids` and `logprobs` fields on a Chat Completions answer."""
    choice = final["choices"][0]
    final["prompt_token_ids"], choice["token_ids"] = tokens.prompt_ids, tokens.completion_ids
    if tokens.logprobs is not None:
        choice["logprobs"] = {"content": [{"token": "", "logprob": lp, "bytes": [],
                                           "top_logprobs": []} for lp in tokens.logprobs]}  # fmt: skip
