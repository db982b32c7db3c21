"""Fixtures: a recording proxy on a free port, writing to a fresh trajectory directory."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pomona.proxy import ProxyConfig, ProxyServer


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    return tmp_path / "runs"


@pytest.fixture
def proxy(runs: Path) -> Iterator[ProxyServer]:
    with ProxyServer(ProxyConfig(trajectories=runs)) as p:
        yield p
