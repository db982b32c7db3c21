"""Real upstreams over real HTTP: pass-through keeps every byte, LiteLLM translates across
dialects, and each upstream failure reaches the client in its own dialect and is recorded."""

from __future__ import annotations

import asyncio
import json
import socket

import anthropic
import httpx
import openai
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import Response, StreamingResponse
from proxy_helpers import ANTHROPIC_BASH, CHAT_BASH, COMMAND, calls, response_of

from pomona.proxy import AppServer, ProxyConfig, ProxyServer
from pomona.proxy.config import Timeouts

# A vLLM-style answer carrying fields a translation would drop; the exact bytes must survive.
VLLM_BODY = (
    b'{"id":"chatcmpl-x","object":"chat.completion","created":1,"model":"q","prompt_token_ids":[1,2,3],'
    b'"choices":[{"index":0,"message":{"role":"assistant","content":"hi","reasoning_content":"think"},'
    b'"finish_reason":"stop","token_ids":[7,8],"logprobs":{"content":[{"token":"h","logprob":-0.5,'
    b'"bytes":[104],"top_logprobs":[]},{"token":"i","logprob":-0.25,"bytes":[105],"top_logprobs":[]}]}}],'
    b'"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5},"kv_transfer_params":null,  "x_unknown":{"a":[1]}}'
)
VLLM_STREAM = [
    b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"q","prompt_token_ids":[1,2,3],"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}\n\n',
    b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"q","choices":[{"index":0,"delta":{"reasoning_content":"th"},"token_ids":[7],"finish_reason":null}]}\n\n',
    b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"q","choices":[{"index":0,"delta":{"content":"hi"},"token_ids":[8],"finish_reason":"stop"}]}\n\n',
    b"data: [DONE]\n\n",
]


def fake_upstream() -> FastAPI:
    """An OpenAI/Anthropic-compatible upstream whose behaviour is chosen by the model name."""
    app = FastAPI()
    app.state.seen = []

    @app.post("/v1/chat/completions")
    @app.post("/v1/messages")
    async def answer(request: Request):
        body = await request.json()
        app.state.seen.append((request.url.path, dict(request.headers), body))
        model = body["model"]
        if model == "rate-limited":
            return Response(
                b'{"error":{"message":"slow down","type":"rate_limit_error","code":"rate_limit"}}',
                429,
                media_type="application/json",
            )
        if model == "broken":
            return Response(b"<html>internal error</html>", 500, media_type="text/html")
        if model == "slow":
            await asyncio.sleep(5)
        if model in ("cut", "hang"):

            async def cut():
                yield VLLM_STREAM[0]
                yield VLLM_STREAM[1][:40]  # then the connection dies mid-event
                if model == "hang":
                    await asyncio.sleep(30)
                raise RuntimeError("upstream died")

            return StreamingResponse(cut(), media_type="text/event-stream")
        if body.get("stream"):

            async def chunks():
                for c in VLLM_STREAM:
                    yield c

            return StreamingResponse(chunks(), media_type="text/event-stream")
        return Response(VLLM_BODY, media_type="application/json")

    return app


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def fake():
    with AppServer(fake_upstream()) as server:
        yield server


@pytest.fixture(scope="module")
def scripted_upstream():
    """The scripted model as a standalone upstream server (nothing recorded there)."""
    with ProxyServer(ProxyConfig(default_script=[COMMAND])) as server:
        yield server


def _route(name: str, model: str, base: str, **info) -> dict:
    entry = {
        "model_name": name,
        "litellm_params": {"model": model, "api_base": base, "api_key": "sk-upstream-secret"},
    }
    if info:
        entry["model_info"] = {"pomona": info}
    return entry


@pytest.fixture
def front(runs, fake, scripted_upstream):
    models = [
        _route("vllm", "hosted_vllm/q", f"{fake.url}/v1"),
        *(
            _route(n, f"openai/{n}", f"{fake.url}/v1")
            for n in ("rate-limited", "broken", "slow", "cut", "hang")
        ),
        _route("scripted-chat", "hosted_vllm/scripted", f"{scripted_upstream.url}/v1"),
        _route("scripted-anthropic", "anthropic/scripted", scripted_upstream.url),
        _route("down", "openai/x", f"http://127.0.0.1:{free_port()}/v1"),
    ]
    with ProxyServer(
        ProxyConfig.from_model_list(models, trajectories=runs, timeouts=Timeouts(total=1.0))
    ) as p:
        yield p


