"""The `transformers` upstream: a model directory named in the proxy's model list answers with
token ids and logprobs in vLLM's fields, recorded in the `calls` row; bad input is refused in
the caller's own dialect."""

from __future__ import annotations

import anthropic
import httpx
import openai
import pytest
from conftest import TOOLS, tool_conversation

from pomona import trajectories
from pomona.proxy import ModelRoute, ProxyConfig, ProxyServer
from pomona.proxy.local_model import LocalModel, LocalModelServer

# the session fixtures (harness recordings, a tiny model's SFT run) are set up inside the first
# test's time; on a busy shared 2-core machine that can exceed the suite-wide 300 s
pytestmark = pytest.mark.timeout(900)


def test_a_transformers_route_records_token_ids(tiny_model, tmp_path):
    runs = tmp_path / "runs"
    with ProxyServer(ProxyConfig(trajectories=runs)) as proxy:
        proxy.config.models.append(ModelRoute.from_entry(
            {"model_name": "tiny", "litellm_params": {"model": f"transformers/{tiny_model}"}}))  # fmt: skip
        ep = proxy.open_episode(model="tiny")
        client = openai.OpenAI(base_url=ep["base_url"], api_key="x")
        messages = tool_conversation("ls")[:2]  # system and user, as the model was taught
        r = client.chat.completions.create(
            model="tiny", messages=messages, tools=TOOLS, temperature=0
        )
        (call,) = r.choices[0].message.tool_calls  # the taught reply: a bash call
        assert call.function.name == "bash" and "ls" in call.function.arguments
        streamed = "".join(
            c.choices[0].delta.content or "" for c in client.chat.completions.create(
                model="tiny", messages=[*messages, r.choices[0].message, {
                    "role": "tool", "tool_call_id": call.id, "content": "a.txt"}],
                tools=TOOLS, temperature=0, stream=True) if c.choices)  # fmt: skip
        assert streamed.strip() == "ok"
        proxy.close_episode(ep["key"], reward=1.0)
    rows = [c for c in trajectories.read(runs, "calls").to_pylist() if c["episode"] == ep["key"]]
    assert [c["status"] for c in rows] == ["ok", "ok"]
    for row in rows:
        assert row["prompt_token_ids"] and row["completion_token_ids"]
        assert len(row["completion_logprobs"]) == len(row["completion_token_ids"])
        assert all(lp <= 0 for lp in row["completion_logprobs"])
    assert rows[1]["token_faithful"] is True  # the template round-trips the taught reply


def test_a_routes_temperature_and_max_tokens_are_its_servers_defaults(tiny_model):
    greedy = {"model": f"transformers/{tiny_model}", "temperature": 0}
    routes = [{"model_name": "greedy", "litellm_params": greedy},
              {"model_name": "hot", "litellm_params": {**greedy, "temperature": 50, "max_tokens": 16}},
              {"model_name": "short", "litellm_params": {**greedy, "max_tokens": 3}}]  # fmt: skip
    with ProxyServer(ProxyConfig.from_model_list(routes)) as proxy:
        client = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key="x", max_retries=0)
        messages = tool_conversation("ls")[:2]

        def reply(model: str, **kwargs):
            return client.chat.completions.create(model=model, messages=messages, tools=TOOLS,
                                                  **kwargs).choices[0]  # fmt: skip

        # no temperature in the requests: the route's own (0: the taught reply every time; 50:
        # next to uniform over the vocabulary, no tool call)
        taught = {reply("greedy").message.tool_calls[0].function.arguments for _ in range(2)}
        assert len(taught) == 1 and "ls" in taught.pop()
        assert reply("hot").message.tool_calls is None
        # max_tokens caps the reply whatever the request asks for
        r = client.chat.completions.create(model="short", messages=messages, tools=TOOLS,
                                           max_tokens=1000)  # fmt: skip
        assert (r.usage.completion_tokens, r.choices[0].finish_reason) == (3, "length")
    model = LocalModel(tiny_model)
    short = model.variant(name="short", max_new_tokens=3)  # the same weights, other defaults
    assert short.model is model.model and (short.max_new_tokens, model.max_new_tokens) == (3, 256)


def test_bad_input_is_refused_in_the_callers_dialect(tiny_model, tmp_path):
    with pytest.raises(ValueError, match="not a Hugging Face model directory"):
        LocalModel(tmp_path)
    model = LocalModel(tiny_model, max_new_tokens=8)
    too_long = [{"role": "user", "content": "hello " * model.context}]
    with LocalModelServer(model) as server:
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0)
        with pytest.raises(openai.BadRequestError, match="context"):
            client.chat.completions.create(model="tiny", messages=too_long)
        # a harness's own default (pi asks for 16,384 tokens) is capped, not refused
        r = client.chat.completions.create(model="tiny", max_tokens=10**6,
                                           messages=[{"role": "user", "content": "hi"}])  # fmt: skip
        assert r.usage.completion_tokens <= 8
        r = httpx.post(f"{server.url}/v1/chat/completions", content=b"{not json")
        assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
        r = httpx.post(f"{server.url}/v1/chat/completions", json={"messages": "hi"})
        assert r.status_code == 400 and "messages" in r.json()["error"]["message"]
        with ProxyServer(ProxyConfig()) as proxy:  # an Anthropic caller of the same model
            proxy.config.models.append(ModelRoute.from_entry({"model_name": "tiny", "litellm_params": {
                "model": "hosted_vllm/tiny", "api_base": f"{server.url}/v1", "api_key": "x"}}))  # fmt: skip
            claude = anthropic.Anthropic(base_url=proxy.url, api_key="x", max_retries=0)
            with pytest.raises(anthropic.BadRequestError, match="context"):
                claude.messages.create(model="tiny", max_tokens=4, messages=too_long)
            reply = claude.messages.create(model="tiny", max_tokens=4,
                                           messages=[{"role": "user", "content": "hi"}])  # fmt: skip
            assert reply.role == "assistant" and reply.usage.output_tokens <= 4
