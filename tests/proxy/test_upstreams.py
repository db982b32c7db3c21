"""Upstream faults, over real HTTP against fake upstreams that speak each dialect on the wire:
every failure reaches the client with the documented status, in its own dialect, with the
upstream's retry headers, and is recorded; pass-through keeps unknown fields byte for byte."""

from __future__ import annotations

import json
import socket
import textwrap

import anthropic
import httpx
import openai
import pytest
from fastapi import FastAPI
from fastapi.responses import Response
from proxy_helpers import ANTHROPIC_BASH, CHAT_BASH, COMMAND, calls

from pomona.proxy import AppServer, ProxyConfig, ProxyServer
from pomona.proxy.config import Timeouts
from pomona.proxy.testing import FakeUpstream

# A vLLM-style answer carrying fields a translation would drop; the exact bytes must survive.
VLLM_BODY = (
    b'{"id":"chatcmpl-x","object":"chat.completion","created":1,"model":"q","prompt_token_ids":[1,2,3],'
    b'"choices":[{"index":0,"message":{"role":"assistant","content":"hi","reasoning_content":"think"},'
    b'"finish_reason":"stop","token_ids":[7,8],"logprobs":{"content":[{"token":"h","logprob":-0.5,'
    b'"bytes":[104],"top_logprobs":[]},{"token":"i","logprob":-0.25,"bytes":[105],"top_logprobs":[]}]}}],'
    b'"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5},"kv_transfer_params":null,  "x_unknown":{"a":[1]}}'
)
BEHAVIOURS = ("ok", "rate-limited", "too-long", "broken", "gzip", "cut", "slow", "stall", "hang",
              "trailing", "spaced")  # fmt: skip
MESSAGES = [{"role": "user", "content": "go"}]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def fakes():
    with FakeUpstream("chat") as chat, FakeUpstream("anthropic") as anth:
        yield {"chat": chat, "anthropic": anth}


@pytest.fixture(scope="module")
def verbatim():
    """An upstream answering VLLM_BODY whatever it is asked."""
    app = FastAPI()
    app.add_api_route(
        "/v1/chat/completions",
        lambda: Response(VLLM_BODY, media_type="application/json"),
        methods=["POST"],
    )
    with AppServer(app) as server:
        yield server


def _route(name: str, model: str, base: str, **pomona) -> dict:
    entry = {
        "model_name": name,
        "litellm_params": {"model": model, "api_base": base, "api_key": "sk-upstream-secret"},
    }
    if pomona:
        entry["model_info"] = {"pomona": pomona}
    return entry


@pytest.fixture(scope="module")
def front(fakes, verbatim, tmp_path_factory):
    """vllm-BEHAVIOUR and claude-BEHAVIOUR routes to the fakes; slow models time out fast."""
    runs = tmp_path_factory.mktemp("faults")
    limits = {"slow": {"read": 1}, "stall": {"read": None, "total": 2}}
    models = [_route("verbatim", "hosted_vllm/q", f"{verbatim.url}/v1")]
    for b in BEHAVIOURS:
        extra = {"timeouts": limits[b]} if b in limits else {}
        models.append(_route(f"vllm-{b}", f"hosted_vllm/{b}", fakes["chat"].base_url, **extra))
        models.append(_route(f"claude-{b}", f"anthropic/{b}", fakes["anthropic"].base_url, **extra))
    models.append(_route("vllm-down", "hosted_vllm/x", f"http://127.0.0.1:{free_port()}/v1"))
    models.append(_route("claude-down", "anthropic/x", f"http://127.0.0.1:{free_port()}"))
    with ProxyServer(ProxyConfig.from_model_list(models, trajectories=runs)) as proxy:
        yield proxy, runs


def _openai(front, **kw) -> tuple[openai.OpenAI, str]:
    proxy, _ = front
    ep = proxy.open_episode()
    return openai.OpenAI(base_url=ep["base_url"], api_key="k", max_retries=0, **kw), ep["key"]


def _anthropic(front, **kw) -> tuple[anthropic.Anthropic, str]:
    proxy, _ = front
    ep = proxy.open_episode()
    client = anthropic.Anthropic(
        base_url=ep["anthropic_base_url"], api_key="k", max_retries=0, **kw
    )
    return client, ep["key"]


def _row(front, key: str) -> dict:
    (row,) = calls(front[1], 1, episode=key)
    return row


def _chat(client: openai.OpenAI, model: str, stream: bool = False):
    out = client.chat.completions.create(
        model=model, messages=MESSAGES, tools=[CHAT_BASH], stream=stream, max_tokens=50
    )
    return list(out) if stream else out


