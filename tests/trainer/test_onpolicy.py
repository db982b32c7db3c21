"""Sampling pinned at the proxy, recorded per call, and the on-policy report of an export: a run
with a pinned and an unpinned model."""

from __future__ import annotations

import json

import openai
import pytest
from conftest import TOOLS, sdk_episode, tool_conversation

from pomona import trajectories
from pomona.proxy import ModelRoute, ProxyConfig, ProxyServer
from pomona.proxy.local_model import LocalModel, LocalModelServer
from pomona.proxy.sampling import Pin, apply
from pomona.trainer.export import export

pytestmark = pytest.mark.timeout(900)
PIN = {"temperature": 1.0, "top_p": 1.0, "max_tokens": 24, "seed": "per_call"}


def test_a_pinned_and_an_unpinned_model_in_one_run(tiny_model, tmp_path):
    start = [tool_conversation("ls")[:2]]
    pinned = {"model_info": {"pomona": {"pin": PIN}}}
    sdk_episode(tiny_model, tmp_path, start, model="pinned", route=pinned, run="r1")
    sdk_episode(tiny_model, tmp_path, start, model="free", run="r1")
    calls = [c for c in trajectories.read(tmp_path, "calls").to_pylist() if not c["side"]]
    by_model = {m: [c for c in calls if c["model"] == m] for m in ("pinned", "free")}
    for c in by_model["pinned"]:
        asked = json.loads(c["request"])  # what the client sent: temperature 0, no cap
        sent = json.loads(c["sampling"])  # what the engine got
        assert asked["temperature"] == 0.0 and "max_tokens" not in asked
        assert {k: sent[k] for k in ("temperature", "top_p", "max_tokens")} == {
            "temperature": 1.0, "top_p": 1.0, "max_tokens": 24}  # fmt: skip
        assert isinstance(sent["seed"], int) and sent["seed"] != 0  # a fresh seed, not the client's
        assert c["sampling_pinned"] is True and len(c["completion_token_ids"]) <= 24
    for c in by_model["free"]:
        assert json.loads(c["sampling"])["temperature"] == 0.0
        assert c["sampling_pinned"] is None and "no sampling pin" in c["sampling_pinned_reason"]

    report = export("rl", tmp_path, "hf", tmp_path / "out").counts["on_policy"]
    (run,) = report.values()
    trained = {m: sum(len(c["completion_token_ids"]) for c in rows) for m, rows in by_model.items()}
    assert run["trained_tokens"] == trained["pinned"] + trained["free"]
    assert run["on_policy_tokens"] == trained["pinned"] > 0
    assert run["off_policy"] == {"model 'free' has no sampling pin": trained["free"]}
    manifest = json.loads((tmp_path / "out" / "pomona-export.json").read_text())
    assert manifest["on_policy"]["r1"]["on_policy_tokens"] == trained["pinned"]


def test_a_pin_that_refuses_answers_400_in_the_callers_dialect(tiny_model, tmp_path):
    pin = {"temperature": 1.0, "conflict": "refuse", "side": "refuse"}
    with LocalModelServer(LocalModel(tiny_model, max_new_tokens=8)) as server, \
            ProxyServer(ProxyConfig(trajectories=tmp_path)) as proxy:  # fmt: skip
        proxy.config.models.append(ModelRoute.from_entry({"model_name": "tiny", "litellm_params": {
            "model": "hosted_vllm/tiny", "api_base": f"{server.url}/v1", "api_key": "x"},
            "model_info": {"pomona": {"pin": pin}}}))  # fmt: skip
        ep = proxy.open_episode(model="tiny")
        client = openai.OpenAI(base_url=ep["base_url"], api_key="x", max_retries=0)
        messages = tool_conversation("ls")[:2]
        with pytest.raises(openai.BadRequestError, match="temperature is pinned to 1.0"):
            client.chat.completions.create(model="tiny", messages=messages, tools=TOOLS,
                                           temperature=0.2)  # fmt: skip
        ok = client.chat.completions.create(model="tiny", messages=messages, tools=TOOLS)
        assert ok.choices[0].message is not None  # naming no temperature: the pin's is sent
        with pytest.raises(openai.BadRequestError, match="no auxiliary calls"):  # a title call
            client.chat.completions.create(
                model="tiny", messages=[{"role": "user", "content": "title?"}]
            )
        proxy.close_episode(ep["key"], reward=0.0)
    rows = sorted(trajectories.read(tmp_path, "calls").to_pylist(), key=lambda c: c["started_at"])
    assert [c["status"] for c in rows] == ["refused", "ok", "refused"]
    assert json.loads(rows[1]["sampling"])["temperature"] == 1.0 and rows[1]["sampling_pinned"]


def test_pins_are_checked_when_the_model_list_is_read():
    for bad, match in (({"temperature": "hot"}, "must be a number"), ({"conflict": "force"}, "no parameter"),
                       ({"top_p": 1, "conflict": "ask"}, "force or refuse"), ({"seed": 1.5}, "integer"),
                       ({"top_p": 1, "side": "maybe"}, "side must be"), ({"topk": 3}, "mapping")):  # fmt: skip
        with pytest.raises(ValueError, match=match):
            ModelRoute.from_entry({"model_name": "m", "litellm_params": {"model": "hosted_vllm/m"},
                                   "model_info": {"pomona": {"pin": bad}}})  # fmt: skip
    pin = Pin.parse({"max_tokens": 64, "seed": 3})
    # each dialect's own field for the reply length; a seed only where it reaches the engine
    assert apply(pin, "responses", {"max_output_tokens": 9}, side=False, seed_to=None) == {
        "max_output_tokens": 64}  # fmt: skip
    assert apply(pin, "chat", {"max_completion_tokens": 9}, side=False, seed_to="body") == {
        "max_completion_tokens": 64, "seed": 3}  # fmt: skip
    assert apply(pin, "anthropic", {"max_tokens": 9}, side=False, seed_to="extra_body") == {
        "max_tokens": 64, "extra_body": {"seed": 3}}  # fmt: skip
    allow = Pin.parse({"temperature": 1.0, "side": "allow"})
    body = {"temperature": 0.3}
    assert apply(allow, "chat", body, side=True, seed_to="body") is body
