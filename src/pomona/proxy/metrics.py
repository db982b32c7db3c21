"""Prometheus metrics of `pomona proxy`, on `GET /metrics`.

    pomona_proxy_calls_total{upstream, dialect, status}   model calls, counted when recorded
    pomona_proxy_tokens_total{direction, upstream}        input / output tokens the upstream reported
    pomona_proxy_call_seconds{upstream, dialect}          whole calls, as the client saw them
    pomona_proxy_added_seconds{upstream, dialect}         what the proxy adds before the client's
                                                          first byte: its time to first byte less
                                                          the upstream's own (real upstreams only)
    pomona_proxy_store_write_seconds                      appending one call's row to the store

Counting happens where the row is written (every call, answered or refused, ends in exactly one
row), through a decorator around the calls writer, so the numbers and the trajectories agree.
Each app has its own registry: several proxies in one process keep their counts apart.
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping, Sequence
from typing import Any

from fastapi import FastAPI, Response, params
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Histogram, generate_latest
from prometheus_client import Counter as CounterMetric

from pomona.proxy.recording import RowWriter
from pomona.proxy.state import ProxyState
from pomona.proxy.upstream import Outcome, UpstreamCall

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

_upstream_clock: contextvars.ContextVar[dict[str, float] | None] = contextvars.ContextVar(
    "pomona_upstream_clock", default=None
)
"""When the current request's upstream call began and sent its first byte (perf_counter)."""


class ProxyMetrics:
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

    def observe(self, row: Mapping[str, Any]) -> None:
        """Count one finished call from its row."""
        upstream, dialect = row.get("upstream") or "none", row.get("dialect") or "?"
        self.calls.labels(upstream, dialect, row.get("status") or "?").inc()
        usage = row.get("usage") or {}
        for direction, field in (("in", "input_tokens"), ("out", "output_tokens")):
            if usage.get(field):
                self.tokens.labels(direction, upstream).inc(usage[field])
        if row.get("latency_ms") is not None:
            self.seconds.labels(upstream, dialect).observe(row["latency_ms"] / 1000)
        clock = _upstream_clock.get()
        if clock and "first_byte" in clock and row.get("ttfb_ms") is not None:
            upstream_ttfb = clock["first_byte"] - clock["start"]
            added = max(0.0, row["ttfb_ms"] / 1000 - upstream_ttfb)
            self.added.labels(upstream, dialect).observe(added)


class MeteredWriter:
    """The calls writer, counting each row and timing its write (a no-op store when `inner` is
    None, so a proxy that records nothing is still measured)."""

    def __init__(self, inner: RowWriter | None, metrics: ProxyMetrics):
        self.inner, self.metrics = inner, metrics

    def write(self, row: Mapping[str, Any]) -> None:
        self.metrics.observe(row)
        if self.inner is not None:
            start = time.perf_counter()
            self.inner.write(row)
            self.metrics.write.observe(time.perf_counter() - start)

    def close(self) -> None:
        if self.inner is not None:
            self.inner.close()


UpstreamCalls = Callable[[UpstreamCall], Coroutine[Any, Any, Outcome]]


def _timed_upstream(call: UpstreamCalls) -> UpstreamCalls:
    """Upstreams.call, noting when the upstream began and when its first byte came back."""

    async def timed(upstream_call: UpstreamCall) -> Outcome:
        clock = {"start": time.perf_counter()}
        _upstream_clock.set(clock)
        outcome = await call(upstream_call)
        if outcome.stream is None:
            clock["first_byte"] = time.perf_counter()
        else:
            outcome.stream = _first_byte(outcome.stream, clock)
        return outcome

    return timed


async def _first_byte(
    stream: AsyncIterator[bytes], clock: dict[str, float]
) -> AsyncIterator[bytes]:
    async for chunk in stream:
        clock.setdefault("first_byte", time.perf_counter())
        yield chunk


def instrument(
    app: FastAPI, state: ProxyState, dependencies: Sequence[params.Depends] = ()
) -> ProxyMetrics:
    """Meter the proxy app's recorder and upstream calls, and serve `/metrics` behind
    `dependencies` (the API-key guard of the proxy's own routes)."""
    metrics = ProxyMetrics()
    state.recorder.calls = MeteredWriter(state.recorder.calls, metrics)
    state.upstreams.call = _timed_upstream(state.upstreams.call)  # type: ignore[method-assign,assignment]

    @app.get("/metrics", include_in_schema=False, dependencies=list(dependencies))
    async def scrape() -> Response:
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return metrics
