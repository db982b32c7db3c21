"""The scripted model: answers each request with the next command of a script as a shell-tool call.

It is stateless on purpose: the step is read from the conversation itself (how many tool
results, or fenced commands, it already holds), so a client that retries a request gets the
same answer again and a tool-less side request never consumes a step.

A step is a shell command, or a JSON object for what a shell cannot say: `{"tool": NAME,
"server": SRV, "arguments": {...}}` calls the offered tool NAME (or MCP server SRV's tool NAME as
the harness names it: `mcp__SRV__NAME`, `SRV_NAME`...; through a deferred-tool gateway such as
OpenClaw's `tool_call` when it is not offered directly), and `{"text": "..."}` answers with that
text (a turn's final words, or a simulated user's reply).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from pomona.proxy.dialects import Dialect, Reply, Tool, ToolCall
from pomona.proxy.dialects.base import text_of

SHELL_TOOLS = (
    "bash", "Bash", "shell", "exec_command", "shell_command", "run_shell_command", "terminal",
    "execute_bash", "run_command", "exec", "Shell", "execute", "run_terminal_cmd", "process",
)  # fmt: skip
"""Preference order from reference/harnesses.md §5.0."""

FENCE = "```bash"

_PLACEHOLDERS: dict[str, Any] = {
    "string": "",
    "integer": 60,
    "number": 60,
    "boolean": False,
    "array": [],
    "object": {},
}


def choose_shell_tool(tools: Sequence[Tool]) -> Tool | None:
    by_name = {t.name: t for t in tools}
    for name in SHELL_TOOLS:
        if name in by_name:
            return by_name[name]
    return next((t for t in tools if t.kind == "local_shell"), None)


def _placeholder(schema: dict[str, Any]) -> Any:
    if "default" in schema:
        return schema["default"]
    if schema.get("enum"):
        return schema["enum"][0]
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    return _PLACEHOLDERS.get(kind, "") if isinstance(kind, str) else ""


def shell_arguments(tool: Tool, command: str) -> dict[str, Any]:
    """Fill the tool's command parameter (an argv array if its schema asks) and required params."""
    if tool.kind == "local_shell":
        return {"command": ["bash", "-lc", command]}
    props: dict[str, Any] = tool.parameters.get("properties") or {}
    key: str | None = next((k for k in ("command", "cmd") if k in props), None)
    if key is None:
        key = next((k for k, v in props.items() if v.get("type") == "string"), "command")
    args = {
        k: _placeholder(props.get(k) or {})
        for k in tool.parameters.get("required") or []
        if k != key
    }
    is_array = (props.get(key) or {}).get("type") == "array"
    args[key] = ["bash", "-lc", command] if is_array else command
    return args


def is_side(dialect: Dialect, body: dict[str, Any]) -> bool:
    """A request offering no tools (title generation, summaries) is not a policy turn."""
    return not dialect.tools(body)


def structured_step(step: Any) -> dict[str, Any] | None:
    """The step as {"tool", "arguments"} or {"text"}, or None for a shell command (or a group)."""
    if not isinstance(step, str) or not step.lstrip().startswith("{"):
        return None
    try:
        value = json.loads(step)
    except ValueError:
        return None
    if not isinstance(value, dict):
        return None
    if isinstance(value.get("text"), str) and set(value) == {"text"}:
        return value
    if isinstance(value.get("tool"), str) and set(value) <= {"tool", "server", "arguments"}:
        return {
            "tool": value["tool"],
            "server": str(value.get("server") or ""),
            "arguments": value.get("arguments") or {},
        }
    return None


_NAMESPACE_SEPARATORS = ("__", "_", ".", "/", "-")
_DEFERRED_GATEWAY = "tool_call"  # OpenClaw's Tool Search: tool_call {"id": name, "args": {...}}


