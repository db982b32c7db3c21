"""A store made by real `pomona run`s (each in its own process, as a user runs it), the viewer
serving it, and real Chromium (Debian's, driven by Playwright) to look at it.

Screenshots of every page are kept in $POMONA_TEST_ARTIFACTS/viewer (default
.cache/test-artifacts/viewer in the repository).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from pomona.proxy.appserver import AppServer
from pomona.viewer.app import create_app

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = (
    Path(os.environ.get("POMONA_TEST_ARTIFACTS", REPO / ".cache" / "test-artifacts")) / "viewer"
)
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
SWE_TASK = "jpvanhal__inflection-1"
WAIT_MS = 300_000
"""How long a page may take to show something: generous, since the machine is busy and nothing
here is a timing assertion (Playwright's own default is 5 s)."""
expect.set_options(timeout=WAIT_MS)


def pomona(*args: str) -> subprocess.Popen:
    """`pomona ARGS` in a process of its own."""
    return subprocess.Popen([sys.executable, "-m", "pomona.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)  # fmt: skip


def finish(proc: subprocess.Popen) -> str:
    out, _ = proc.communicate(timeout=600)
    return out


@pytest.fixture(scope="session")
def state_dir() -> Iterator[str]:
    """A private sandbox state directory for the runs these tests start."""
    path = tempfile.mkdtemp(prefix="pomona-viewer-")
    yield path
    from pomona.orchestrator.runtimes.local import LocalRuntime

    LocalRuntime(path).unmount_store()
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def ready_harness() -> None:
    from pomona.harnesses import payload

    missing = payload.ensure(["pi"])
    if missing:
        pytest.skip(f"the pi harness payload is unavailable: {missing}")


@pytest.fixture(scope="session")
def store(tmp_path_factory: pytest.TempPathFactory, state_dir: str, ready_harness: None) -> Path:
    """Two real runs: the oracle resolving a SWE task (patch and test output graded the
    SWE-bench way), and a model that does nothing on the `files` set, twice per task."""
    runs = tmp_path_factory.mktemp("runs")
    common = ("--trajectories", str(runs), "--state-dir", state_dir)
    swe = pomona("run", "--benchmark", "swe-local", "--tasks", SWE_TASK, *common)
    out = finish(swe)
    assert swe.returncode == 0, out
    noop = pomona("run", "--benchmark", "files", "--model", "scripted", "-k", "2", *common)
    out = finish(noop)
    assert noop.returncode in (0, 1) and "6 attempts recorded" in out, out  # 1: ran, unresolved
    return runs


@pytest.fixture(scope="session")
def viewer(store: Path) -> Iterator[str]:
    server = AppServer(create_app(store, refresh_interval=0.2)).start()
    yield server.url
    server.stop()


@pytest.fixture(scope="module")  # sync Playwright holds an event loop running in this thread
def browser() -> Iterator[Any]:  # while it lives: only for the module that drives pages
    if not os.path.exists(CHROMIUM):
        pytest.skip("Debian's chromium is not installed (./dev setup installs it)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield chromium
        chromium.close()


class Page:
    """A browser page that remembers every console error, uncaught exception and dialog."""

    def __init__(self, page: Any, base: str):
        self.page, self.base = page, base
        page.set_default_timeout(WAIT_MS)
        self.errors: list[str] = []
        self.dialogs: list[str] = []
        page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: self.errors.append(f"uncaught: {e}"))
        page.on("dialog", lambda d: (self.dialogs.append(d.message), d.dismiss()))

    def open(self, path: str) -> Any:
        self.page.goto(self.base + path)
        self.page.wait_for_load_state("networkidle")
        return self.page

    def shot(self, name: str) -> Path:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=True)
        return path


@pytest.fixture
def open_page(browser: Any) -> Iterator[Callable[[str], Page]]:
    pages: list[Any] = []

    def make(base: str) -> Page:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        pages.append(page)
        return Page(page, base)

    yield make
    for page in pages:
        page.close()
