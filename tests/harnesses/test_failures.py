"""How runs fail, judged from effects: a harness that hangs is stopped at its timeout and leaves a
usable sandbox; a harness whose model upstream is dead ends as `upstream`, never as success."""

from __future__ import annotations

from typing import Any

import pytest

from pomona import trajectories
from pomona.harnesses import run

pytestmark = pytest.mark.timeout(900)


def _episode(runs: Any, key: str) -> dict:
    rows = [e for e in trajectories.read(runs, "episodes").to_pylist() if e["episode"] == key]
    assert len(rows) == 1
    return rows[0]


def test_hanging_harness_is_stopped_at_its_timeout(
    need: Any, local_client: Any, sandbox_for: Any, proxy: Any, runs: Any
) -> None:
    need("pi")
    sb = sandbox_for(local_client)
    result = run("pi", "wait for it", sb, "scripted", proxy, script=["sleep 600"], timeout=6)
    assert result.timed_out and result.failure_kind == "timeout"
    assert 5 < result.seconds < 30
    assert result.calls >= 1  # it got as far as the tool call that hangs
    assert _episode(runs, result.episode)["failure_kind"] == "timeout"
    # the sandbox is still usable, and nothing of the run is left running in it
    assert sb.exec("echo alive", timeout=10).stdout == "alive\n"
    left = sb.exec(
        "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done "
        "| grep -c '^sleep 600'",
        timeout=10,
    )
    assert left.stdout.strip() == "0"


def test_dead_upstream_is_recorded_as_upstream(
    need: Any, local_client: Any, sandbox_for: Any, proxy: Any, runs: Any
) -> None:
    need("pi")
    sb = sandbox_for(local_client)
    result = run("pi", "create out.txt", sb, "dead", proxy, timeout=120)
    assert result.failure_kind == "upstream", result.failure_message
    assert not result.ok and not result.completed
    assert _episode(runs, result.episode)["failure_kind"] == "upstream"
    calls = [
        c for c in trajectories.read(runs, "calls").to_pylist() if c["episode"] == result.episode
    ]
    assert calls and all(c["status"] == "upstream_error" for c in calls)
    assert sb.exec("test -e out.txt").exit_code != 0
