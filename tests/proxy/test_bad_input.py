"""Refusals and bad input: a 4xx in the caller's own dialect, and the proxy keeps serving."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import anthropic
import httpx
import openai
import pytest
from proxy_helpers import CHAT_BASH, calls

from pomona import trajectories
from pomona.proxy import ProxyConfig, ProxyServer
from pomona.proxy.errors import EpisodeExists

OPENAI_PATHS = ("/chat/completions", "/responses")


def _is_openai_error(body: dict) -> bool:
    return set(body["error"]) >= {"message", "type", "code"}


def _is_anthropic_error(body: dict) -> bool:
    return body["type"] == "error" and set(body["error"]) == {"type", "message"}


@pytest.mark.parametrize("path", [*OPENAI_PATHS, "/messages"])
def test_unknown_and_closed_keys_are_refused_in_dialect(proxy, runs, path):
    check = _is_anthropic_error if path == "/messages" else _is_openai_error
    r = httpx.post(f"{proxy.url}/e/no-such-key/v1{path}", json={"model": "m", "messages": []})
    assert r.status_code == 404 and check(r.json())
    ep = proxy.open_episode(model="scripted")
    proxy.close_episode(ep["key"], reward=0.0)
    r = httpx.post(f"{ep['base_url']}{path}", json={"model": "m", "messages": []})
    assert r.status_code == 410 and check(r.json()) and "closed" in r.text
    assert calls(runs, 1)[0]["status"] == "refused"


def test_sdks_see_refusals_as_their_own_errors(proxy):
    with pytest.raises(openai.NotFoundError):
        openai.OpenAI(
            base_url=f"{proxy.url}/e/nope/v1", api_key="k", max_retries=0
        ).chat.completions.create(model="m", messages=[])
    with pytest.raises(anthropic.NotFoundError) as err:
        anthropic.Anthropic(
            base_url=f"{proxy.url}/e/nope", api_key="k", max_retries=0
        ).messages.create(model="m", max_tokens=1, messages=[])
    assert err.value.body["error"]["type"] == "not_found_error"


@pytest.mark.parametrize(
    ("content", "ctype", "status"),
    [
        (b"{not json", "application/json", 400),
        (b"[1, 2]", "application/json", 400),
        (b"model=m", "application/x-www-form-urlencoded", 415),
    ],
)
@pytest.mark.parametrize("path", [*OPENAI_PATHS, "/messages"])
def test_bad_bodies_get_dialect_4xx_and_are_recorded(proxy, runs, content, ctype, status, path):
    ep = proxy.open_episode(model="scripted")
    r = httpx.post(f"{ep['base_url']}{path}", content=content, headers={"content-type": ctype})
    assert r.status_code == status
    assert (_is_anthropic_error if path == "/messages" else _is_openai_error)(r.json())
    (row,) = calls(runs, 1)
    assert row["status"] == "client_error" and row["status_code"] == status
    assert json.loads(row["client_response"]) == r.json()  # the row holds what the client got


def test_oversized_body_is_refused_and_proxy_keeps_serving(runs):
    with ProxyServer(ProxyConfig(trajectories=runs, max_body_bytes=1000)) as proxy:
        ep = proxy.open_episode(model="scripted", script=["ls"])
        r = httpx.post(
            f"{ep['base_url']}/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": "x" * 5000}]},
        )
        assert r.status_code == 413 and r.json()["error"]["type"] == "request_too_large"
        ok = openai.OpenAI(base_url=ep["base_url"], api_key="k").chat.completions.create(
            model="m", messages=[], tools=[CHAT_BASH]
        )
        assert ok.choices[0].message.tool_calls


def test_unknown_model_outside_the_model_list(proxy):
    r = httpx.post(f"{proxy.url}/v1/chat/completions", json={"model": "gpt-nope", "messages": []})
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"


def test_probes_are_answered_harmlessly(proxy):
    assert httpx.head(f"{proxy.url}/").status_code == 200
    for path in ("/api/tags", "/v1/props", "/props", "/version", "/nonsense/path"):
        r = httpx.get(f"{proxy.url}{path}")
        assert r.status_code == 404 and r.json()["error"]["type"] == "not_found"
    ep = proxy.open_episode(model="scripted")
    for url in (f"{proxy.url}/v1/models", f"{proxy.url}/models", f"{ep['base_url']}/models"):
        body = httpx.get(url).json()
        assert (
            body["object"] == "list"
            and body["data"][0]["id"] == "scripted"
            and body["has_more"] is False
        )
    assert [m.id for m in openai.OpenAI(base_url=ep["base_url"], api_key="k").models.list()] == [
        "scripted"
    ]
    assert httpx.get(f"{proxy.url}/e/no-such-key/v1/models").status_code == 404
    r = httpx.post(
        f"{ep['anthropic_base_url']}/v1/messages/count_tokens", json={"model": "m", "messages": []}
    )
    assert r.json()["input_tokens"] >= 1
    assert httpx.get(f"{ep['base_url']}/responses").status_code == 405  # Codex's WebSocket probe


def test_sigkill_of_the_proxy_keeps_every_completed_call(tmp_path):
    runs = tmp_path / "runs"
    port = _free_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "pomona.proxy", "--port", str(port), "--trajectories", str(runs)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    stop, threads = threading.Event(), []
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(f"{base}/healthz")
                break
            except httpx.HTTPError:
                assert time.monotonic() < deadline and proc.poll() is None, (
                    "the proxy did not start"
                )
                time.sleep(0.05)
        ep = httpx.post(f"{base}/episodes", json={"model": "scripted", "script": ["ls"]}).json()
        done: list[str] = []  # call ids the client saw answered, in completion order

        def load() -> None:
            client = openai.OpenAI(base_url=ep["base_url"], api_key="k", max_retries=0)
            while not stop.is_set():
                try:
                    r = client.chat.completions.create(
                        model="m", messages=[{"role": "user", "content": "x"}], tools=[CHAT_BASH]
                    )
                except openai.APIError:
                    return
                done.append(r.id)

        threads += [threading.Thread(target=load) for _ in range(4)]
        for t in threads:
            t.start()
        while len(done) < 100:
            time.sleep(0.005)
        answered = list(done)  # every one of these was recorded before it was answered
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        stop.set()
    for t in threads:
        t.join()
    table, report = trajectories.read_with_report(runs, "calls")
    recorded = {json.loads(r)["id"] for r in table.column("response").to_pylist()}
    assert set(answered) <= recorded
    assert report.rows == table.num_rows  # a torn tail, if any, was dropped and reported


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- bodies that used to reach the proxy's own code ---------------------------------------------

DEEP = b'{"model": "scripted", "messages": ' + b"[" * 5000 + b"]" * 5000 + b"}"
BAD_BODIES = {
    "model-object": {"model": {}, "messages": []},
    "tools-number": {"model": "m", "messages": [], "tools": 5},
    "tool-schema": {"model": "m", "messages": [], "tools": [
        {"type": "function", "function": {"name": "bash", "parameters": {"properties": {"command": 5}}}},
        {"name": "Bash", "input_schema": {"properties": {"command": 5}}},
        {"type": "function", "name": "bash", "parameters": {"properties": {"command": 5}}}]},
    "stream-options": {"model": "m", "messages": [], "stream_options": 1},
    "messages-string": {"model": "m", "messages": "hi", "input": 7},
}  # fmt: skip


@pytest.mark.parametrize("case", [*BAD_BODIES, "deep"])
@pytest.mark.parametrize("path", [*OPENAI_PATHS, "/messages"])
def test_malformed_requests_get_a_dialect_400_and_a_row(proxy, runs, case, path):
    if case == "stream-options" and path != "/chat/completions":
        pytest.skip("stream_options is a chat field")
    ep = proxy.open_episode(model="scripted", script=["ls"])
    content = DEEP if case == "deep" else json.dumps(BAD_BODIES[case]).encode()
    r = httpx.post(
        f"{ep['base_url']}{path}", content=content, headers={"content-type": "application/json"}
    )
    assert r.status_code == 400, r.text
    assert (_is_anthropic_error if path == "/messages" else _is_openai_error)(r.json())
    if case != "deep":  # the message names the field at fault
        assert any(f in r.text for f in ("model", "tools", "stream_options", "messages", "input"))
    (row,) = calls(runs, 1, episode=ep["key"])
    assert row["status"] == "client_error" and row["status_code"] == 400


def test_policy_long_poll_rejects_a_negative_timeout(proxy):
    ep = httpx.post(f"{proxy.url}/episodes", json={"model": "policy"}).json()
    for value in ("-1", "nan", "1e9"):
        r = httpx.get(f"{proxy.url}/episodes/{ep['key']}/calls/next", params={"timeout": value})
        assert r.status_code == 400 and "timeout" in r.json()["error"]["message"]


@pytest.mark.parametrize(
    "spec", [{"key": "../x"}, {"script": [1]}, {"tool_less_calls": "maybe"}, {"policy_timeout": -1},
             {"metadata": []}, {"scirpt": ["ls"]}, {"metadata": {"run": 7}},
             {"metadata": {"task": {"id": "t"}}}]
)  # fmt: skip
def test_bad_episode_specs_are_400(proxy, spec):
    r = httpx.post(f"{proxy.url}/episodes", json=spec)
    assert r.status_code == 400 and _is_openai_error(r.json())
    if "metadata" in spec and spec["metadata"]:  # said at opening, not when the row is written
        assert "must be strings" in r.json()["error"]["message"]


def test_in_process_episodes_take_what_post_episodes_takes(proxy):
    for bad in ({"key": "../x"}, {"script": [1]}, {"tool_less_calls": "maybe"}):
        with pytest.raises(ValueError):
            proxy.open_episode(**bad)
    proxy.open_episode(key="taken")
    with pytest.raises(EpisodeExists):
        proxy.open_episode(key="taken")
    assert httpx.post(f"{proxy.url}/episodes", json={"key": "taken"}).status_code == 409
    ep = proxy.open_episode(model="scripted", script="ls\npwd", tool_less_calls="main")
    r = httpx.post(f"{ep['base_url']}/chat/completions", json={"model": "m", "messages": []})
    assert "```bash\nls" in r.json()["choices"][0]["message"]["content"]  # a turn, not a side call


def test_a_refused_close_leaves_the_episode_open_and_a_corrected_retry_writes_it(proxy, runs):
    ep = proxy.open_episode(model="scripted")
    close = f"{proxy.url}/episodes/{ep['key']}/close"
    for bad in ({"reward": "high"}, {"reward": float("inf")}, {"failure_kind": "oops"},
                {"artifacts": [{"name": 1}]}, {"rewrad": 1.0}, [1]):  # fmt: skip
        r = httpx.post(close, content=json.dumps(bad).replace("Infinity", "1e999"))
        assert r.status_code == 400 and _is_openai_error(r.json()), bad
        assert httpx.get(f"{proxy.url}/episodes/{ep['key']}").json()["closed"] is False
    with pytest.raises(ValueError, match="reward"):
        proxy.close_episode(ep["key"], reward="high")  # the in-process API refuses alike
    r = httpx.post(close, json={"reward": 0.5, "resolved": False, "artifacts": {"patch": "p"}})
    assert r.status_code == 200 and r.json()["closed"] is True
    (row,) = trajectories.read(runs, "episodes").to_pylist()
    assert row["reward"] == 0.5 and row["artifacts"] == [{"name": "patch", "uri": "p"}]
    assert httpx.post(close, json={"reward": 1.0}).status_code == 200  # idempotent: still one row
    assert trajectories.read(runs, "episodes").num_rows == 1


# --- API keys on the proxy's own routes ----------------------------------------------------------


def test_api_keys_guard_everything_but_episode_urls(runs):
    config = ProxyConfig(trajectories=runs, api_keys={"ci": "pk-proxy-key-123"})
    with ProxyServer(config) as proxy:
        assert httpx.post(f"{proxy.url}/episodes", json={}).status_code == 401
        bearer = {"authorization": "Bearer pk-proxy-key-123"}
        assert (
            httpx.post(
                f"{proxy.url}/episodes", json={}, headers={"authorization": "Bearer no"}
            ).status_code
            == 401
        )
        ep = httpx.post(f"{proxy.url}/episodes", json={"model": "scripted", "script": ["ls"]},
                        headers={"x-api-key": "pk-proxy-key-123"}).json()  # fmt: skip
        for method, path in (("GET", f"/episodes/{ep['key']}"), ("POST", f"/episodes/{ep['key']}/close"),
                             ("GET", "/v1/models"), ("GET", f"/episodes/{ep['key']}/calls/next")):  # fmt: skip
            assert httpx.request(method, proxy.url + path).status_code == 401, path
        with pytest.raises(anthropic.AuthenticationError):
            anthropic.Anthropic(base_url=proxy.url, api_key="wrong", max_retries=0).messages.create(
                model="scripted", max_tokens=5, messages=[{"role": "user", "content": "x"}]
            )
        ok = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key="pk-proxy-key-123")  # the SDK's key
        assert ok.chat.completions.create(model="scripted", messages=[], tools=[CHAT_BASH]).choices
        harness = openai.OpenAI(
            base_url=ep["base_url"], api_key="anything"
        )  # the episode URL is the credential
        assert harness.chat.completions.create(model="m", messages=[], tools=[CHAT_BASH]).choices
        assert httpx.get(f"{proxy.url}/episodes/{ep['key']}", headers=bearer).json()["calls"] == 1
    assert b"pk-proxy-key-123" not in b"".join(p.read_bytes() for p in runs.iterdir())
