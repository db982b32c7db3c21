"""A private sandbox state directory per test session (the benchmarks' fixtures: these tests
never share the default one with whatever else runs on the machine); and every registry a
recipe adds to put back as it was after each test, so no toy leaks into the rest of the suite
(a toy harness once did: tests/harnesses then looked for its payload)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.benchmarks.conftest import client, state_dir  # noqa: F401 - fixtures, shared


@pytest.fixture(autouse=True)
def registries_as_they_were() -> Iterator[None]:
    from pomona.benchmarks import registry
    from pomona.harnesses import registry as harnesses
    from pomona.orchestrator import runtimes
    from pomona.proxy import upstream, upstreams  # noqa: F401 - upstreams adds the default kind

    tables = [harnesses._added, registry._REGISTRY, runtimes.RUNTIMES, upstream.KINDS]
    saved = [dict(t) for t in tables]
    yield
    for table, before in zip(tables, saved, strict=True):
        table.clear()
        table.update(before)