def find_tool(tools: Sequence[Tool], name: str, server: str = "") -> Tool | None:
    """The one tool a harness named NAME under a namespace with the MCP server's name in it,
    when a server is given (a harness's own tool of the same name, such as Hermes'
    `browser_type`, is not it); else the offered tool NAME; else the one namespaced NAME."""
    found = [
        t
        for t in tools
        if t.name != name
        and any(t.name.endswith(s + name) for s in _NAMESPACE_SEPARATORS)
        and server in t.name
    ]
    if server and len(found) == 1:
        return found[0]
    exact = next((t for t in tools if t.name == name), None)
    if exact is not None:
        return exact
    return found[0] if len(found) == 1 else None


def tool_step_call(tools: Sequence[Tool], step: dict[str, Any]) -> ToolCall | None:
    tool = find_tool(tools, step["tool"], step["server"])
    if tool is not None:
        return ToolCall(tool.name, dict(step["arguments"]), kind=tool.kind)
    gateway = next((t for t in tools if t.name == _DEFERRED_GATEWAY), None)
    if gateway is not None:
        name = f"{step['server']}__{step['tool']}" if step["server"] else step["tool"]
        return ToolCall(gateway.name, {"id": name, "args": dict(step["arguments"])})
    return None


def step_of(dialect: Dialect, body: dict[str, Any], script: Sequence[str] = ()) -> int:
    """How many script commands the conversation has already been given: tool results, fenced
    commands, and assistant texts that are the script's own text steps."""
    said = {v["text"].strip() for v in map(structured_step, script) if v and "text" in v}
    texts = dialect.assistant_texts(body)
    fenced = sum(FENCE in t for t in texts)
    spoken = sum(t.strip() in said for t in texts) if said else 0
    return dialect.tool_results(body) + fenced + spoken


def reply(
    dialect: Dialect,
    body: dict[str, Any],
    script: Sequence[str],
    *,
    final: str = "done",
    side_text: str = "Pomona scripted session",
    tool_less_is_side: bool = True,
) -> Reply:
    """The scripted answer to one request."""
    tools = dialect.tools(body)
    if not tools and tool_less_is_side:
        return _with_tokens(Reply(text=side_text), body)
    step = step_of(dialect, body, script)
    if step >= len(script):
        return _with_tokens(Reply(text=final), body)
    command = script[step]
    structured = structured_step(command)
    if structured is not None:
        if "text" in structured:
            return _with_tokens(Reply(text=structured["text"]), body)
        call = tool_step_call(tools, structured)
        if call is None:
            offered = ", ".join(t.name for t in tools)
            return _with_tokens(
                Reply(text=f"no tool {structured['tool']!r} offered ({offered})"), body
            )
        return _with_tokens(Reply(tool_call=call), body)
    tool = choose_shell_tool(tools)
    if tool is None:
        return _with_tokens(Reply(text=f"{FENCE}\n{command}\n```"), body)
    call = ToolCall(tool.name, shell_arguments(tool, command), kind=tool.kind)
    return _with_tokens(Reply(tool_call=call), body)


# --- parallel tool calls ------------------------------------------------------------------------
# A script entry that is a list of steps is one parallel group: answered as several tool calls
# in one reply, or one call per reply when the request turns parallel calls off. The steps are
# numbered flat, so the stateless step count (tool results) still finds the next one.


def flatten(script: Sequence[str | Sequence[str]]) -> list[tuple[str, int]]:
    """Each step, with the index of the script entry (the parallel group) it belongs to."""
    return [
        (step, group)
        for group, entry in enumerate(script)
        for step in ([entry] if isinstance(entry, str) else entry)
    ]


def parallel_allowed(body: dict[str, Any]) -> bool:
    """Chat and Responses say `parallel_tool_calls: false`; Anthropic says it in tool_choice."""
    if body.get("parallel_tool_calls") is False:
        return False
    choice = body.get("tool_choice")
    return not (isinstance(choice, dict) and choice.get("disable_parallel_tool_use"))


def _step_call(tools: Sequence[Tool], step: str) -> ToolCall | None:
    structured = structured_step(step)
    if structured is not None:
        return tool_step_call(tools, structured) if "tool" in structured else None
    tool = choose_shell_tool(tools)
    return ToolCall(tool.name, shell_arguments(tool, step), kind=tool.kind) if tool else None


