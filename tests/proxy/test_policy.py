"""The policy upstream: calls wait for an outside policy, whose neutral reply reaches the real
openai and anthropic SDKs in their own dialect (streamed or not) and is recorded; side calls are
answered automatically; a policy that never answers, or an episode that ends, gives a clean error."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import anthropic
import httpx
import openai
import pytest
from proxy_helpers import ANTHROPIC_BASH, CHAT_BASH, RESPONSES_EXEC, calls

from pomona.proxy.policy import CallExpired, Policy

TWO_CALLS = {
    "text": "running two",
    "tool_calls": [
        {"name": "bash", "arguments": {"command": "echo a"}},
        {"name": "bash", "arguments": {"command": "echo b"}},
    ],
}


def answer_in_background(policy: Policy, *actions):
    """A policy on another thread: answers the next calls with `actions`, records what it saw."""
    seen: list = []

    def run():
        for action in actions:
            call = policy.next_call(timeout=10)
            if call is None:
                return
            seen.append(call)
            policy.reply(call, action)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return seen, thread


@pytest.mark.parametrize("stream", [False, True])
def test_chat_text_and_two_tool_calls(proxy, runs, stream):
    ep = proxy.open_episode(model="policy")
    policy = proxy.state.episodes.get(ep["key"]).policy
    seen, thread = answer_in_background(policy, TWO_CALLS)
    client = openai.OpenAI(base_url=ep["base_url"], api_key="sk-x")
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "go"}]
    if stream:
        chunks = list(
            client.chat.completions.create(
                model="m", messages=messages, tools=[CHAT_BASH], stream=True
            )
        )
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        by_index: dict[int, str] = {}
        for c in chunks:
            for tc in (c.choices[0].delta.tool_calls or []) if c.choices else []:
                by_index[tc.index] = by_index.get(tc.index, "") + (tc.function.arguments or "")
        args = [json.loads(by_index[i]) for i in sorted(by_index)]
    else:
        msg = (
            client.chat.completions.create(model="m", messages=messages, tools=[CHAT_BASH])
            .choices[0]
            .message
        )
        text = msg.content
        args = [json.loads(tc.function.arguments) for tc in msg.tool_calls]
    thread.join(5)
    assert text == "running two" and args == [{"command": "echo a"}, {"command": "echo b"}]
    (call,) = seen
    assert call.dialect == "chat" and call.stream is stream
    assert call.messages == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "go"},
    ]
    assert call.tools[0]["name"] == "bash" and call.tools[0]["parameters"]["required"] == [
        "command"
    ]
    (row,) = calls(runs, 1)
    assert (row["upstream"], row["status"], row["side"], row["episode"]) == (
        "policy",
        "ok",
        False,
        ep["key"],
    )
    assert len(json.loads(row["response"])["choices"][0]["message"]["tool_calls"]) == 2


def test_responses_conversation_is_neutral(proxy, runs):
    ep = proxy.open_episode(model="policy")
    policy = proxy.state.episodes.get(ep["key"]).policy
    seen, thread = answer_in_background(
        policy, {"tool_calls": [{"name": "exec_command", "arguments": {"cmd": "ls"}}]}
    )
    client = openai.OpenAI(base_url=ep["base_url"], api_key="sk-x")
    items = [
        {"role": "developer", "content": "rules"},
        {"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
        {
            "type": "function_call",
            "call_id": "c1",
            "name": "exec_command",
            "arguments": '{"cmd": "pwd"}',
        },
        {"type": "function_call_output", "call_id": "c1", "output": "/workspace"},
    ]
    with client.responses.stream(
        model="m", input=items, tools=[RESPONSES_EXEC], instructions="sys"
    ) as s:
        final = s.get_final_response()
    thread.join(5)
    assert final.output[0].type == "function_call" and json.loads(final.output[0].arguments) == {
        "cmd": "ls"
    }
    assert seen[0].messages == [
        {"role": "system", "content": "sys"},
        {"role": "system", "content": "rules"},
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "c1", "name": "exec_command", "arguments": {"cmd": "pwd"}}],
        },
        {"role": "tool", "content": "/workspace", "tool_call_id": "c1"},
    ]


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_side_call_is_automatic_and_main_call_waits(proxy, runs, stream):
    ep = proxy.open_episode(model="policy")
    policy = proxy.state.episodes.get(ep["key"]).policy
    client = anthropic.Anthropic(base_url=ep["anthropic_base_url"], api_key="sk-x")
    title = client.messages.create(
        model="m", max_tokens=10, messages=[{"role": "user", "content": "title?"}]
    )
    assert title.content[0].text == policy.side_text  # no policy involved
    seen, thread = answer_in_background(
        policy, {"text": "ok", "tool_calls": [{"name": "Bash", "arguments": '{"command": "ls"}'}]}
    )
    messages = [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "pwd"}}
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "/w"}],
        },
    ]
    kwargs = dict(
        model="m",
        max_tokens=100,
        system=[{"type": "text", "text": "sys"}],
        messages=messages,
        tools=[ANTHROPIC_BASH],
    )
    if stream:
        with client.messages.stream(**kwargs) as s:
            msg = s.get_final_message()
    else:
        msg = client.messages.create(**kwargs)
    thread.join(5)
    assert [b.type for b in msg.content] == ["text", "tool_use"] and msg.stop_reason == "tool_use"
    assert msg.content[1].input == {"command": "ls"}
    assert [m["role"] for m in seen[0].messages] == ["system", "user", "assistant", "tool"]
    rows = calls(runs, 2)
    assert sorted((r["side"], r["sequence"]) for r in rows) == [(False, 0), (True, 0)]


def test_unanswered_call_times_out_in_the_callers_dialect(proxy, runs):
    ep = proxy.open_episode(model="policy", policy=Policy(timeout=0.5))
    policy = proxy.state.episodes.get(ep["key"]).policy
    client = anthropic.Anthropic(base_url=ep["anthropic_base_url"], api_key="sk-x", max_retries=0)
    with pytest.raises(anthropic.APIStatusError) as err:
        client.messages.create(
            model="m",
            max_tokens=10,
            messages=[{"role": "user", "content": "x"}],
            tools=[ANTHROPIC_BASH],
        )
    assert err.value.status_code == 504 and err.value.body["type"] == "error"
    assert policy.expired == [0]
    with pytest.raises(TimeoutError):  # the expired call is skipped, nothing else is waiting
        policy.next_call(timeout=0.1)
    (row,) = calls(runs, 1)
    assert (row["status"], row["status_code"], row["upstream"]) == ("upstream_error", 504, "policy")
    assert "did not answer" in row["error"]


def test_closing_the_episode_releases_a_held_call(proxy, runs):
    ep = proxy.open_episode(model="policy")
    policy = proxy.state.episodes.get(ep["key"]).policy
    client = openai.OpenAI(base_url=ep["base_url"], api_key="sk-x", max_retries=0)
    errors: list = []

    def ask():
        try:
            client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "x"}], tools=[CHAT_BASH]
            )
        except openai.APIStatusError as e:
            errors.append(e)

    thread = threading.Thread(target=ask)
    thread.start()
    call = policy.next_call(timeout=10)
    proxy.close_episode(ep["key"], failure_kind="harness")
    thread.join(10)
    assert errors[0].status_code == 503 and "ended" in errors[0].message
    with pytest.raises(CallExpired):
        policy.reply(call, "too late")
    assert policy.next_call(timeout=0.1) is None  # closed: readers wake up at once


def test_a_harness_that_hangs_up_withdraws_its_held_call(proxy, runs):
    ep = proxy.open_episode(model="policy")
    client = openai.OpenAI(base_url=ep["base_url"], api_key="sk-x", max_retries=0, timeout=1.0)
    with pytest.raises(openai.APITimeoutError):
        client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "x"}], tools=[CHAT_BASH]
        )
    (row,) = calls(runs, 1)
    assert (row["status"], row["upstream"]) == ("incomplete", "policy")
    late = httpx.post(f"{proxy.url}/episodes/{ep['key']}/calls/0/reply", json={"text": "late"})
    assert late.status_code == 409 and late.json()["error"]["code"] == "call_expired"


def test_policy_over_http(proxy, runs):
    """A remote trainer drives the episode through the proxy's REST routes."""
    with httpx.Client(base_url=proxy.url) as http:
        ep = http.post("/episodes", json={"model": "policy", "policy_timeout": 30}).json()
        assert (
            http.get(f"/episodes/{ep['key']}/calls/next", params={"timeout": 0.2}).status_code
            == 408
        )
        client = openai.OpenAI(base_url=ep["base_url"], api_key="sk-x")
        result: list = []
        thread = threading.Thread(
            target=lambda: result.append(
                client.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "x"}], tools=[CHAT_BASH]
                )
            )
        )
        thread.start()
        held = http.get(f"/episodes/{ep['key']}/calls/next", params={"timeout": 10}).json()
        assert held["dialect"] == "chat" and held["messages"][-1]["content"] == "x"
        bad = http.post(
            f"/episodes/{ep['key']}/calls/{held['sequence']}/reply",
            json={"tool_calls": [{"arguments": {}}]},
        )
        assert bad.status_code == 400
        ok = http.post(
            f"/episodes/{ep['key']}/calls/{held['sequence']}/reply", json={"text": "done"}
        )
        assert ok.status_code == 200
        thread.join(10)
        assert result[0].choices[0].message.content == "done"
        again = http.post(
            f"/episodes/{ep['key']}/calls/{held['sequence']}/reply", json={"text": "x"}
        )
        assert again.status_code == 409
        http.post(f"/episodes/{ep['key']}/close", json={})
        assert (
            http.get(f"/episodes/{ep['key']}/calls/next", params={"timeout": 5}).status_code == 204
        )