def _messages(client: anthropic.Anthropic, model: str, stream: bool = False):
    kwargs = dict(model=model, max_tokens=50, messages=MESSAGES, tools=[ANTHROPIC_BASH])
    if not stream:
        return client.messages.create(**kwargs)
    with client.messages.stream(**kwargs) as s:
        return s.get_final_message()


# --- pass-through fidelity -----------------------------------------------------------------------


def test_passthrough_keeps_unknown_fields_byte_for_byte(front, verbatim):
    proxy, runs = front
    ep = proxy.open_episode()
    r = httpx.post(
        f"{ep['base_url']}/chat/completions",
        json={"model": "verbatim", "messages": MESSAGES},
        headers={"authorization": "Bearer sk-client-secret"},
    )
    assert r.status_code == 200 and r.content == VLLM_BODY
    row = _row(front, ep["key"])
    assert row["response"].encode() == VLLM_BODY == row["upstream_response"].encode()
    assert row["prompt_token_ids"] == [1, 2, 3] and row["completion_token_ids"] == [7, 8]
    assert row["completion_logprobs"] == [-0.5, -0.25]
    sent = json.loads(row["upstream_request"])
    assert sent["model"] == "q" and sent["return_token_ids"] is True and sent["logprobs"] is True
    blob = b"".join(p.read_bytes() for p in runs.iterdir())
    assert b"sk-client-secret" not in blob and b"sk-upstream-secret" not in blob


def test_token_faithfulness_through_a_vllm_upstream(front):
    """Replaying the reply verbatim extends the previous prompt+completion; rewriting it does not."""
    client, key = _openai(front)
    first = _chat(client, "vllm-ok").choices[0].message
    tc = first.tool_calls[0]
    assistant = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": tc.id, "type": "function",
             "function": {"name": tc.function.name, "arguments": tc.function.arguments}}
        ],
    }  # fmt: skip
    faithful = [*MESSAGES, assistant, {"role": "tool", "tool_call_id": tc.id, "content": "ok"}]
    client.chat.completions.create(model="vllm-ok", messages=faithful, tools=[CHAT_BASH])
    rewritten = json.loads(json.dumps(assistant))
    rewritten["tool_calls"][0]["function"]["arguments"] = '{"command":"echo hello > out.txt"}'
    client.chat.completions.create(
        model="vllm-ok",
        messages=[*faithful, rewritten, {"role": "tool", "tool_call_id": tc.id, "content": "ok"}],
        tools=[CHAT_BASH],
    )
    rows = calls(front[1], 3, episode=key)
    assert [r["token_faithful"] for r in rows] == [True, True, False]
    assert "extends" in rows[1]["token_faithful_reason"]
    assert "diverges" in rows[2]["token_faithful_reason"]


# --- rate limits, encodings, unreachable, broken ---------------------------------------------------


@pytest.mark.parametrize("caller", ["chat", "anthropic"])
@pytest.mark.parametrize("upstream", ["vllm", "claude"])
def test_rate_limit_headers_reach_the_client(front, caller, upstream):
    model = f"{upstream}-rate-limited"
    if caller == "chat":
        client, key = _openai(front)
        with pytest.raises(openai.RateLimitError) as err:
            _chat(client, model)
        assert err.value.body["message"] == "rate limit reached; retry after 7 s"
    else:
        client, key = _anthropic(front)
        with pytest.raises(anthropic.RateLimitError) as err:
            _messages(client, model)
        assert err.value.body["error"] == {
            "type": "rate_limit_error",
            "message": "rate limit reached; retry after 7 s",
        }
    headers = err.value.response.headers
    assert headers["retry-after"] == "7" and headers["x-ratelimit-remaining-requests"] == "0"
    row = _row(front, key)
    assert (row["status"], row["status_code"], row["upstream_status_code"]) == (
        "upstream_error",
        429,
        429,
    )
    assert json.loads(row["upstream_response_headers"])["retry-after"] == "7"


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("caller", ["chat", "anthropic"])
@pytest.mark.parametrize("upstream", ["vllm", "claude"])
def test_a_request_longer_than_the_context_is_recorded_apart(front, caller, upstream, stream):
    """The engine's 400 reaches the client as before, but the row says context_exceeded: the
    episode's own end, which runs don't count as an upstream failure (harnesses.runner.judge)."""
    model = f"{upstream}-too-long"
    if caller == "chat":
        client, key = _openai(front)
        with pytest.raises(openai.BadRequestError):
            _chat(client, model, stream)
    else:
        client, key = _anthropic(front)
        with pytest.raises(anthropic.BadRequestError):
            _messages(client, model, stream)
    row = _row(front, key)
    assert (row["status"], row["status_code"]) == ("context_exceeded", 400), row["error"]


