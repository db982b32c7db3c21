"""Every caller dialect against every upstream dialect, streamed and not, with tools, through
the official SDKs to fake upstreams that speak each dialect on the wire (a vLLM-like chat server
with token ids, an Anthropic Messages server, an OpenAI Responses server). Each case checks what
the SDK parsed, the four recorded bodies, and the token ids where the upstream gave them."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx
import httpx2
import openai
import pytest
from proxy_helpers import ANTHROPIC_BASH, CHAT_BASH, COMMAND, RESPONSES_EXEC, calls

from pomona.proxy import ProxyConfig, ProxyServer
from pomona.proxy.dialects import DIALECTS
from pomona.proxy.sse import Parser
from pomona.proxy.testing import FakeUpstream

ROUTES = {  # proxy model name -> (upstream dialect, LiteLLM model)
    "qwen": ("chat", "hosted_vllm/qwen-upstream"),
    "claude": ("anthropic", "anthropic/claude-upstream"),
    "gpt": ("responses", "openai/gpt-upstream"),
}
ARGUMENT = {"chat": "command", "responses": "cmd", "anthropic": "command"}


def tee_client(http: Any) -> tuple[Any, bytearray]:
    """An SDK http client (`http` is httpx, or httpx2 for the anthropic SDK) and the bytes of
    the last response it read, kept as the SDK reads them."""
    last = bytearray()

    class Tee(http.BaseTransport):
        inner = http.HTTPTransport()

        def handle_request(self, request: Any) -> Any:
            response = self.inner.handle_request(request)
            last.clear()
            stream = response.stream

            class Copy(http.SyncByteStream):
                def __iter__(self) -> Any:
                    for chunk in stream:
                        last.extend(chunk)
                        yield chunk

                def close(self) -> None:
                    stream.close()

            response.stream = Copy()
            return response

    return http.Client(transport=Tee()), last


@pytest.fixture(scope="module")
def upstreams():
    with (
        FakeUpstream("chat") as chat,
        FakeUpstream("responses") as resp,
        FakeUpstream("anthropic") as anth,
    ):
        yield {"chat": chat, "responses": resp, "anthropic": anth}


@pytest.fixture(scope="module")
def front(upstreams, tmp_path_factory):
    runs = tmp_path_factory.mktemp("matrix")
    models = []
    for name, (dialect, model) in ROUTES.items():
        entry = {
            "model_name": name,
            "litellm_params": {
                "model": model,
                "api_base": upstreams[dialect].base_url,
                "api_key": "sk-upstream-matrix-key",
            },
        }
        if dialect == "responses":
            entry["model_info"] = {"pomona": {"dialects": ["responses"]}}
        models.append(entry)
    with ProxyServer(ProxyConfig.from_model_list(models, trajectories=runs)) as proxy:
        yield proxy, runs


def ask(caller: str, base: dict, model: str, stream: bool) -> tuple[str, dict, bytes]:
    """One call through the caller's official SDK: the tool call it parsed (name, arguments),
    and the bytes it received."""
    http, last = tee_client(httpx2 if caller == "anthropic" else httpx)
    name, args = _ask(caller, base, model, stream, http)
    return name, args, bytes(last)


def _ask(caller: str, base: dict, model: str, stream: bool, http: Any) -> tuple[str, dict]:
    if caller == "anthropic":
        client = anthropic.Anthropic(
            base_url=base["anthropic_base_url"],
            api_key="sk-ant-client",
            http_client=http,
            max_retries=0,
        )
        kwargs = dict(model=model, max_tokens=200, messages=[{"role": "user", "content": "go"}],
                      tools=[ANTHROPIC_BASH])  # fmt: skip
        if stream:
            with client.messages.stream(**kwargs) as s:
                message = s.get_final_message()
        else:
            message = client.messages.create(**kwargs)
        block = next(b for b in message.content if b.type == "tool_use")
        return block.name, block.input
    client = openai.OpenAI(
        base_url=base["base_url"], api_key="sk-client", http_client=http, max_retries=0
    )
    if caller == "chat":
        kwargs = dict(model=model, messages=[{"role": "user", "content": "go"}], tools=[CHAT_BASH],
                      max_tokens=200)  # fmt: skip
        if stream:
            chunks = list(client.chat.completions.create(stream=True, **kwargs))
            calls_ = [tc for c in chunks if c.choices for tc in c.choices[0].delta.tool_calls or []]
            name = next(tc.function.name for tc in calls_ if tc.function.name)
            return name, json.loads("".join(tc.function.arguments or "" for tc in calls_))
        tc = client.chat.completions.create(**kwargs).choices[0].message.tool_calls[0]
        return tc.function.name, json.loads(tc.function.arguments)
    kwargs = dict(model=model, input="go", tools=[RESPONSES_EXEC])
    if stream:
        events = list(client.responses.create(stream=True, **kwargs))
        assert events[-1].type == "response.completed", [e.type for e in events]
        response = events[-1].response
    else:
        response = client.responses.create(**kwargs)
    fc = next(o for o in response.output if o.type == "function_call")
    return fc.name, json.loads(fc.arguments)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("model", list(ROUTES))
@pytest.mark.parametrize("caller", ["chat", "responses", "anthropic"])
def test_caller_to_upstream(front, upstreams, caller, model, stream):
    proxy, runs = front
    upstream_dialect = ROUTES[model][0]
    ep = proxy.open_episode()
    name, args, received = ask(caller, ep, model, stream)
    expected_tool = {"chat": "bash", "responses": "exec_command", "anthropic": "Bash"}[caller]
    assert name == expected_tool and args == {ARGUMENT[caller]: COMMAND}

    (row,) = calls(runs, 1, episode=ep["key"])
    assert row["status"] == "ok" and row["dialect"] == caller and row["stream"] is stream
    assert row["upstream"] == ("passthrough" if caller == upstream_dialect else "litellm")
    assert row["upstream_dialect"] == upstream_dialect
    # 1. the client's request, as sent
    request = json.loads(row["request"])
    assert request["model"] == model and "tools" in request
    # 2. what went upstream: the upstream's own dialect, its model name, its key (redacted)
    seen = upstreams[upstream_dialect].seen[-1]
    assert row["upstream_request"] == seen.raw.decode()
    assert seen.body["model"] == ROUTES[model][1].split("/", 1)[1] and seen.body["tools"]
    assert (
        json.loads(row["upstream_request_headers"]).get(
            "x-api-key" if upstream_dialect == "anthropic" else "authorization"
        )
        == "[REDACTED]"
    )
    if upstream_dialect == "chat":  # token-capable: asked for token ids whatever the caller
        assert seen.body["return_token_ids"] is True and seen.body["logprobs"] is True
    # 3. what the upstream answered, parsed in its own dialect
    d = DIALECTS[upstream_dialect]
    # (LiteLLM's bridge to a Responses upstream asks it for a whole answer even when the
    # caller streams, and streams that answer itself)
    if "event-stream" in json.loads(row["upstream_response_headers"])["content-type"]:
        frames, _ = Parser().feed(row["upstream_response"].encode())
        upstream_final = d.assemble(frames)
        assert d.is_terminal(frames[-1])
    else:
        upstream_final = json.loads(row["upstream_response"])
    assert upstream_final is not None and row["upstream_status_code"] == 200
    # 4. what the client got, byte for byte, ending in exactly one terminal event
    assert row["client_response"].encode() == received
    if stream:
        frames, rest = Parser().feed(received)
        assert rest == received and DIALECTS[caller].is_terminal(frames[-1])
        assert sum(DIALECTS[caller].is_terminal(f) for f in frames) == 1
    # token ids and logprobs wherever the upstream gave them
    if upstream_dialect == "chat":
        tokens = d.token_data(upstream_final)
        assert tokens.prompt_ids and row["prompt_token_ids"] == tokens.prompt_ids
        assert row["completion_token_ids"] == tokens.completion_ids
        assert row["completion_logprobs"] and len(row["completion_logprobs"]) == len(
            tokens.completion_ids
        )
        assert row["token_faithful"] is True
    else:
        assert row["prompt_token_ids"] is None
