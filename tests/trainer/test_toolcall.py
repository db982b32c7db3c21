"""The tool-call format of the transformers upstream for templates that render no tools: what the
model is shown, and what is read back from what it writes (a malformed call is the model's)."""

from __future__ import annotations

import json

from pomona.proxy import toolcall

BASH = {
    "name": "bash",
    "description": "Run a shell command.",
    "parameters": {
        "type": "object",
        "properties": {"command": {"type": "string"}},
        "required": ["command"],
    },
}


def test_a_call_rendered_in_history_parses_back_to_itself():
    text = toolcall.render_call("bash", '{"command":"ls -la"}')
    assert text == '<tool_call>{"name": "bash", "arguments": {"command":"ls -la"}}</tool_call>'
    parsed = toolcall.parse("I will look.\n" + text)
    assert parsed.calls == [("bash", {"command": "ls -la"}, '{"command":"ls -la"}')]
    assert parsed.text == "I will look.\n" and parsed.errors == []
    two = toolcall.parse(text + "\n" + toolcall.render_call("bash", {"command": "pwd"}))
    assert [c[1]["command"] for c in two.calls] == ["ls -la", "pwd"] and two.text == ""


def test_malformed_calls_stay_text_and_are_reported():
    for body, why in (
        ('{"name": "bash", "arguments": {"command": "ls"}', "not JSON"),
        ('{"arguments": {"command": "ls"}}', "no string name"),
        ('{"name": "bash", "arguments": "ls"}', "not an object"),
    ):
        parsed = toolcall.parse(f"<tool_call>{body}</tool_call>")
        assert parsed.calls == [] and why in parsed.errors[0], parsed.errors
        assert parsed.text == f"<tool_call>{body}</tool_call>"  # the harness sees what it was
    cut = toolcall.parse('<tool_call>{"name": "bash", "arguments": {"comm')
    assert cut.calls == [] and "never closed" in cut.errors[0]
    assert toolcall.parse("```bash\nls\n```").calls == []  # fenced code is prose, not a call


def test_tools_and_calls_are_written_into_the_conversation():
    messages = [
        {"role": "system", "content": "You are pi."},
        {"role": "user", "content": "List files."},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "bash", "arguments": '{"command":"ls"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "a.txt"},
    ]
    out = toolcall.inline(messages, [{"type": "function", "function": BASH}])
    assert [m["role"] for m in out] == ["system", "user", "assistant", "tool"]
    assert out[0]["content"].startswith("You are pi.\n\nYou can call these tools:\n<tools>\n")
    assert json.dumps(BASH) in out[0]["content"]
    assert '{"name": "bash", "arguments": {"command": "ls -la"}}' in out[0]["content"]
    assert out[2] == {
        "role": "assistant",
        "content": toolcall.render_call("bash", '{"command":"ls"}'),
    }
    assert messages[2]["tool_calls"]  # the caller's messages are left as they were
    bare = toolcall.inline(messages[1:2], [{"type": "function", "function": BASH}])
    assert bare[0]["role"] == "system" and bare[1] == messages[1]
    assert toolcall.inline(messages[1:2], []) == messages[1:2]
