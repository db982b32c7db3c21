"""Planted credentials never reach the store: every file of it is searched for each one, under
every name a client, a harness or a model list may give it, through every kind of call."""

from __future__ import annotations

import httpx
import pytest
from proxy_helpers import ANTHROPIC_BASH, CHAT_BASH, calls

from pomona.proxy import ProxyConfig, ProxyServer
from pomona.proxy.testing import FakeUpstream

HEADERS = ("authorization", "x-api-key", "api-key", "api_key", "openai-api-key", "x-auth-token",
           "cookie", "proxy-authorization")  # fmt: skip
FIELDS = ("api_key", "openai_api_key", "apiKey", "password", "client_secret", "access_token",
          "x-auth-token", "token")  # fmt: skip
UPSTREAM_KEY = "sk-upstream-planted-0000"


def planted(where: str, name: str) -> str:
    return f"sk-planted-{where}-{name.replace('_', '-').lower()}-0123456789"


@pytest.fixture
def setup(tmp_path):
    runs = tmp_path / "runs"
    with FakeUpstream("chat") as vllm:
        entry = {"model_name": "qwen", "litellm_params": {
            "model": "hosted_vllm/qwen", "api_base": vllm.base_url, "api_key": UPSTREAM_KEY}}  # fmt: skip
        with ProxyServer(ProxyConfig.from_model_list([entry], trajectories=runs)) as proxy:
            yield proxy, runs, vllm


@pytest.mark.parametrize("model", ["scripted", "qwen"], ids=["scripted", "upstream"])
def test_no_planted_secret_reaches_any_file(setup, model):
    proxy, runs, vllm = setup
    # a run named with a secret the metadata holds: blanked in the run column of every table
    meta = {name: planted("meta", name) for name in FIELDS} | {
        "task": "t1",
        "run": "r-" + planted("meta", "api_key"),
    }
    ep = proxy.open_episode(model=model, script=["ls"], metadata=meta)
    headers = {h: planted("header", h) for h in HEADERS}
    headers["authorization"] = "Bearer " + planted("header", "authorization")
    fields = {name: planted("body", name) for name in FIELDS}
    chat = {"model": "m", "messages": [{"role": "user", "content": "go"}], "tools": [CHAT_BASH],
            **fields, "metadata": {"nested": dict(fields)}}  # fmt: skip
    anth = {"model": "m", "max_tokens": 20, "messages": [{"role": "user", "content": "go"}],
            "tools": [ANTHROPIC_BASH], "metadata": {"user_id": "u", **fields}}  # fmt: skip
    for path, body in (("/chat/completions", chat), ("/messages", anth)):
        for stream in (False, True):
            r = httpx.post(
                f"{ep['base_url']}{path}",
                json={**body, "stream": stream},
                headers=headers,
                timeout=120,  # the first translated call imports LiteLLM
            )
            assert r.status_code == 200, r.text
    proxy.close_episode(ep["key"], failure_message=f"upstream said {UPSTREAM_KEY}")
    rows = calls(runs, 4, episode=ep["key"])
    assert len(rows) == 4 and all(r["status"] == "ok" for r in rows)
    assert {(r["run"], r["task"]) for r in rows} == {("r-[REDACTED]", "t1")}
    if model == "qwen":  # the upstream got the route's key, none of the caller's credentials
        assert all(s.headers["authorization"] == f"Bearer {UPSTREAM_KEY}" for s in vllm.seen)
        assert not any(h in s.headers for s in vllm.seen for h in HEADERS[2:])
        assert rows[0]["upstream_request"] is not None
    blob = b"".join(p.read_bytes() for p in runs.iterdir())
    secrets = [*headers.values(), *fields.values(), *meta.values(), UPSTREAM_KEY]
    leaked = [s for s in secrets if s != "t1" and s.encode() in blob]
    assert not leaked
    assert b"[REDACTED]" in blob and b"t1" in blob  # redacted, not dropped; the rest is kept