def test_a_4xx_that_is_not_about_the_context_stays_an_upstream_error():
    from pomona.proxy.errors import context_exceeded

    assert context_exceeded(400, '{"error": {"code": "context_length_exceeded"}}')
    assert context_exceeded(400, None, "the prompt (8100 tokens) plus the reply (256 tokens) "
                            "exceeds the model's context of 8192 tokens")  # fmt: skip
    assert not context_exceeded(400, "invalid tool schema")
    assert not context_exceeded(500, "maximum context length")  # a server fault stays one
    assert not context_exceeded(None, "maximum context length")


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize(("caller", "model"), [("chat", "vllm-gzip"), ("anthropic", "vllm-gzip"),
                                               ("anthropic", "claude-gzip")])  # fmt: skip
def test_gzip_upstream_is_decoded_and_relayed(front, caller, model, stream):
    if caller == "chat":
        client, key = _openai(front)
        got = _chat(client, model, stream)
        if stream:
            args = "".join(
                tc.function.arguments or "" for c in got if c.choices
                for tc in c.choices[0].delta.tool_calls or []
            )  # fmt: skip
        else:
            args = got.choices[0].message.tool_calls[0].function.arguments
        assert json.loads(args) == {"command": COMMAND}
    else:
        client, key = _anthropic(front)
        block = _messages(client, model, stream).content[0]
        assert block.type == "tool_use" and block.input == {"command": COMMAND}
    row = _row(front, key)
    assert row["status"] == "ok"
    assert json.loads(row["upstream_response_headers"])["content-encoding"] == "gzip"
    assert COMMAND.replace(">", "") in row["upstream_response"].replace(">", "")  # decoded text


@pytest.mark.parametrize(("caller", "model"), [("chat", "vllm-down"), ("chat", "claude-down"),
                                               ("anthropic", "claude-down"), ("anthropic", "vllm-down")])  # fmt: skip
def test_unreachable_upstream_is_502_in_the_callers_dialect(front, caller, model):
    if caller == "chat":
        client, key = _openai(front)
        with pytest.raises(openai.APIStatusError) as err:
            _chat(client, model)
        assert err.value.body["code"] == "upstream_unreachable"
    else:
        client, key = _anthropic(front)
        with pytest.raises(anthropic.APIStatusError) as err:
            _messages(client, model)
        assert err.value.body["type"] == "error" and err.value.body["error"]["type"] == "api_error"
    assert err.value.status_code == 502
    row = _row(front, key)
    assert (row["status"], row["status_code"]) == ("upstream_error", 502) and "unreachable" in row[
        "error"
    ]


@pytest.mark.parametrize("model", ["vllm-broken", "claude-broken"])
def test_an_html_500_is_wrapped_in_the_callers_error_shape(front, model):
    client, key = _openai(front)
    with pytest.raises(openai.InternalServerError) as err:
        _chat(client, model)
    assert err.value.status_code == 500 and "Bad Gateway" in err.value.body["message"]
    assert _row(front, key)["status_code"] == 500


# --- cut streams, trailing events -----------------------------------------------------------------


@pytest.mark.parametrize(("caller", "model"), [("chat", "vllm-cut"), ("anthropic", "claude-cut"),
                                               ("anthropic", "vllm-cut")])  # fmt: skip
def test_a_cut_stream_ends_in_the_dialects_error_event(front, caller, model):
    if caller == "chat":
        client, key = _openai(front)
        with pytest.raises(openai.APIError):
            _chat(client, model, stream=True)
    else:
        client, key = _anthropic(front)
        with pytest.raises(anthropic.APIError):
            _messages(client, model, stream=True)
    row = _row(front, key)
    assert row["status"] == "upstream_error"
    last = row["client_response"].rstrip("\n").rsplit("\n\n", 1)[-1]
    assert '"error"' in last


def test_a_whole_body_cut_short_is_502(front):
    client, key = _openai(front)
    with pytest.raises(openai.APIStatusError) as err:
        _chat(client, "vllm-cut")
    assert err.value.status_code == 502 and err.value.body["code"] == "upstream_bad_response"
    assert _row(front, key)["status"] == "upstream_error"


def test_nothing_is_sent_after_the_terminal_event(front):
    proxy, _ = front
    ep = proxy.open_episode()
    with httpx.stream(
        "POST",
        f"{ep['base_url']}/chat/completions",
        json={"model": "vllm-trailing", "messages": MESSAGES, "tools": [CHAT_BASH], "stream": True},
    ) as r:
        got = r.read()
    assert got.endswith(b"data: [DONE]\n\n") and got.count(b"[DONE]") == 1 and b"junk" not in got
    row = _row(front, ep["key"])
    assert row["status"] == "ok" and row["client_response"].encode() == got


