"""The scripted model's rules (reference/harnesses.md §5.0) and the exact SSE shapes of §5."""

from __future__ import annotations

import json

import pytest

from pomona.proxy import scripted
from pomona.proxy.dialects import DIALECTS, Reply, Tool, ToolCall
from pomona.proxy.sse import Parser


def tool(name: str, **props) -> Tool:
    required = [k for k, v in props.items() if v.pop("required", False)]
    return Tool(name, {"type": "object", "properties": props, "required": required})


def test_shell_tool_preference_order():
    offered = [tool("exec"), tool("terminal", command={"type": "string"}), tool("read_file")]
    assert scripted.choose_shell_tool(offered).name == "terminal"
    assert scripted.choose_shell_tool([tool("Bash"), tool("bash")]).name == "bash"
    assert scripted.choose_shell_tool([tool("read"), tool("write")]) is None


def test_arguments_fill_command_cmd_argv_and_required_placeholders():
    assert scripted.shell_arguments(tool("exec_command", cmd={"type": "string"}), "ls") == {
        "cmd": "ls"
    }
    argv = tool("shell", command={"type": "array", "items": {"type": "string"}})
    assert scripted.shell_arguments(argv, "ls") == {"command": ["bash", "-lc", "ls"]}
    hermes = tool(
        "terminal",
        command={"type": "string", "required": True},
        background={"type": "boolean", "required": True},
        timeout={"type": "integer"},
    )
    assert scripted.shell_arguments(hermes, "ls") == {"command": "ls", "background": False}
    assert scripted.shell_arguments(Tool("bash"), "ls") == {
        "command": "ls"
    }  # Anthropic's server bash tool
    assert scripted.shell_arguments(Tool("local_shell", kind="local_shell"), "ls") == {
        "command": ["bash", "-lc", "ls"]
    }


def test_steps_follow_tool_results_and_side_requests_take_none():
    chat = DIALECTS["chat"]
    tools = [
        {
            "type": "function",
            "function": {
                "name": "bash",
                "parameters": {"properties": {"command": {"type": "string"}}},
            },
        }
    ]
    body = {"messages": [{"role": "user", "content": "go"}], "tools": tools}
    assert scripted.reply(chat, body, ["a", "b"]).tool_call.arguments == {"command": "a"}
    assert (
        scripted.reply(chat, {"messages": body["messages"]}, ["a", "b"]).text
        == "Pomona scripted session"
    )
    body["messages"] += [{"role": "assistant", "tool_calls": []}, {"role": "tool", "content": ""}]
    assert scripted.reply(chat, body, ["a", "b"]).tool_call.arguments == {"command": "b"}
    body["messages"] += [{"role": "assistant", "tool_calls": []}, {"role": "tool", "content": ""}]
    assert scripted.reply(chat, body, ["a", "b"], final="all done").text == "all done"


def test_fenced_block_when_tool_less_calls_are_turns():
    chat = DIALECTS["chat"]
    body = {"messages": [{"role": "user", "content": "go"}]}
    first = scripted.reply(chat, body, ["ls", "pwd"], tool_less_is_side=False)
    assert first.text == "```bash\nls\n```"
    body["messages"] += [
        {"role": "assistant", "content": first.text},
        {"role": "user", "content": "output"},
    ]
    assert "pwd" in scripted.reply(chat, body, ["ls", "pwd"], tool_less_is_side=False).text


@pytest.mark.parametrize("name", ["responses", "anthropic"])
def test_tool_results_detected_per_dialect(name):
    d = DIALECTS[name]
    body = (
        {
            "input": [
                {"type": "function_call"},
                {"type": "function_call_output"},
                {"type": "custom_tool_call_output"},
            ]
        }
        if name == "responses"
        else {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": "x"},
                        {"type": "text", "text": "hi"},
                    ],
                }
            ]
        }
    )
    assert d.tool_results(body) == (2 if name == "responses" else 1)


def _frames(data: bytes):
    frames, whole = Parser().feed(data)
    assert whole == data  # every event is complete
    return frames


@pytest.mark.parametrize("name", ["chat", "responses", "anthropic"])
@pytest.mark.parametrize(
    "reply",
    [Reply(text="done"), Reply(tool_call=ToolCall("bash", {"command": "echo hello > out.txt"}))],
)
def test_events_assemble_back_to_the_final_object(name, reply):
    d = DIALECTS[name]
    body = {"stream": True, "stream_options": {"include_usage": True}}
    final = d.final(reply, "m", body)
    frames = _frames(b"".join(d.events(final, body)))
    assert d.is_terminal(frames[-1])
    assert d.assemble(frames) == final


def test_sse_shapes_match_the_reference():
    chat, responses, anth = DIALECTS["chat"], DIALECTS["responses"], DIALECTS["anthropic"]
    call = Reply(tool_call=ToolCall("exec_command", {"cmd": "ls"}))
    # chat: no event lines, usage chunk only when asked, [DONE] last
    body = {"stream": True}
    frames = _frames(b"".join(chat.events(chat.final(call, "m", body), body)))
    assert all(f.event is None for f in frames) and frames[-1].data == "[DONE]" and len(frames) == 4
    # responses: event line == data.type, sequence numbers 0..n
    frames = _frames(b"".join(responses.events(responses.final(call, "m", body), body)))
    datas = [json.loads(f.data) for f in frames]
    assert [f.event for f in frames] == [d["type"] for d in datas]
    assert [d["sequence_number"] for d in datas] == list(range(len(datas)))
    assert [d["type"] for d in datas] == [
        "response.created", "response.in_progress", "response.output_item.added",
        "response.function_call_arguments.delta", "response.function_call_arguments.done",
        "response.output_item.done", "response.completed",
    ]  # fmt: skip
    # anthropic: event lines kept
    text = b"".join(anth.events(anth.final(Reply(text="done"), "m", body), body)).decode()
    assert text.startswith("event: message_start\ndata: {")
    assert (
        '"delta":{"type":"text_delta","text":"done"}' in text and '"stop_reason":"end_turn"' in text
    )