def test_passthrough_keeps_unknown_fields_byte_for_byte(front, runs, fake):
    ep = front.open_episode()
    r = httpx.post(
        f"{ep['base_url']}/chat/completions",
        json={"model": "vllm", "messages": [{"role": "user", "content": "x"}]},
        headers={"authorization": "Bearer sk-client-secret"},
    )
    assert r.status_code == 200 and r.content == VLLM_BODY
    path, headers, body = fake.app.state.seen[-1]
    assert (
        headers["authorization"] == "Bearer sk-upstream-secret"
    )  # the route's key replaces the caller's
    assert body["model"] == "q" and body["return_token_ids"] is True and body["logprobs"] is True
    (row,) = calls(runs, 1)
    assert row["response"].encode() == VLLM_BODY and row["upstream"] == "passthrough"
    assert row["prompt_token_ids"] == [1, 2, 3] and row["completion_token_ids"] == [7, 8]
    assert row["completion_logprobs"] == [-0.5, -0.25]
    blob = b"".join(p.read_bytes() for p in runs.iterdir())
    assert b"sk-client-secret" not in blob and b"sk-upstream-secret" not in blob


def test_passthrough_stream_is_relayed_unchanged_and_assembled(front, runs):
    ep = front.open_episode()
    with httpx.stream(
        "POST",
        f"{ep['base_url']}/chat/completions",
        json={"model": "vllm", "stream": True, "messages": [], "tools": [CHAT_BASH]},
    ) as r:
        got = b"".join(r.iter_bytes())
    assert got == b"".join(VLLM_STREAM)
    (row,) = calls(runs, 1)
    final = response_of(row)
    assert final["choices"][0]["message"] == {
        "role": "assistant",
        "content": "hi",
        "reasoning_content": "th",
    }
    assert row["prompt_token_ids"] == [1, 2, 3] and row["completion_token_ids"] == [7, 8]
    assert row["token_faithful"] is True and row["status"] == "ok"


def test_token_faithfulness_through_a_scripted_vllm_upstream(front, runs):
    """The scripted upstream returns vLLM-style token ids; replaying its reply verbatim extends
    the previous prompt+completion, rewriting history does not."""
    ep = front.open_episode(script=[COMMAND, "ls"])
    client = openai.OpenAI(base_url=ep["base_url"], api_key="k")
    messages = [{"role": "user", "content": "go"}]
    first = (
        client.chat.completions.create(model="scripted-chat", messages=messages, tools=[CHAT_BASH])
        .choices[0]
        .message
    )
    tc = first.tool_calls[0]
    assistant = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": tc.id,
                "type": "function",
                "function": {"name": tc.function.name, "arguments": tc.function.arguments},
            }
        ],
    }
    faithful = [*messages, assistant, {"role": "tool", "tool_call_id": tc.id, "content": "ok"}]
    client.chat.completions.create(model="scripted-chat", messages=faithful, tools=[CHAT_BASH])
    rewritten = {
        **assistant,
        "tool_calls": [
            {
                **assistant["tool_calls"][0],
                "function": {"name": "bash", "arguments": '{"command":"echo hello > out.txt"}'},
            }
        ],
    }
    client.chat.completions.create(
        model="scripted-chat",
        messages=[*faithful, rewritten, {"role": "tool", "tool_call_id": tc.id, "content": "ok"}],
        tools=[CHAT_BASH],
    )
    rows = calls(runs, 3)
    assert [r["token_faithful"] for r in rows] == [True, True, False]
    assert rows[0]["token_faithful_reason"] == "first call of the episode"
    assert "extends" in rows[1]["token_faithful_reason"]
    assert "diverges" in rows[2]["token_faithful_reason"]
    assert all(r["completion_logprobs"] for r in rows)


def test_translation_chat_caller_to_anthropic_upstream(front, runs, scripted_upstream):
    """A chat client served by an Anthropic-dialect upstream: LiteLLM translates both ways."""
    client = openai.OpenAI(base_url=front.open_episode()["base_url"], api_key="k")
    got = client.chat.completions.create(
        model="scripted-anthropic",
        messages=[{"role": "user", "content": "go"}],
        tools=[CHAT_BASH],
        max_tokens=100,
    )
    tc = got.choices[0].message.tool_calls[0]
    assert tc.function.name == "bash" and json.loads(tc.function.arguments) == {"command": COMMAND}
    rows = calls(runs, 1)
    print([(r["status"], r["error"]) for r in rows])
    (row,) = rows
    assert row["upstream"] == "litellm" and row["status"] == "ok"


