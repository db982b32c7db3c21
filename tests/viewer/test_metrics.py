"""`/metrics` of `pomona proxy` and `pomona serve`, scraped and parsed with prometheus_client's own
parser after known work: the counts must be exactly that work, and agree with the store."""

from __future__ import annotations

import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import anthropic
import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from pomona import trajectories
from pomona.orchestrator.server.app import build
from pomona.orchestrator.server.timing import Timing
from pomona.proxy import ProxyConfig, ProxyServer
from pomona.proxy.recording import CallRecord
from tests.service.harness import KEYS, server_thread, unmount

TOOLS = [{"type": "function", "function": {"name": "bash", "parameters": {
    "type": "object", "properties": {"command": {"type": "string"}}}}}]  # fmt: skip


def scrape(url: str, **headers: str) -> dict[tuple[str, frozenset], float]:
    """Every sample of /metrics as {(name, labels): value}."""
    response = httpx.get(url + "/metrics", headers=headers, timeout=30)
    response.raise_for_status()
    assert response.headers["content-type"].startswith("text/plain")
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(response.text)
        for s in family.samples
    }


def value(samples: dict, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


# --- the proxy ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def upstream() -> Iterator[str]:
    """A real upstream for pass-through routes: another proxy serving the scripted model."""
    with ProxyServer(ProxyConfig(default_script=["echo upstream"])) as server:
        yield server.url


def far_config(upstream: str, trajectories: Path) -> ProxyConfig:
    """A proxy whose model `far` is passed through to `upstream`."""
    route = {"model": "openai/scripted", "api_base": upstream + "/v1", "api_key": "k"}
    return ProxyConfig.from_model_list(
        [{"model_name": "far", "litellm_params": route}], trajectories=trajectories
    )


def test_proxy_metrics_count_calls_tokens_and_writes(upstream: str, tmp_path: Path) -> None:
    with ProxyServer(far_config(upstream, tmp_path)) as proxy:
        ep = proxy.open_episode(model="scripted", script=["ls", "pwd"])
        chat = openai.OpenAI(base_url=ep["base_url"], api_key="k", max_retries=0)
        chat.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "go"}], tools=TOOLS
        )
        for _ in chat.chat.completions.create(model="m", messages=[{"role": "user", "content": "go"}],
                                              tools=TOOLS, stream=True):  # fmt: skip
            pass
        claude = anthropic.Anthropic(base_url=ep["anthropic_base_url"], api_key="k", max_retries=0)
        claude.messages.create(
            model="m", max_tokens=64, messages=[{"role": "user", "content": "hi"}]
        )
        bad = httpx.post(ep["base_url"] + "/chat/completions", content=b"{not json",
                         headers={"content-type": "application/json"})  # fmt: skip
        assert bad.status_code == 400
        far = openai.OpenAI(base_url=proxy.url + "/v1", api_key="k", max_retries=0)
        far.chat.completions.create(
            model="far", messages=[{"role": "user", "content": "go"}], tools=TOOLS
        )
        for _ in far.chat.completions.create(model="far", messages=[{"role": "user", "content": "go"}],
                                             tools=TOOLS, stream=True):  # fmt: skip
            pass
        samples = scrape(proxy.url)

    rows = trajectories.read(tmp_path, "calls").to_pylist()
    assert len(rows) == 6
    recorded = Counter((r["upstream"] or "none", r["dialect"], r["status"]) for r in rows)
    assert recorded == {("scripted", "chat", "ok"): 2, ("scripted", "anthropic", "ok"): 1,
                        ("none", "chat", "client_error"): 1, ("passthrough", "chat", "ok"): 2}  # fmt: skip
    for (up, dialect, status), n in recorded.items():
        assert (
            value(samples, "pomona_proxy_calls_total", upstream=up, dialect=dialect, status=status)
            == n
        )
    for direction, field in (("in", "input_tokens"), ("out", "output_tokens")):
        for up in ("scripted", "passthrough"):
            expected = sum((r["usage"] or {}).get(field) or 0 for r in rows if r["upstream"] == up)
            assert (
                value(samples, "pomona_proxy_tokens_total", direction=direction, upstream=up)
                == expected
            )
    assert value(samples, "pomona_proxy_store_write_seconds_count") == 6
    assert (
        value(samples, "pomona_proxy_call_seconds_count", upstream="scripted", dialect="chat") == 2
    )
    # added latency is measured against a real upstream only: both pass-through calls
    assert (
        value(samples, "pomona_proxy_added_seconds_count", upstream="passthrough", dialect="chat")
        == 2
    )
    assert (
        value(samples, "pomona_proxy_added_seconds_count", upstream="scripted", dialect="chat") == 0
    )