def test_local_shell_tool_answer():
    d = DIALECTS["responses"]
    body = {"input": "go", "tools": [{"type": "local_shell"}]}
    item = d.final(scripted.reply(d, body, ["ls"]), "m", body)["output"][0]
    assert item["type"] == "local_shell_call" and item["action"] == {
        "type": "exec",
        "command": ["bash", "-lc", "ls"],
        "env": {},
    }


PARALLEL = [["echo a", "echo b"], "echo c"]


def _names_and_commands(name: str, final: dict) -> list[str]:
    if name == "chat":
        return [json.loads(c["function"]["arguments"])["command"]
                for c in final["choices"][0]["message"].get("tool_calls") or []]  # fmt: skip
    if name == "responses":
        return [
            json.loads(i["arguments"])["command"]
            for i in final["output"]
            if i["type"] == "function_call"
        ]
    return [b["input"]["command"] for b in final["content"] if b["type"] == "tool_use"]


def _with_results(name: str, body: dict, n: int) -> dict:
    """The request after `n` tool results (what a harness sends once it ran the calls)."""
    body = json.loads(json.dumps(body))
    if name == "chat":
        body["messages"] += [
            {"role": "tool", "tool_call_id": str(i), "content": ""} for i in range(n)
        ]
    elif name == "responses":
        body["input"] += [
            {"type": "function_call_output", "call_id": str(i), "output": ""} for i in range(n)
        ]
    else:
        body["messages"].append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": str(i), "content": ""} for i in range(n)]})  # fmt: skip
    return body


@pytest.mark.parametrize("name", ["chat", "responses", "anthropic"])
def test_a_script_group_is_answered_as_parallel_tool_calls(name):
    d = DIALECTS[name]
    schema = {"type": "object", "properties": {"command": {"type": "string"}}}
    tool = {"chat": {"type": "function", "function": {"name": "bash", "parameters": schema}},
            "responses": {"type": "function", "name": "bash", "parameters": schema},
            "anthropic": {"name": "bash", "input_schema": schema}}[name]  # fmt: skip
    key = "input" if name == "responses" else "messages"
    body = {key: [{"role": "user", "content": "go"}], "tools": [tool], "stream": True}
    assert _names_and_commands(name, scripted.answer(d, body, PARALLEL)) == ["echo a", "echo b"]
    after = _with_results(name, body, 2)
    assert _names_and_commands(name, scripted.answer(d, after, PARALLEL)) == ["echo c"]
    assert (
        _names_and_commands(name, scripted.answer(d, _with_results(name, body, 3), PARALLEL)) == []
    )
    # parallel calls turned off: the group is answered one call per turn
    off = {**body, "parallel_tool_calls": False}
    if name == "anthropic":
        off = {**body, "tool_choice": {"type": "auto", "disable_parallel_tool_use": True}}
    assert _names_and_commands(name, scripted.answer(d, off, PARALLEL)) == ["echo a"]
    assert _names_and_commands(name, scripted.answer(d, _with_results(name, off, 1), PARALLEL)) == [
        "echo b"
    ]
    # and streamed, the events assemble back into the same two calls
    final = scripted.answer(d, body, PARALLEL)
    frames = _frames(b"".join(d.events(final, body)))
    assert _names_and_commands(name, d.assemble(frames)) == ["echo a", "echo b"]


def test_parallel_calls_through_the_sdk(proxy):
    import httpx
    import openai

    ep = httpx.post(f"{proxy.url}/episodes", json={"model": "scripted", "script": PARALLEL}).json()
    client = openai.OpenAI(base_url=ep["base_url"], api_key="k")
    tool = {"type": "function", "function": {"name": "bash", "parameters": {
        "type": "object", "properties": {"command": {"type": "string"}}}}}  # fmt: skip
    msg = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "go"}],
                                         tools=[tool]).choices[0].message  # fmt: skip
    assert [json.loads(c.function.arguments)["command"] for c in msg.tool_calls] == [
        "echo a",
        "echo b",
    ]
    assert len({c.id for c in msg.tool_calls}) == 2


def test_a_named_servers_tool_comes_before_a_harness_own_tool_of_that_name():
    """Hermes offers its own `browser_type` beside the MCP server's: the step names the server."""
    offered = [Tool("browser_type"), Tool("mcp__webpage__browser_type"), Tool("terminal")]
    assert (
        scripted.find_tool(offered, "browser_type", "webpage").name == "mcp__webpage__browser_type"
    )
    assert (
        scripted.find_tool(offered, "browser_type").name == "browser_type"
    )  # no server: the tool itself
    plain = [Tool("browser_type"), Tool("terminal")]  # a harness that names MCP tools bare (Kimi)
    assert scripted.find_tool(plain, "browser_type", "webpage").name == "browser_type"