def test_translation_anthropic_caller_to_chat_upstream(front, runs):
    client = anthropic.Anthropic(base_url=front.open_episode()["anthropic_base_url"], api_key="k")
    msg = client.messages.create(
        model="scripted-chat",
        max_tokens=100,
        messages=[{"role": "user", "content": "go"}],
        tools=[ANTHROPIC_BASH],
    )
    block = next(b for b in msg.content if b.type == "tool_use")
    assert block.name == "Bash" and block.input == {"command": COMMAND}
    (row,) = calls(runs, 1)
    assert row["upstream"] == "litellm" and row["dialect"] == "anthropic"


@pytest.mark.parametrize(
    ("model", "status", "kind"),
    [
        ("rate-limited", 429, "rate_limit_error"),
        ("broken", 500, "api_error"),
        ("slow", 504, "timeout_error"),
        ("down", 502, "api_error"),
    ],
)
def test_upstream_failures_reach_the_client_in_its_dialect(front, runs, model, status, kind):
    ep = front.open_episode()
    client = openai.OpenAI(base_url=ep["base_url"], api_key="k", max_retries=0)
    with pytest.raises(openai.APIStatusError) as err:
        client.chat.completions.create(model=model, messages=[{"role": "user", "content": "x"}])
    assert err.value.status_code == status
    assert (
        err.value.body["type"] == kind
        if model != "rate-limited"
        else err.value.body["code"] == "rate_limit"
    )
    (row,) = calls(runs, 1)
    assert row["status"] == "upstream_error" and row["status_code"] == status and row["error"]


def test_upstream_down_in_anthropic_dialect(front, runs):
    client = anthropic.Anthropic(
        base_url=front.open_episode()["anthropic_base_url"], api_key="k", max_retries=0
    )
    front.config.models.append(
        front.config.route("down").__class__.from_entry(
            _route("down-a", "anthropic/x", f"http://127.0.0.1:{free_port()}")
        )
    )
    with pytest.raises(anthropic.APIStatusError) as err:
        client.messages.create(
            model="down-a", max_tokens=5, messages=[{"role": "user", "content": "x"}]
        )
    assert err.value.status_code == 502
    assert err.value.body == {
        "type": "error",
        "error": {"type": "api_error", "message": err.value.body["error"]["message"]},
    }
    assert calls(runs, 1)[0]["status"] == "upstream_error"


def test_stream_cut_halfway_ends_in_a_dialect_error(front, runs):
    ep = front.open_episode()
    client = openai.OpenAI(base_url=ep["base_url"], api_key="k", max_retries=0)
    with pytest.raises(openai.APIError):
        list(client.chat.completions.create(model="cut", messages=[], stream=True))
    (row,) = calls(runs, 1)
    assert row["status"] == "upstream_error" and row["response_stream"].startswith(
        VLLM_STREAM[0].decode()
    )
    assert '"error"' in row["response_stream"].rsplit("data: ", 1)[-1]


def test_client_disconnect_mid_stream_leaves_an_incomplete_record(front, runs):
    ep = front.open_episode()
    with httpx.stream(
        "POST",
        f"{ep['base_url']}/chat/completions",
        json={"model": "hang", "stream": True, "messages": []},
    ) as r:
        next(r.iter_raw())  # the first event arrived; now hang up
    (row,) = calls(runs, 1)
    assert row["status"] == "incomplete" and "disconnected" in row["error"]


def test_translation_streams_and_responses_caller(front, runs):
    """Streamed translation, and a Responses client served by a chat-only (vLLM-style) upstream."""
    client = openai.OpenAI(base_url=front.open_episode()["base_url"], api_key="k")
    chunks = list(
        client.chat.completions.create(
            model="scripted-anthropic",
            messages=[{"role": "user", "content": "go"}],
            tools=[CHAT_BASH],
            max_tokens=100,
            stream=True,
        )
    )
    args = "".join(
        tc.function.arguments or ""
        for c in chunks
        if c.choices
        for tc in c.choices[0].delta.tool_calls or []
    )
    assert json.loads(args) == {"command": COMMAND}
    got = client.responses.create(
        model="scripted-chat",
        input="go",
        tools=[
            {
                "type": "function",
                "name": "bash",
                "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
            }
        ],
    )
    call = next(o for o in got.output if o.type == "function_call")
    assert json.loads(call.arguments) == {"command": COMMAND}
    rows = calls(runs, 2)
    assert [(r["upstream"], r["status"]) for r in rows] == [("litellm", "ok")] * 2
    assert (
        response_of(rows[0])["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "bash"
    )
