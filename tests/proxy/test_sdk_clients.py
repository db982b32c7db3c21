"""The real openai and anthropic SDKs, through the proxy, to the scripted model: every dialect,
streamed and not, text and tool calls. The SDKs must parse each answer, and the recorded calls
must hold exactly what was sent and received."""

from __future__ import annotations

import json

import anthropic
import openai
import pytest
from proxy_helpers import (
    ANTHROPIC_BASH,
    CHAT_BASH,
    COMMAND,
    RESPONSES_EXEC,
    calls,
    request_of,
    response_of,
)


@pytest.fixture
def episode(proxy):
    return proxy.open_episode(model="scripted", script=[COMMAND], metadata={"task": "t1"})


@pytest.mark.parametrize("stream", [False, True])
def test_chat_tool_call_then_text(proxy, runs, episode, stream):
    client = openai.OpenAI(base_url=episode["base_url"], api_key="sk-test-secret-1")
    messages = [{"role": "user", "content": "create out.txt"}]

    def ask():
        if not stream:
            return (
                client.chat.completions.create(model="gpt-x", messages=messages, tools=[CHAT_BASH])
                .choices[0]
                .message
            )
        chunks = list(
            client.chat.completions.create(
                model="gpt-x",
                messages=messages,
                tools=[CHAT_BASH],
                stream=True,
                stream_options={"include_usage": True},
            )
        )
        assert chunks[-1].usage.total_tokens > 0
        content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        calls_ = [tc for c in chunks if c.choices for tc in c.choices[0].delta.tool_calls or []]
        return content, calls_

    first = ask()
    if stream:
        _, tcs = first
        assert tcs[0].function.name == "bash"
        args = json.loads("".join(tc.function.arguments for tc in tcs))
        call_id = tcs[0].id
    else:
        assert first.tool_calls[0].function.name == "bash"
        args = json.loads(first.tool_calls[0].function.arguments)
        call_id = first.tool_calls[0].id
    assert args == {"command": COMMAND}
    messages += [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": "bash", "arguments": json.dumps(args)},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call_id, "content": ""},
    ]
    second = ask()
    assert (second[0] if stream else second.content) == "done"

    rows = calls(runs, 2)
    assert [r["sequence"] for r in rows] == [0, 1]
    assert all(r["dialect"] == "chat" and r["status"] == "ok" and r["side"] is False for r in rows)
    assert all(r["stream"] is stream and r["episode"] == episode["key"] for r in rows)
    assert request_of(rows[1])["messages"] == messages
    recorded = response_of(rows[0])["choices"][0]["message"]["tool_calls"][0]
    assert recorded["id"] == call_id and json.loads(recorded["function"]["arguments"]) == args
    assert response_of(rows[1])["choices"][0]["message"]["content"] == "done"
    if stream:
        assert rows[0]["response_stream"].endswith("data: [DONE]\n\n")


@pytest.mark.parametrize("stream", [False, True])
def test_responses_tool_call_then_text(proxy, runs, episode, stream):
    client = openai.OpenAI(base_url=episode["base_url"], api_key="sk-test-secret-1")
    items: list = [{"role": "user", "content": "create out.txt"}]

    def ask():
        if not stream:
            return client.responses.create(model="gpt-x", input=items, tools=[RESPONSES_EXEC])
        events = list(
            client.responses.create(model="gpt-x", input=items, tools=[RESPONSES_EXEC], stream=True)
        )
        assert [e.sequence_number for e in events] == list(range(len(events)))
        assert events[0].type == "response.created" and events[-1].type == "response.completed"
        return events[-1].response

    first = ask()
    fc = first.output[0]
    assert fc.type == "function_call" and fc.name == "exec_command"
    assert json.loads(fc.arguments) == {"cmd": COMMAND}
    items += [
        {
            "type": "function_call",
            "call_id": fc.call_id,
            "name": fc.name,
            "arguments": fc.arguments,
        },
        {
            "type": "function_call_output",
            "call_id": fc.call_id,
            "output": "Process exited with code 0",
        },
    ]
    second = ask()
    assert second.output_text == "done"

    rows = calls(runs, 2)
    assert [r["dialect"] for r in rows] == ["responses"] * 2 and all(
        r["status"] == "ok" for r in rows
    )
    assert request_of(rows[1])["input"] == items
    assert response_of(rows[0])["output"][0]["call_id"] == fc.call_id
    assert response_of(rows[1])["output"][0]["content"][0]["text"] == "done"


