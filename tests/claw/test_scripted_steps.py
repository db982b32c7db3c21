"""The scripted model's structured steps: MCP tool calls under each harness's naming, through
OpenClaw's deferred-tool gateway, and text replies that advance the script statelessly."""

from __future__ import annotations

import json

from pomona.proxy.dialects import DIALECTS
from pomona.proxy.scripted import reply, structured_step

CHAT = DIALECTS["chat"]
STEP = json.dumps({"tool": "send_email", "server": "claw", "arguments": {"to": "a@b.c"}})
SAY = json.dumps({"text": "Sent it."})


def _tool(name: str) -> dict:
    return {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}


def _body(tools: list[str], messages: list[dict] | None = None) -> dict:
    return {
        "messages": messages or [{"role": "user", "content": "go"}],
        "tools": [_tool(t) for t in tools],
    }


def test_shell_commands_and_json_lookalikes_stay_shell_commands():
    assert structured_step("echo hi") is None
    assert structured_step("{ echo a; echo b; }") is None
    assert structured_step('{"tool": "x", "rm": "-rf"}') is None  # unknown keys: not a step
    assert structured_step(STEP) == {
        "tool": "send_email",
        "server": "claw",
        "arguments": {"to": "a@b.c"},
    }


def test_a_tool_step_finds_the_tool_under_each_harness_naming():
    for offered in (
        "send_email",
        "mcp__claw__send_email",
        "claw__send_email",
        "claw_send_email",
        "mcp_claw_send_email",
    ):
        r = reply(CHAT, _body(["bash", offered]), [STEP])
        assert r.tool_call is not None and r.tool_call.name == offered
        assert r.tool_call.arguments == {"to": "a@b.c"}


def test_another_servers_tool_of_the_same_name_is_not_taken():
    r = reply(CHAT, _body(["mcp__mail__send_email", "mcp__other__resend_email"]), [STEP])
    assert r.tool_call is None and "no tool 'send_email'" in (r.text or "")


def test_a_deferred_tool_goes_through_the_gateway_with_the_servers_name():
    r = reply(CHAT, _body(["exec", "tool_call", "tool_search"]), [STEP])
    assert r.tool_call.name == "tool_call"
    assert r.tool_call.arguments == {"id": "claw__send_email", "args": {"to": "a@b.c"}}


def test_text_steps_advance_from_the_conversation_itself():
    script = [SAY, STEP, json.dumps({"text": "All done."})]
    first = reply(CHAT, _body(["bash"]), script)
    assert first.text == "Sent it." and first.tool_call is None
    # the same request again (a retry) gets the same answer; a later one moves on
    assert reply(CHAT, _body(["bash"]), script).text == "Sent it."
    history = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "Sent it."},
        {"role": "user", "content": "and now?"},
    ]
    assert (
        reply(CHAT, _body(["claw_send_email"], history), script).tool_call.name == "claw_send_email"
    )