def test_a_hundred_waiting_long_polls_hold_no_thread(proxy, runs):
    """More policies long-polling at once than the server has worker threads (40) leave it
    serving: one more policy still takes its held call and replies, the harness's model call
    completes, and every poll still waits until its episode ends."""
    idle = [proxy.open_episode(model="policy") for _ in range(100)]
    busy = proxy.open_episode(model="policy")
    policies = [proxy.state.episodes.get(ep["key"]).policy for ep in idle]

    async def drive() -> list[int]:
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
        async with httpx.AsyncClient(base_url=proxy.url, timeout=900, limits=limits) as http:
            polls = [
                asyncio.create_task(
                    http.get(f"/episodes/{ep['key']}/calls/next", params={"timeout": 600})
                )
                for ep in idle
            ]
            deadline = time.monotonic() + 200  # generous: only a limit to fail by, not a measure
            while (waiting := sum(p.readers for p in policies)) < len(idle):
                assert time.monotonic() < deadline, f"{waiting} polls wait, the rest want a thread"
                await asyncio.sleep(0.05)
            harness = openai.AsyncOpenAI(base_url=busy["base_url"], api_key="sk-x", max_retries=0)
            answer = asyncio.create_task(
                harness.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "x"}], tools=[CHAT_BASH]
                )
            )
            held = await http.get(f"/episodes/{busy['key']}/calls/next", params={"timeout": 600})
            sequence = held.json()["sequence"]
            await http.post(f"/episodes/{busy['key']}/calls/{sequence}/reply", json={"text": "ok"})
            assert (await answer).choices[0].message.content == "ok"
            assert not any(p.done() for p in polls)
            for ep in idle:
                await http.post(f"/episodes/{ep['key']}/close", json={})
            return [(await p).status_code for p in polls]

    assert asyncio.run(drive()) == [204] * len(idle)
    assert sum(p.readers for p in policies) == 0