def test_responses_stream_helper(proxy, episode):
    client = openai.OpenAI(base_url=episode["base_url"], api_key="k")
    with client.responses.stream(model="m", input="hi", tools=[RESPONSES_EXEC]) as s:
        kinds = [e.type for e in s]
        final = s.get_final_response()
    assert "response.function_call_arguments.delta" in kinds
    assert json.loads(final.output[0].arguments) == {"cmd": COMMAND}


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_tool_use_then_text(proxy, runs, episode, stream):
    client = anthropic.Anthropic(
        base_url=episode["anthropic_base_url"], api_key="sk-ant-test-secret-2"
    )
    messages: list = [{"role": "user", "content": "create out.txt"}]

    def ask():
        kwargs = {
            "model": "claude-x",
            "max_tokens": 1000,
            "messages": messages,
            "tools": [ANTHROPIC_BASH],
        }
        if not stream:
            return client.messages.create(**kwargs)
        with client.messages.stream(**kwargs) as s:
            return s.get_final_message()

    first = ask()
    block = first.content[0]
    assert first.stop_reason == "tool_use" and block.type == "tool_use" and block.name == "Bash"
    assert block.input == {"command": COMMAND}
    messages += [
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": block.id, "name": "Bash", "input": block.input}],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": block.id,
                    "content": "(Bash completed with no output)",
                }
            ],
        },
    ]
    second = ask()
    assert second.stop_reason == "end_turn" and second.content[0].text == "done"

    rows = calls(runs, 2)
    assert [r["dialect"] for r in rows] == ["anthropic"] * 2 and all(
        r["status"] == "ok" for r in rows
    )
    assert request_of(rows[1])["messages"] == messages
    assert response_of(rows[0])["content"][0] == {
        "type": "tool_use",
        "id": block.id,
        "name": "Bash",
        "input": {"command": COMMAND},
    }
    assert rows[1]["usage"]["output_tokens"] == second.usage.output_tokens


def test_anthropic_beta_query_and_raw_stream(proxy, runs, episode):
    """Claude Code posts to /v1/messages?beta=true and needs the `event:` lines."""
    client = anthropic.Anthropic(base_url=episode["anthropic_base_url"], api_key="k")
    raw = client.beta.messages.create(
        model="m",
        max_tokens=10,
        messages=[{"role": "user", "content": "hi"}],
        tools=[ANTHROPIC_BASH],
        stream=True,
    )
    kinds = [e.type for e in raw]
    assert kinds == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    (row,) = calls(runs, 1)
    assert "beta=true" in row["path"] or row["path"].endswith("/v1/messages")
    assert row["response_stream"].startswith("event: message_start\ndata: ")


def test_side_requests_are_tagged_and_do_not_consume_steps(proxy, runs, episode):
    client = openai.OpenAI(base_url=episode["base_url"], api_key="k")
    title = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "Generate a title"}]
    )
    assert title.choices[0].message.content  # plain text for tool-less requests
    real = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "go"}], tools=[CHAT_BASH]
    )
    assert json.loads(real.choices[0].message.tool_calls[0].function.arguments) == {
        "command": COMMAND
    }
    rows = calls(runs, 2)
    assert [(r["side"], r["sequence"]) for r in rows] == [(True, 0), (False, 0)]


def test_secrets_never_reach_disk(proxy, runs, episode):
    openai.OpenAI(base_url=episode["base_url"], api_key="sk-test-secret-1").chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "hi"}],
        tools=[CHAT_BASH],
        extra_body={"api_key": "sk-body-secret-3"},
    )
    anthropic.Anthropic(
        base_url=episode["anthropic_base_url"], api_key="sk-ant-test-secret-2"
    ).messages.create(model="m", max_tokens=5, messages=[{"role": "user", "content": "hi"}])
    rows = calls(runs, 2)
    assert json.loads(rows[0]["request_headers"])["authorization"] == "[REDACTED]"
    anthropic_headers = json.loads(rows[1]["request_headers"])
    assert (
        anthropic_headers.get("x-api-key", anthropic_headers.get("authorization")) == "[REDACTED]"
    )
    assert request_of(rows[0])["api_key"] == "[REDACTED]"
    blob = b"".join(p.read_bytes() for p in runs.iterdir())
    for secret in (b"sk-test-secret-1", b"sk-ant-test-secret-2", b"sk-body-secret-3"):
        assert secret not in blob


def test_episode_http_api_and_outcome_row(proxy, runs):
    import httpx

    r = httpx.post(
        f"{proxy.url}/episodes",
        json={
            "model": "scripted",
            "script": "ls\npwd\n",
            "metadata": {"task": "t9", "benchmark": "demo", "x": 1},
        },
    )
    ep = r.json()
    assert ep["base_url"] == f"{proxy.url}/e/{ep['key']}/v1"
    client = openai.OpenAI(base_url=ep["base_url"], api_key="k")
    got = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "go"}], tools=[CHAT_BASH]
    )
    assert json.loads(got.choices[0].message.tool_calls[0].function.arguments) == {"command": "ls"}
    closed = httpx.post(
        f"{proxy.url}/episodes/{ep['key']}/close", json={"reward": 1.0, "resolved": True}
    ).json()
    assert closed["closed"] and closed["main_calls"] == 1
    from pomona import trajectories

    (row,) = trajectories.read(runs, "episodes").to_pylist()
    assert (row["episode"], row["task"], row["benchmark"], row["reward"], row["resolved"]) == (
        ep["key"],
        "t9",
        "demo",
        1.0,
        True,
    )
    assert (
        row["failure_kind"] == "none"
        and json.loads(row["metadata"]) == {"x": 1}
        and row["model"] == "scripted"
    )
