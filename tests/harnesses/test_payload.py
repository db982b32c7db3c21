"""The tools payload: pinned versions, cached, read-only at /opt/pomona/tools, wrappers that run
in a sandbox whatever its PYTHONPATH or LD_LIBRARY_PATH, and a bin/ that holds only harnesses."""

from __future__ import annotations

import fcntl
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from pomona.harnesses import get, harnesses, payload, tools_mount
from pomona.harnesses.base import PypiInstall
from tests.harnesses.conftest import ALL

pytestmark = pytest.mark.timeout(900)


def test_installing_twice_does_nothing(unavailable: dict[str, str]) -> None:
    before = (payload.DEFAULT_ROOT / "VERSIONS").stat().st_mtime
    t0 = time.monotonic()
    report = payload.install(ALL)
    assert report.installed == {} and report.failed == {}
    assert set(report.cached) == set(ALL) - set(unavailable)
    assert time.monotonic() - t0 < 5
    assert (payload.DEFAULT_ROOT / "VERSIONS").stat().st_mtime >= before


def test_an_installed_harness_never_waits_for_anothers_install(
    unavailable: dict[str, str], tmp_path: Path
) -> None:
    """Another process holds the payload's lock (installing the whole list: minutes, cold): a
    run wanting a harness that is already there goes on at once; one wanting a missing one
    waits for the lock, then installs it."""
    name = next(n for n in ALL if n not in unavailable)
    answers: list[payload.InstallReport] = []

    def install(*args: Any, **kwargs: Any) -> threading.Thread:
        thread = threading.Thread(target=lambda: answers.append(payload.install(*args, **kwargs)))
        thread.start()
        return thread

    with open(payload.DEFAULT_ROOT / ".lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        install([name]).join(30)
        assert answers and answers[0].cached == {name: get(name).version}, "it waited"
    root = tmp_path / "tools"
    root.mkdir()
    with open(root / ".lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        waiting = install(["zeroclaw"], root, sources={"zeroclaw": "/bin/echo"})
        waiting.join(1)
        assert waiting.is_alive() and len(answers) == 1, "a missing one is installed under the lock"
    waiting.join(30)
    assert answers[1].installed == {"zeroclaw": get("zeroclaw").version}


def test_bin_holds_only_harness_wrappers(unavailable: dict[str, str]) -> None:
    """Appended to PATH, the payload never shadows the image's tools: no node, no python."""
    wrappers = set(os.listdir(payload.DEFAULT_ROOT / "bin"))
    assert wrappers <= {h.command for h in harnesses()}
    assert {get(n).command for n in ALL if n not in unavailable} <= wrappers


def test_versions_and_wrappers_inside_a_sandbox(
    unavailable: dict[str, str], local_client: Any
) -> None:
    with local_client.create_sandbox("host", network="none", mounts=[tools_mount()]) as sb:
        versions = sb.exec("cat /opt/pomona/tools/VERSIONS").stdout.splitlines()
        assert f"node {payload.NODE_VERSION}" in versions
        assert sb.exec("touch /opt/pomona/tools/x").exit_code != 0, "the payload is read-only"
        for h in harnesses():
            if h.name in unavailable:
                continue
            assert f"{h.name} {h.version}" in versions
            r = sb.exec(
                f"PYTHONPATH=/nonexistent LD_LIBRARY_PATH=/nonexistent "
                f"/opt/pomona/tools/bin/{h.command} --version </dev/null",
                env={"HOME": "/tmp/home"},
                timeout=60,
            )
            # a published CLI reports its own version; an interpreter payload (Pomona's own
            # programs on the payload's CPython, as claw-eval) reports CPython's
            own_program = isinstance(h.install, PypiInstall) and not h.install.script
            expected = "Python 3." if own_program else h.version
            assert expected in r.stdout + r.stderr, f"{h.name}: {r.stdout} {r.stderr}"


def test_zeroclaw_needs_a_user_given_binary(tmp_path: Path) -> None:
    report = payload.install(["zeroclaw"], tmp_path / "tools")
    assert "zeroclaw" in report.unavailable
    assert "not published on npm, PyPI or Debian" in report.unavailable["zeroclaw"]


def test_user_given_binary_is_installed_with_a_wrapper(tmp_path: Path) -> None:
    """A stand-in for the ZeroClaw release binary (none can be fetched here): any ELF given with
    --from goes through the same install path."""
    root = tmp_path / "tools"
    report = payload.install(["zeroclaw"], root, sources={"zeroclaw": "/bin/echo"})
    assert report.installed == {"zeroclaw": get("zeroclaw").version}
    wrapper = root / "bin" / "zeroclaw"
    assert os.popen(f"{wrapper} hi").read() == "hi\n"
    assert f"zeroclaw {get('zeroclaw').version}" in (root / "VERSIONS").read_text()
    assert payload.install(["zeroclaw"], root).cached == {"zeroclaw": get("zeroclaw").version}
