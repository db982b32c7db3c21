"""Prometheus metrics of `pomona proxy`, on `GET /metrics`.

    pomona_proxy_calls_total{upstream, dialect, status}   model calls, counted when recorded
    pomona_proxy_tokens_total{direction, upstream}        input / output tokens the upstream reported
    pomona_proxy_call_seconds{upstream, dialect}          whole calls, as the client saw them
    pomona_proxy_added_seconds{upstream, dialect}         what the proxy adds before the client's
                                                          first byte: its time to first byte less
                                                          the upstream's own (real upstreams only)
    pomona_proxy_store_write_seconds                      appending one call's row to the store

`ProxyMetrics` is a `CallObserver` (recording.py) the app passes to its recorder: it counts each
call when its row is written (every call, answered or refused, ends in exactly one row), so the
numbers and the trajectories agree, and the upstream layer's own timing of the call
(`UpstreamCall.ttfb`) gives the time the proxy added. Each app has its own registry: several
proxies in one process keep their counts apart.
"""

from __future__ import annotations

from collections.abc import Sequence

from fastapi import FastAPI, Response, params
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Histogram, generate_latest
from prometheus_client import Counter as CounterMetric

from pomona.proxy.recording import CallRecord

LATENCY_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
    30,
    60,
    120,
)
ADDED_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1)
WRITE_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5)


class ProxyMetrics:
    """The proxy's metrics in a registry of their own; a CallObserver."""

    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        self.calls = CounterMetric("pomona_proxy_calls", "Model calls recorded",
                                   ["upstream", "dialect", "status"], registry=r)  # fmt: skip
        self.tokens = CounterMetric("pomona_proxy_tokens", "Tokens the upstream reported",
                                    ["direction", "upstream"], registry=r)  # fmt: skip
        self.seconds = Histogram("pomona_proxy_call_seconds", "Call latency seen by the client",
                                 ["upstream", "dialect"], buckets=LATENCY_BUCKETS, registry=r)  # fmt: skip
        self.added = Histogram(
            "pomona_proxy_added_seconds", "Time to first byte the proxy adds to the upstream's",
            ["upstream", "dialect"], buckets=ADDED_BUCKETS, registry=r,
        )  # fmt: skip
        self.write = Histogram("pomona_proxy_store_write_seconds", "Time to write one call row",
                               buckets=WRITE_BUCKETS, registry=r)  # fmt: skip

    def recorded(self, call: CallRecord) -> None:
        """Count one finished call from its row and timings."""
        row = call.row
        upstream, dialect = row.get("upstream") or "none", row.get("dialect") or "?"
        self.calls.labels(upstream, dialect, row.get("status") or "?").inc()
        usage = row.get("usage") or {}
        for direction, field in (("in", "input_tokens"), ("out", "output_tokens")):
            if usage.get(field):
                self.tokens.labels(direction, upstream).inc(usage[field])
        if row.get("latency_ms") is not None:
            self.seconds.labels(upstream, dialect).observe(row["latency_ms"] / 1000)
        if call.upstream_ttfb_s is not None and row.get("ttfb_ms") is not None:
            added = max(0.0, row["ttfb_ms"] / 1000 - call.upstream_ttfb_s)
            self.added.labels(upstream, dialect).observe(added)
        if call.write_s is not None:
            self.write.observe(call.write_s)


def add_metrics_route(
    app: FastAPI, metrics: ProxyMetrics, dependencies: Sequence[params.Depends] = ()
) -> None:
    """Serve `GET /metrics` behind `dependencies` (the API-key guard of the proxy's own routes)."""

    @app.get("/metrics", include_in_schema=False, dependencies=list(dependencies))
    async def scrape() -> Response:
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)
