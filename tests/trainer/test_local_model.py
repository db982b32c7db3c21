"""The `transformers` upstream: a model directory named in the proxy's model list answers with
token ids and logprobs in vLLM's fields, recorded in the `calls` row; bad input is refused in
the caller's own dialect."""

from __future__ import annotations

import anthropic
import httpx
import openai
import pytest
from conftest import TOOLS, sent_ids, tool_conversation

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


def test_smollm2_answers_every_dialect_token_exact(smollm2, tmp_path):
    """`--model smollm2` needs no model list; each dialect's call is recorded with the prompt the
    tokenizer makes of what was sent (tools written in: its chatml template has none), the
    sampled ids with one logprob each, and the policy version, streamed or not."""
    import json

    runs = tmp_path / "runs"
    assert not smollm2.native_tools
    with ProxyServer(ProxyConfig(trajectories=runs)) as proxy:
        ep = proxy.open_episode(model="smollm2")
        chat = openai.OpenAI(base_url=ep["base_url"], api_key="x", max_retries=0, timeout=900)
        stream = chat.chat.completions.create(
            model="smollm2", messages=tool_conversation("ls")[:2], tools=TOOLS, max_tokens=6,
            stream=True)  # fmt: skip
        streamed = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        claude = anthropic.Anthropic(base_url=ep["anthropic_base_url"], api_key="x", timeout=900)
        claude.messages.create(model="smollm2", max_tokens=6,
                               messages=[{"role": "user", "content": "What is 2+2?"}])  # fmt: skip
        chat.responses.create(model="smollm2", input="Name a colour.", max_output_tokens=6)
        version = smollm2.update_weights(smollm2.model.state_dict(), version=7)
        r = chat.chat.completions.create(model="smollm2", max_tokens=4,
                                         messages=[{"role": "user", "content": "Hi"}])  # fmt: skip
        smollm2.update_weights(smollm2.model.state_dict(), version=0)
        proxy.close_episode(ep["key"], reward=0.0)
    assert version == 7 and r.model_extra["policy_version"] == 7
    rows = [c for c in trajectories.read(runs, "calls").to_pylist() if c["episode"] == ep["key"]]
    assert [(c["dialect"], c["status"]) for c in rows] == [
        ("chat", "ok"), ("anthropic", "ok"), ("responses", "ok"), ("chat", "ok")]  # fmt: skip
    tok = smollm2.tokenizer
    for row in rows:
        assert row["prompt_token_ids"] == sent_ids(tok, row)
        assert 0 < len(row["completion_token_ids"]) == len(row["completion_logprobs"]) <= 6
        assert all(lp <= 0 for lp in row["completion_logprobs"])
    first = rows[0]
    assert "<tools>" in tok.decode(first["prompt_token_ids"])  # the offered bash tool, written in
    text = smollm2.decode(first["completion_token_ids"]).replace(tok.eos_token, "")
    assert streamed == text  # what the stream said is what the recorded tokens decode to
    assert json.loads(first["upstream_response"].split("data: ", 2)[1])["policy_version"] == 0
    assert json.loads(rows[3]["response"])["policy_version"] == 7


def test_a_malformed_tool_call_is_the_models_text_and_reported(smollm2):
    tok = smollm2.tokenizer
    good = tok.encode('<tool_call>{"name": "bash", "arguments": {"command": "ls"}}</tool_call>')
    parsed = smollm2.parse([*good, tok.eos_token_id])
    assert [(c.name, c.arguments) for c in parsed.tool_calls] == [("bash", {"command": "ls"})]
    assert parsed.raw_arguments == ['{"command": "ls"}'] and parsed.errors == []
    bad = smollm2.parse(tok.encode('<tool_call>{"name": bash}</tool_call>'))
    assert bad.tool_calls == [] and bad.text == '<tool_call>{"name": bash}</tool_call>'
    assert "not JSON" in bad.errors[0]


def test_a_model_path_that_is_not_a_model_is_refused(tmp_path):
    from pomona.proxy.config import implicit_route
    from pomona.proxy.local_model import ModelLoadError, locate

    (tmp_path / "a.gguf").write_bytes(b"")
    (tmp_path / "b.gguf").write_bytes(b"")
    with pytest.raises(ModelLoadError, match="2 GGUF files"):
        locate(tmp_path)
    assert locate(tmp_path / "a.gguf") == (tmp_path, "a.gguf")
    assert implicit_route("no-such-model") is None and implicit_route("/no/such/x.gguf") is None
    route = implicit_route(str(tmp_path / "a.gguf"))
    assert route.provider == "transformers" and route.params["temperature"] == 0
