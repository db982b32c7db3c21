"""Prometheus metrics of `pomona serve`, on `GET /metrics` (admin keys only when keys are set).

    pomona_sandboxes{state, runtime}                     sandboxes in the store, at scrape time
    pomona_service_operation_seconds{operation, status}  create, exec, exec_stream, delete, fork,
                                                         snapshot and apply_patch, as the client
                                                         sees them (exec without wait: the submit)
    pomona_service_admission_rejections_total{operation} requests turned away with 503 because
                                                         every slot and queue place was taken

Each app has its own registry, so several services in one process (tests, replicas) never mix
their counts. The sandbox gauge is read from the store when scraped, so it is the same on every
replica that shares one. The workers of one `pomona serve --workers N` count into one directory
(prometheus_client's multiprocess mode, one file per process), so a scrape, whichever worker
answers it, gives the service's totals, a killed worker's counts included.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Iterator

from fastapi import FastAPI, Request, Response
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Histogram,
    generate_latest,
    values,
)
from prometheus_client import Counter as CounterMetric
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.multiprocess import MultiProcessCollector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from pomona.errors import Overloaded, PermissionDenied
from pomona.orchestrator.server.coordinator import Coordinator
from pomona.orchestrator.server.errors import pomona_error
from pomona.orchestrator.server.state import ServiceState

OPERATIONS = {
    ("POST", "/sandboxes"): "create",
    ("DELETE", "/sandboxes/{sandbox_id}"): "delete",
    ("POST", "/sandboxes/{sandbox_id}/exec"): "exec",
    ("POST", "/sandboxes/{sandbox_id}/exec/stream"): "exec_stream",
    ("POST", "/sandboxes/{sandbox_id}/snapshot"): "snapshot",
    ("POST", "/snapshots/{snapshot_id}/fork"): "fork",
    ("POST", "/sandboxes/{sandbox_id}/apply_patch"): "apply_patch",
}
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900)


def operation_of(scope: Scope) -> str | None:
    route = scope.get("route")
    return OPERATIONS.get((scope.get("method", ""), getattr(route, "path", "")))


_shared_dir: str | None = None  # set in a worker of `pomona serve --workers N`


def count_across_processes(directory: str) -> None:
    """From now on this process counts into `directory`, shared with the service's other
    workers. Process-wide (prometheus_client keeps the choice in a global), so only for a
    process that serves one app: a worker of `pomona serve --workers N`."""
    global _shared_dir
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = directory  # where prometheus_client writes
    values.ValueClass = values.MultiProcessValue()
    _shared_dir = directory


class _SandboxCounts:
    """The pomona_sandboxes gauge: the store's sandboxes as last read, at scrape time."""

    def __init__(self) -> None:
        self.counts: Counter[tuple[str, str]] = Counter()

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "pomona_sandboxes", "Sandboxes in the store, by state and runtime",
            labels=["state", "runtime"],
        )  # fmt: skip
        for (state, runtime), n in sorted(self.counts.items()):
            family.add_metric([state, runtime], n)
        yield family


class ServiceMetrics:
    def __init__(self) -> None:
        # counted per process into the shared directory and read back from it, or kept here
        self.registry = CollectorRegistry()
        counting = None if _shared_dir else self.registry
        if _shared_dir:
            MultiProcessCollector(self.registry, _shared_dir)
        self.sandboxes = _SandboxCounts()
        self.registry.register(self.sandboxes)
        self.seconds = Histogram(
            "pomona_service_operation_seconds", "Time to answer a sandbox operation",
            ["operation", "status"], buckets=BUCKETS, registry=counting,
        )  # fmt: skip
        self.rejections = CounterMetric(
            "pomona_service_admission_rejections", "Requests refused by admission control (503)",
            ["operation"], registry=counting,
        )  # fmt: skip


class _Timer:
    """ASGI middleware: the time of each request of a named operation, by status class."""

    def __init__(self, app: ASGIApp, metrics: ServiceMetrics):
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        start, status = time.perf_counter(), 500

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            operation = operation_of(scope)
            if operation is not None:
                self.metrics.seconds.labels(operation, f"{status // 100}xx").observe(
                    time.perf_counter() - start
                )


def instrument(app: FastAPI, coordinator: Coordinator) -> ServiceMetrics:
    """Add `/metrics`, the operation timer and the admission-rejection count to the service."""
    metrics = ServiceMetrics()

    async def overloaded(request: Request, error: Exception) -> Response:
        metrics.rejections.labels(operation_of(request.scope) or "other").inc()
        return await pomona_error(request, error)

    app.add_exception_handler(Overloaded, overloaded)

    @app.get("/metrics", include_in_schema=False)
    async def scrape(request: Request) -> Response:
        header = request.headers.get("authorization", "")
        key = request.headers.get("x-api-key") or (
            header[7:] if header[:7].lower() == "bearer " else None
        )
        if not ServiceState.of(request.app).keys.check(key).admin:
            raise PermissionDenied("metrics cover every tenant: scrape with an admin key")
        metrics.sandboxes.counts = Counter(
            (r.status, r.runtime or "?") for r in await coordinator.store.list_sandboxes()
        )
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    app.add_middleware(_Timer, metrics=metrics)
    return metrics