def test_a_proxy_that_records_nothing_still_counts_and_guards_its_metrics() -> None:
    with ProxyServer(ProxyConfig(api_keys={"ops": "ops-key"})) as proxy:
        ep = proxy.open_episode(model="scripted", script=["ls"])
        client = openai.OpenAI(base_url=ep["base_url"], api_key="k", max_retries=0)
        client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "go"}], tools=TOOLS
        )
        assert httpx.get(proxy.url + "/metrics").status_code == 401
        assert httpx.get(proxy.url + "/metrics", headers={"x-api-key": "wrong"}).status_code == 401
        samples = scrape(proxy.url, authorization="Bearer ops-key")
    assert (
        value(samples, "pomona_proxy_calls_total", upstream="scripted", dialect="chat", status="ok")
        == 1
    )
    assert value(samples, "pomona_proxy_store_write_seconds_count") == 0


class Observer:
    """A CallObserver of the test's own."""

    def __init__(self) -> None:
        self.records: list[CallRecord] = []

    def recorded(self, call: CallRecord) -> None:
        self.records.append(call)


def test_observers_the_app_is_given_see_each_call_with_the_upstreams_own_timing(
    upstream: str, tmp_path: Path
) -> None:
    """The metrics are one observer of the model-call path; the upstream layer times the
    upstream itself (its methods are its own, not replaced at runtime)."""
    seen = Observer()
    with ProxyServer(far_config(upstream, tmp_path), observers=[seen]) as proxy:
        assert "call" not in vars(proxy.state.upstreams)
        ep = proxy.open_episode(model="scripted", script=["ls"])
        chat = openai.OpenAI(base_url=ep["base_url"], api_key="k", max_retries=0)
        chat.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "go"}], tools=TOOLS
        )
        far = openai.OpenAI(base_url=proxy.url + "/v1", api_key="k", max_retries=0)
        for _ in far.chat.completions.create(model="far", messages=[{"role": "user", "content": "go"}],
                                             tools=TOOLS, stream=True):  # fmt: skip
            pass
        samples = scrape(proxy.url)
    stored = trajectories.read(tmp_path, "calls").to_pylist()
    assert [r.row["call_id"] for r in seen.records] == [r["call_id"] for r in stored]
    scripted, passed = seen.records
    assert scripted.row["upstream"] == "scripted" and scripted.upstream_ttfb_s is None
    assert passed.row["upstream"] == "passthrough" and passed.upstream_ttfb_s is not None
    # the upstream's first byte came within the proxy's own wait for it
    assert 0 <= passed.upstream_ttfb_s <= passed.row["ttfb_ms"] / 1000
    assert all(r.write_s is not None for r in seen.records)
    added = value(
        samples, "pomona_proxy_added_seconds_count", upstream="passthrough", dialect="chat"
    )
    assert added == 1


# --- the sandbox service --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def service() -> Iterator[str]:
    """`pomona serve`'s app on the local runtime, one exec slot and no queue (so a second exec
    while one runs is turned away at once, deterministically)."""
    state = Path(tempfile.mkdtemp(prefix="pomona-metrics-"))
    app = build("local", str(state), api_keys=KEYS, admins={"admin"}, max_execs=1, queue=0,
                timing=Timing(maintenance_interval=0.2, replica_ttl=1.5, lock_ttl=3.0))  # fmt: skip
    with server_thread(app) as url:
        try:
            yield url
        finally:
            with httpx.Client(
                base_url=url, headers={"X-API-Key": KEYS["admin"]}, timeout=60
            ) as admin:
                for sandbox in admin.get("/sandboxes").json():
                    admin.delete(f"/sandboxes/{sandbox['id']}")
    unmount(state)


def test_service_metrics_after_known_work(service: str) -> None:
    with httpx.Client(base_url=service, headers={"X-API-Key": KEYS["alice"]}, timeout=120) as alice:
        ids = [alice.post("/sandboxes", json={"image": "host", "network": "none"}).json()["id"]
               for _ in range(2)]  # fmt: skip
        for command in ("true", "echo hi", "exit 3"):
            r = alice.post(f"/sandboxes/{ids[0]}/exec", json={"command": command, "wait": True})
            assert r.status_code == 200, r.text
        # one exec slot, no queue: while `sleep` holds it, the next exec is refused with 503
        held = alice.post(f"/sandboxes/{ids[1]}/exec", json={"command": "sleep 600", "wait": False})
        refused = alice.post(f"/sandboxes/{ids[0]}/exec", json={"command": "true", "wait": True})
        assert refused.status_code == 503 and refused.json()["error"] == "Overloaded"
        alice.post(f"/jobs/{held.json()['job_id']}/cancel").raise_for_status()
        assert alice.delete(f"/sandboxes/{ids[1]}").status_code == 200
        assert (
            httpx.get(service + "/metrics", headers={"X-API-Key": KEYS["alice"]}).status_code == 403
        )
    assert httpx.get(service + "/metrics").status_code == 401
    samples = scrape(service, authorization=f"Bearer {KEYS['admin']}")
    assert value(samples, "pomona_sandboxes", state="ready", runtime="local") == 1
    expected = {("create", "2xx"): 2, ("exec", "2xx"): 4, ("exec", "5xx"): 1, ("delete", "2xx"): 1}
    for (operation, status), n in expected.items():
        seen = value(
            samples, "pomona_service_operation_seconds_count", operation=operation, status=status
        )
        assert seen == n, (operation, status)
    assert value(samples, "pomona_service_admission_rejections_total", operation="exec") == 1