@pytest.mark.parametrize("caller", ["chat", "anthropic"])
def test_the_record_keeps_the_upstream_stream_to_its_final_event(front, caller):
    """LiteLLM stops reading an Anthropic stream at its finish reason; when `message_stop` comes
    in a later read than `message_delta`, the record still holds it (what the upstream sent)."""
    if caller == "chat":
        client, key = _openai(front)
        _chat(client, "claude-spaced", stream=True)
    else:
        client, key = _anthropic(front)
        _messages(client, "vllm-spaced", stream=True)
    row = _row(front, key)
    assert row["status"] == "ok" and row["upstream"] == "litellm"
    last = row["upstream_response"].rstrip("\n").rsplit("\n\n", 1)[-1]
    assert last in ('event: message_stop\ndata: {"type":"message_stop"}', "data: [DONE]")


# --- time limits, and clients that leave -------------------------------------------------------------


@pytest.mark.parametrize("caller", ["chat", "anthropic"])
def test_read_timeout_is_504_and_the_upstream_call_is_dropped(front, fakes, caller):
    before = fakes["chat"].cancelled.count("slow")
    if caller == "chat":
        client, key = _openai(front)
        with pytest.raises(openai.APIStatusError) as err:
            _chat(client, "vllm-slow")
        assert err.value.body["code"] == "upstream_timeout"
    else:
        client, key = _anthropic(front)
        with pytest.raises(anthropic.APIStatusError) as err:
            _messages(client, "vllm-slow")
        assert err.value.body["error"]["type"] == "timeout_error"
    assert err.value.status_code == 504
    assert _row(front, key)["status_code"] == 504
    _eventually(lambda: fakes["chat"].cancelled.count("slow") > before)


def test_total_timeout_cuts_a_stream_that_stalls(front, fakes):
    client, key = _openai(front)
    with pytest.raises(openai.APIError, match="timed out"):
        _chat(client, "vllm-stall", stream=True)
    row = _row(front, key)
    assert row["status"] == "upstream_error" and "timed out" in row["error"]
    _eventually(lambda: "stall" in fakes["chat"].cancelled)


@pytest.mark.parametrize(("caller", "model", "fake"), [("chat", "vllm-hang", "chat"),
                                                       ("anthropic", "vllm-hang", "chat"),
                                                       ("anthropic", "claude-hang", "anthropic")])  # fmt: skip
def test_a_client_that_leaves_cancels_the_upstream_call(front, fakes, caller, model, fake):
    """A non-streaming client gives up: the row says incomplete, and the upstream sees the
    proxy hang up too (nothing keeps generating for nobody)."""
    before = fakes[fake].cancelled.count("hang")
    if caller == "chat":
        client, key = _openai(front, timeout=1.0)
        with pytest.raises(openai.APITimeoutError):
            _chat(client, model)
    else:
        client, key = _anthropic(front, timeout=1.0)
        with pytest.raises(anthropic.APITimeoutError):
            _messages(client, model)
    row = _row(front, key)
    assert row["status"] == "incomplete" and "disconnected" in row["error"]
    _eventually(lambda: fakes[fake].cancelled.count("hang") > before)


def test_a_client_that_leaves_mid_stream_is_incomplete(front, fakes):
    proxy, _ = front
    ep = proxy.open_episode()
    with httpx.stream(
        "POST",
        f"{ep['base_url']}/messages",
        json={"model": "claude-stall", "max_tokens": 5, "messages": MESSAGES, "stream": True},
    ) as r:
        next(r.iter_raw())  # the first event arrived; now hang up
    assert _row(front, ep["key"])["status"] == "incomplete"


def _eventually(check, timeout: float = 30.0) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "the condition never held"
        time.sleep(0.05)


# --- configuration -----------------------------------------------------------------------------------


def test_timeouts_from_yaml_override_the_defaults(tmp_path):
    path = tmp_path / "models.yaml"
    path.write_text(textwrap.dedent("""
        model_list:
          - model_name: a
            litellm_params: {model: hosted_vllm/a, api_base: "http://x/v1", timeout: 30}
          - model_name: b
            litellm_params: {model: anthropic/b}
            model_info: {pomona: {timeouts: {connect: 2, read: null}}}
    """))  # fmt: skip
    config = ProxyConfig.from_yaml(path, timeouts=Timeouts(connect=5, read=60, total=None))
    a, b = config.route("a"), config.route("b")
    assert a.timeouts == Timeouts(connect=5, read=60, total=30) and "timeout" not in a.params
    assert b.timeouts == Timeouts(connect=2, read=None, total=None)
    path.write_text("model_list: [{model_name: c, litellm_params: {model: x}, "
                    "model_info: {pomona: {timeouts: {read: -1}}}}]")  # fmt: skip
    with pytest.raises(ValueError, match="positive"):
        ProxyConfig.from_yaml(path)
