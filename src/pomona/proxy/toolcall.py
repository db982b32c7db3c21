"""The tool-call format of the `transformers` upstream, for models whose chat template has none.

SmolLM2's template (plain chatml) renders neither the offered tools nor an assistant's tool
calls, so a request's tools would reach the model as nothing at all. For such a template the
server writes them into the conversation itself, then renders it with the model's own template:

    system   the request's system text, then the tools, one JSON schema a line inside
             <tools>...</tools>, and how to call one (with an example built from the first tool)
    call     <tool_call>{"name": "bash", "arguments": {"command": "ls"}}</tool_call>
             in the assistant's content, after any text, one block per call
    result   a `tool` message, which chatml renders as a turn of role `tool`

Why this format: it is the Hermes / Qwen2.5 convention that SmolLM2's larger sibling was tuned
on for function calling and that most open tool-calling templates render, so an SFT set taught
in it carries over to models that speak it natively, and a template that does have tool support
(`supports_tools`) is left to render tools its own way. The 135M model does not produce it
unprompted (it writes fenced code); it learns it from SFT on recorded oracle episodes, whose
history this module renders in exactly the form the parser reads back.

Parsing is strict: a block whose body is not a JSON object with a string `name` and object
`arguments`, or a block left open, is no call. It stays in the reply's text and is reported as
a tool-call error: the model's failure (the harness sees a reply without a call), never infra.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_BLOCK = re.compile(re.escape(OPEN) + r"(.*?)" + re.escape(CLOSE), re.S)


@dataclass
class Parsed:
    text: str  # the reply without its well-formed call blocks
    calls: list[tuple[str, dict[str, Any], str]]  # (name, arguments, arguments as generated)
    errors: list[str] = field(default_factory=list)  # malformed or unclosed blocks, in order


def render_call(name: str, arguments: str | dict[str, Any]) -> str:
    """One call as the model is taught to write it; `arguments` JSON text is kept verbatim."""
    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return f'{OPEN}{{"name": {json.dumps(name)}, "arguments": {args.strip() or "{}"}}}{CLOSE}'


def _example(tools: list[dict[str, Any]]) -> str:
    first = tools[0]
    params = first.get("parameters") or {}
    props = params.get("properties") or {}
    required = [p for p in params.get("required") or [] if p in props] or list(props)[:1]
    args = {p: "ls -la" if p in ("command", "cmd") else "..." for p in required}
    return render_call(str(first.get("name") or "tool"), args)


def preamble(tools: list[dict[str, Any]]) -> str:
    """The tools block written into the system message ({name, description, parameters} each)."""
    lines = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
    return (
        "You can call these tools:\n<tools>\n" + lines + "\n</tools>\n"
        f"To call a tool, write a {OPEN} block holding a JSON object with the tool's name and "
        f"its arguments, for example:\n{_example(tools)}\n"
        "The result comes back in a message of role tool. Without a call, your reply is final."
    )


def _arguments_text(call: dict[str, Any]) -> str:
    fn = call.get("function") or call
    args = fn.get("arguments")
    return args if isinstance(args, str) else json.dumps(args or {})


def inline(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Template-shaped messages ({type, function} tools) with the tools and calls written into
    the text, for a template that renders neither."""
    out = []
    for m in messages:
        calls = m.get("tool_calls") or []
        if m.get("role") == "assistant" and calls:
            blocks = "\n".join(
                render_call(str((c.get("function") or c).get("name") or ""), _arguments_text(c))
                for c in calls
            )
            m = {"role": "assistant", "content": (m.get("content") or "") + blocks}
        else:
            m = {k: v for k, v in m.items() if k != "tool_calls"}
        out.append(m)
    if tools:
        block = preamble([t.get("function") or t for t in tools])
        if out and out[0].get("role") == "system":
            out[0] = {**out[0], "content": f"{out[0].get('content') or ''}\n\n{block}"}
        else:
            out.insert(0, {"role": "system", "content": block})
    return out


def parse(text: str) -> Parsed:
    """The calls in a generated reply, and the text around them."""
    calls: list[tuple[str, dict[str, Any], str]] = []
    errors: list[str] = []
    blocks = 0

    def take(match: re.Match[str]) -> str:
        nonlocal blocks
        blocks += 1
        body = match.group(1).strip()
        try:
            value = json.loads(body)
        except ValueError as e:
            errors.append(f"malformed tool call (not JSON: {e}): {body[:200]}")
            return match.group(0)
        args = value.get("arguments", {}) if isinstance(value, dict) else None
        if not isinstance(value, dict) or not isinstance(value.get("name"), str):
            errors.append(f"malformed tool call (no string name): {body[:200]}")
            return match.group(0)
        if not isinstance(args, dict):
            errors.append(f"malformed tool call (arguments not an object): {body[:200]}")
            return match.group(0)
        raw = _raw_arguments(body)
        calls.append((value["name"], args, raw if raw is not None else json.dumps(args)))
        return ""

    rest = _BLOCK.sub(take, text)
    if text.count(OPEN) > blocks:
        errors.append("unclosed tool call: a <tool_call> block was never closed")
    return Parsed(rest if rest.strip() else "", calls, errors)


def _raw_arguments(body: str) -> str | None:
    """The `arguments` value exactly as generated (so a harness that sends it back verbatim
    shows the model its own tokens)."""
    key = re.search(r'"arguments"\s*:\s*', body)
    if key is None:
        return None
    try:
        _, end = json.JSONDecoder().raw_decode(body, key.end())
    except ValueError:
        return None
    return body[key.end() : end]


def supports_tools(tokenizer: Any) -> bool:
    """Whether the tokenizer's chat template renders both offered tools and assistant calls
    (then it is left to render them its own way)."""
    probe = "pomona_probe_tool"
    tool = {"type": "function", "function": {"name": probe, "parameters": {"type": "object"}}}
    user = [{"role": "user", "content": "hi"}]
    called = [
        *user,
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": probe, "arguments": "{}"}}
            ],
        },
    ]
    try:
        offered = tokenizer.apply_chat_template(user, tools=[tool], tokenize=False)
        made = tokenizer.apply_chat_template(called, tokenize=False)
    except Exception:  # noqa: BLE001 - a template that chokes on tools does not support them
        return False
    return probe in str(offered) and probe in str(made)


class Rendering:
    """A tokenizer whose `apply_chat_template` renders a conversation the way the transformers
    upstream shows it to the model (tools and calls written in when the template has none), so
    whoever re-renders recorded calls (drift checks, SFT rows) gets the tokens the model saw.
    Everything else is the tokenizer's own."""

    def __init__(self, tokenizer: Any):
        self.tokenizer = tokenizer
        self.native = supports_tools(tokenizer)

    def apply_chat_template(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None, **kw: Any
    ) -> Any:
        if not self.native:
            messages, tools = inline(messages, list(tools or [])), None
        return self.tokenizer.apply_chat_template(messages, tools=tools or None, **kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.tokenizer, name)