def answer(
    dialect: Dialect,
    body: dict[str, Any],
    script: Sequence[str | Sequence[str]],
    *,
    final: str = "done",
    tool_less_is_side: bool = True,
) -> dict[str, Any]:
    """The scripted answer as the dialect's final object, parallel groups included."""
    from pomona.proxy import neutral  # neutral renders several calls; it imports the dialects

    model = str(body.get("model") or "scripted")
    flat = flatten(script)
    steps = [step for step, _ in flat]
    tools = dialect.tools(body)
    done = step_of(dialect, body, steps) if tools or not tool_less_is_side else len(flat)
    group = [s for s, g in flat[done:] if g == flat[done][1]] if done < len(flat) else []
    found = [_step_call(tools, s) for s in group] if parallel_allowed(body) else []
    calls = [c for c in found if c is not None]
    if len(calls) < 2 or len(calls) < len(found):
        single = reply(dialect, body, steps, final=final, tool_less_is_side=tool_less_is_side)
        return dialect.final(single, model, body)
    out = neutral.render(dialect, neutral.Action(tool_calls=calls), model, body)
    if dialect.name == "chat" and body.get("return_token_ids"):
        rendered = [
            {"function": {"name": c.name, "arguments": json.dumps(c.arguments)}} for c in calls
        ]
        tokens = _with_tokens(Reply(text=_render_assistant(None, rendered)), body)
        choice = out["choices"][0]
        out["prompt_token_ids"], choice["token_ids"] = (
            tokens.prompt_token_ids,
            tokens.completion_token_ids,
        )
        if tokens.logprobs is not None:
            choice["logprobs"] = {"content": tokens.logprobs}
    return out


# --- vLLM-style token ids, so token faithfulness can be tested without a GPU ------------------
# A byte-level "tokenizer" with a prefix-stable chat template: each message renders as
# <role> text <end>, and the prompt ends with <assistant>. The completion is the assistant's
# text <end>, so a harness that replays the reply verbatim yields a prompt that extends the
# previous prompt + completion exactly, and one that rewrites history does not.
_ROLE_TOKENS = {
    "system": 256,
    "developer": 256,
    "user": 257,
    "assistant": 258,
    "tool": 259,
    "function": 259,
}
_END = 260


def _render_assistant(content: Any, tool_calls: Any) -> str:
    calls = "".join(
        f"<call>{c['function']['name']}{c['function']['arguments']}"
        for c in tool_calls or []
        if isinstance(c, dict)
    )
    return text_of(content) + calls


def prompt_token_ids(body: dict[str, Any]) -> list[int]:
    ids: list[int] = []
    for m in body.get("messages") or []:
        role = m.get("role", "user")
        text = (
            _render_assistant(m.get("content"), m.get("tool_calls"))
            if role == "assistant"
            else text_of(m.get("content"))
        )
        ids += [_ROLE_TOKENS.get(role, 257), *text.encode(), _END]
    return [*ids, _ROLE_TOKENS["assistant"]]


def _with_tokens(r: Reply, body: dict[str, Any]) -> Reply:
    """Attach token ids and logprobs when the request asks for them as vLLM does."""
    if not body.get("return_token_ids"):
        return r
    if r.tool_call:
        tc = [
            {"function": {"name": r.tool_call.name, "arguments": json.dumps(r.tool_call.arguments)}}
        ]
        text = _render_assistant(None, tc)
    else:
        text = r.text or ""
    r.prompt_token_ids = prompt_token_ids(body)
    r.completion_token_ids = [*text.encode(), _END]
    r.input_tokens, r.output_tokens = len(r.prompt_token_ids), len(r.completion_token_ids)
    if body.get("logprobs"):
        r.logprobs = [
            {
                "token": chr(t) if t < 128 else f"<{t}>",
                "logprob": -0.125 * (i % 4),
                "bytes": [t] if t < 256 else [],
                "top_logprobs": [],
            }
            for i, t in enumerate(r.completion_token_ids)
        ]
    return r
