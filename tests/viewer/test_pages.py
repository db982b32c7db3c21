"""The viewer in real Chromium over a store made by real `pomona run`s: every page loads with no
console error, the episode page shows the calls in order with what was sent and answered, runs
appear and progress live without a reload, hostile trajectory content stays text, and the pages
can be used from the keyboard. A screenshot of each page is kept (see conftest)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest
from playwright.sync_api import expect

from pomona import trajectories
from pomona.proxy.server import AppServer
from pomona.trajectories.writer import TrajectoryWriter
from pomona.viewer.app import create_app
from tests.viewer.conftest import SWE_TASK, WAIT_MS, finish, pomona

pytestmark = pytest.mark.timeout(900)  # pages on a busy machine; the live run has its own


def episodes_of(viewer: str) -> list[dict[str, Any]]:
    return httpx.get(viewer + "/api/episodes", params={"limit": 500}).json()["episodes"]


def loaded(page: Any) -> None:
    expect(page.locator("#status")).not_to_have_text("Loading…", timeout=WAIT_MS)


def test_every_page_loads_with_no_console_error(viewer: str, open_page: Any) -> None:
    episodes = episodes_of(viewer)
    swe = next(e for e in episodes if e["task"] == SWE_TASK)
    a, b = sorted((e for e in episodes if e["task"] == "files/rename"), key=lambda e: e["attempt"])
    pages = {
        "runs": "/",
        "leaderboard": "/leaderboard",
        "run": f"/run?run={b['run']}",
        "run-swe": f"/run?run={swe['run']}",
        "episode": f"/episode?key={swe['episode']}",
        "compare": f"/compare?a={a['episode']}&b={b['episode']}",
    }
    page = open_page(viewer)
    for name, path in pages.items():
        loaded(page.open(path))
        page.shot(name)
    assert page.errors == []
    assert page.page.locator("section h2").count() == 2  # the compare page's two columns


def test_the_episode_page_shows_the_calls_in_order(
    store: Path, viewer: str, open_page: Any
) -> None:
    row = next(r for r in trajectories.read(store, "episodes").to_pylist() if r["task"] == SWE_TASK)
    calls = [
        c for c in trajectories.read(store, "calls").to_pylist() if c["episode"] == row["episode"]
    ]
    calls.sort(key=lambda c: c["started_at"])
    assert len(calls) >= 2
    page = open_page(viewer)
    p = page.open(f"/episode?key={row['episode']}")
    items = p.locator("ol.timeline > li")
    expect(items).to_have_count(len(calls), timeout=WAIT_MS)
    previous: list[Any] = []
    for i, call in enumerate(calls):
        sent = json.loads(call["request"])["messages"]
        item = items.nth(i)
        common = next(
            (n for n, (x, y) in enumerate(zip(sent, previous, strict=False)) if x != y),
            min(len(sent), len(previous)),
        )
        assert item.locator(".msg.new:not(.answer)").count() == len(sent) - common
        if common:  # the messages sent again are folded, and fetched when the fold opens
            item.locator("details > summary").click()
            expect(item.locator("details .msg")).to_have_count(common, timeout=WAIT_MS)
        roles = item.locator(".msg:not(.answer) > .role").all_text_contents()
        assert roles == [{"developer": "system"}.get(m["role"], m["role"]) for m in sent]
        previous = sent
        answer = json.loads(call["response"])["choices"][0]["message"]
        if answer.get("tool_calls"):
            arguments = json.loads(answer["tool_calls"][0]["function"]["arguments"])
            expect(item.locator(".msg.answer")).to_contain_text(arguments["command"][:60])
        else:
            expect(item.locator(".msg.answer")).to_contain_text(answer["content"])
        usage = call["usage"]
        expect(item.locator(".callhead")).to_contain_text(
            f"tokens in {usage['input_tokens']} / out {usage['output_tokens']}"
        )
    # the tool's output the harness sent back is shown as the result of the model's tool call
    expect(items.nth(1).locator(".msg.new").last).to_contain_text("Applied patch")
    # the SWE-bench grading evidence: the patch as a diff, and the test output
    patch = p.get_by_role("region", name="artifact grading/patch.diff")
    expect(patch.locator(".diff .add").first).to_be_visible(timeout=WAIT_MS)
    output = p.get_by_role("region", name="artifact grading/test_output.txt")
    expect(output.locator("pre")).to_contain_text("passed", timeout=WAIT_MS)
    # ...and the verdict it rests on, first among the artifacts: where it was verified, the
    # exact command, the image digest, the witness's account
    verdict = p.get_by_role("region", name="artifact grading/verification.json")
    expect(verdict.locator(".verification .badge")).to_have_text("resolved", timeout=WAIT_MS)
    expect(verdict).to_contain_text("in a fresh sandbox of the pristine image")
    expect(verdict).to_contain_text("/bin/bash /eval.sh 2>&1")
    expect(verdict).to_contain_text("(sha256:")
    expect(verdict).to_contain_text("shown: pytest reported")
    first = p.locator("section[aria-label^='artifact ']").first
    expect(first).to_have_attribute("aria-label", "artifact grading/verification.json")
    expect(p.get_by_role("link", name="Raw rows (JSON)")).to_have_attribute(
        "href", f"/api/episode/raw?key={row['episode']}"
    )
    assert page.errors == []


def test_run_page_matrix_and_filters(viewer: str, open_page: Any) -> None:
    run = next(e["run"] for e in episodes_of(viewer) if e["task"] == "files/rename")
    page = open_page(viewer)
    p = page.open(f"/run?run={run}")
    expect(p.locator("table.matrix tbody tr")).to_have_count(3, timeout=WAIT_MS)
    expect(p.locator("table.matrix .badge.fail")).to_have_count(6)
    expect(p.locator("table.matrix thead th")).to_have_text(["task", "attempt 1", "attempt 2"])
    p.get_by_label("Outcome").select_option("pass")
    expect(p.locator("#status")).to_have_text("0 task(s) match", timeout=WAIT_MS)
    p.get_by_label("Outcome").select_option("")
    p.get_by_label("Task").fill("rename")
    p.get_by_label("Task").press("Enter")
    expect(p.locator("table.matrix tbody tr")).to_have_count(1, timeout=WAIT_MS)
    assert "task=rename" in p.url
    assert page.errors == []


def test_what_is_typed_in_a_filter_survives_a_load_in_flight(viewer: str, open_page: Any) -> None:
    """A load that was in flight while the user typed re-renders the page: the typed filter
    stays (it was lost, and the filter applied was the old one, on a loaded machine); and an
    older load that answers after a newer one draws nothing (it drew over the filtered table)."""
    run = next(e["run"] for e in episodes_of(viewer) if e["task"] == "files/rename")
    page = open_page(viewer)
    p = page.open(f"/run?run={run}")
    rows, status, task = (
        p.locator("table.matrix tbody tr"),
        p.locator("#status"),
        p.get_by_label("Task"),
    )
    expect(rows).to_have_count(3, timeout=WAIT_MS)
    held: list[Any] = []
    p.route("**/api/run/tasks*", lambda route: held.append(route))  # answered when released

    def held_count(n: int) -> None:
        while len(held) < n:
            p.wait_for_timeout(50)

    p.get_by_label("Outcome").select_option("pass")  # load 1, held
    held_count(1)
    task.fill("rename")
    held[0].continue_()
    expect(status).to_have_text("0 task(s) match", timeout=WAIT_MS)  # load 1 drew the page
    expect(task).to_have_value("rename")  # what was typed survived it
    p.get_by_label("Outcome").select_option("")  # load 2, held
    held_count(2)
    task.press("Enter")  # load 3: any outcome, task rename; held
    held_count(3)
    held[2].continue_()
    expect(rows).to_have_count(1, timeout=WAIT_MS)
    held[1].continue_()  # the older load answers last
    p.wait_for_load_state("networkidle")
    p.wait_for_timeout(500)
    expect(rows).to_have_count(1)
    expect(status).to_have_text("1 task(s) match")
    p.unroute("**/api/run/tasks*")
    assert page.errors == []


def test_leaderboard_sorts_and_plots(viewer: str, open_page: Any) -> None:
    page = open_page(viewer)
    p = page.open("/leaderboard")
    rows = p.locator("table tbody tr")
    expect(rows).to_have_count(2, timeout=WAIT_MS)
    expect(p.locator("thead")).to_contain_text("pass@2")
    expect(p.locator("thead")).to_contain_text("pass^2")
    p.get_by_role("button", name="resolve rate").click()
    expect(p.locator("th[data-key=resolve_rate]")).to_have_attribute("aria-sort", "ascending")
    expect(rows.first).to_contain_text("files")
    p.get_by_role("button", name="resolve rate").click()
    expect(rows.first).to_contain_text("swe-local")
    plot = p.get_by_role("img", name="Heatmap per benchmark")
    expect(plot).to_be_visible()
    p.wait_for_function("document.querySelector('img.plot').naturalWidth > 0", timeout=WAIT_MS)
    assert page.errors == []


def test_pages_are_usable_from_the_keyboard(viewer: str, open_page: Any) -> None:
    swe = next(e for e in episodes_of(viewer) if e["task"] == SWE_TASK)
    page = open_page(viewer)
    p = page.open("/")
    loaded(p)
    p.keyboard.press("Tab")
    assert p.evaluate("document.activeElement.textContent") == "Skip to content"
    p.keyboard.press("Enter")
    assert p.evaluate("document.activeElement.id") == "main"
    for _ in range(60):  # tab to the SWE run's link and follow it
        p.keyboard.press("Tab")
        if p.evaluate("document.activeElement.textContent") == swe["run"]:
            break
    p.keyboard.press("Enter")
    p.wait_for_url("**/run?run=*")
    loaded(p)
    for _ in range(60):  # and on to an attempt
        p.keyboard.press("Tab")
        if p.evaluate("document.activeElement.getAttribute('href') || ''").startswith("/episode?"):
            break
    p.keyboard.press("Enter")
    p.wait_for_url("**/episode?key=*")
    expect(p.locator("ol.timeline > li").first).to_be_visible(timeout=WAIT_MS)
    p.keyboard.press("j")
    assert p.evaluate("document.activeElement.id") == "call-0"
    p.keyboard.press("j")
    assert p.evaluate("document.activeElement.id") == "call-1"
    p.keyboard.press("k")
    assert p.evaluate("document.activeElement.id") == "call-0"
    assert page.errors == []


ACCESSIBILITY = """() => ({
  lang: document.documentElement.lang,
  h1: document.querySelectorAll('h1').length,
  unlabelled: [...document.querySelectorAll('input:not([type=hidden]), select, textarea')]
    .filter((e) => !(e.labels && e.labels.length) && !e.getAttribute('aria-label')).length,
  imagesWithoutAlt: [...document.querySelectorAll('img')].filter((i) => !i.alt).length,
  headersWithoutScope: [...document.querySelectorAll('th')].filter((t) => !t.getAttribute('scope')).length,
  nameless: [...document.querySelectorAll('a, button')].filter((e) => !e.textContent.trim() && !e.getAttribute('aria-label')).length,
})"""


def test_basic_accessibility_of_every_page(viewer: str, open_page: Any) -> None:
    episodes = episodes_of(viewer)
    a, b = (e["episode"] for e in episodes if e["task"] == "files/rename")
    page = open_page(viewer)
    for path in ("/", "/leaderboard", f"/run?run={episodes[0]['run']}", f"/episode?key={a}",
                 f"/compare?a={a}&b={b}"):  # fmt: skip
        p = page.open(path)
        loaded(p)
        found = p.evaluate(ACCESSIBILITY)
        assert found == {"lang": "en", "h1": 1, "unlabelled": 0, "imagesWithoutAlt": 0,
                         "headersWithoutScope": 0, "nameless": 0}, path  # fmt: skip
        expect(p.get_by_role("navigation", name="Main")).to_be_visible()


HOSTILE = '<img src=x onerror="alert(1)"><script>alert(2)</script>'


def test_hostile_trajectory_content_stays_text(tmp_path: Path, open_page: Any) -> None:
    (tmp_path / "artifacts").mkdir()
    (tmp_path / "artifacts" / "note.txt").write_text(HOSTILE)
    request = {"model": "m", "messages": [{"role": "user", "content": HOSTILE}]}
    response = {"choices": [{"message": {"role": "assistant", "content": None, "tool_calls": [
        {"id": HOSTILE, "type": "function", "function": {"name": HOSTILE, "arguments": HOSTILE}}]}}]}  # fmt: skip
    with TrajectoryWriter(tmp_path, "calls") as w:
        w.write({"call_id": "c", "episode": "evil", "dialect": "chat", "request": json.dumps(request),
                 "response": json.dumps(response), "status": "ok", "model": HOSTILE,
                 "error": HOSTILE})  # fmt: skip
    with TrajectoryWriter(tmp_path, "episodes") as w:
        w.write({"episode": "evil", "run": HOSTILE, "task": HOSTILE, "benchmark": HOSTILE,
                 "harness": HOSTILE, "model": HOSTILE, "failure_kind": "harness",
                 "failure_message": HOSTILE, "metadata": json.dumps({"attempt": 0}),
                 "artifacts": [{"name": HOSTILE + ".txt", "uri": (tmp_path / "artifacts" / "note.txt").as_uri()}]})  # fmt: skip
    server = AppServer(create_app(tmp_path, refresh_interval=0)).start()
    try:
        page = open_page(server.url)
        for path in (
            "/",
            "/run?" + urlencode({"run": HOSTILE}),
            "/episode?key=evil",
            "/leaderboard",
        ):
            p = page.open(path)
            loaded(p)
            expect(p.get_by_text(HOSTILE).first).to_be_visible()
            assert p.locator("img[src=x], main script").count() == 0
            page.shot("hostile" + path.split("?")[0].replace("/", "-"))
    finally:
        server.stop()
    assert page.dialogs == [] and page.errors == []


def test_an_episode_in_flight_is_shown_under_its_run(tmp_path: Path, open_page: Any) -> None:
    """From its first call, a running episode appears under the run it was opened in: on the
    runs page, on its run's page, and its own page links the run."""
    calls = TrajectoryWriter(tmp_path, "calls")  # open: its writer (this process) is alive
    calls.write({"call_id": "c0", "episode": "flying", "run": "run-live", "benchmark": "files",
                 "task": "files/rename", "harness": "pi", "model": "m", "dialect": "chat",
                 "request": json.dumps({"messages": [{"role": "user", "content": "go"}]}),
                 "status": "ok"})  # fmt: skip
    server = AppServer(create_app(tmp_path, refresh_interval=0)).start()
    try:
        page = open_page(server.url)
        p = page.open("/")
        loaded(p)
        row = p.locator("table tbody tr").first
        expect(row.locator("td").first).to_have_text("run-live")
        expect(row.locator(".badge.live")).to_have_text("running")
        expect(row.locator("td").nth(6)).to_have_text("1")  # in flight
        flight = p.get_by_role("region", name="In flight (1)")
        flight.get_by_role("link", name="run-live").click()
        p.wait_for_url("**/run?run=run-live")
        loaded(p)
        here = p.get_by_role("region", name="In flight (1)")
        expect(here).to_contain_text("files/rename")
        page.shot("run-in-flight")
        here.get_by_role("link", name="files/rename").click()
        p.wait_for_url("**/episode?key=flying")
        loaded(p)
        expect(p.locator("dl.facts").get_by_role("link", name="run-live")).to_be_visible()
    finally:
        server.stop()
        calls.close()
    assert page.errors == []


@pytest.mark.timeout(1200)  # a whole `pomona run`; on a loaded machine it takes minutes
def test_a_live_run_appears_and_progresses_without_a_reload(tmp_path: Path, state_dir: str,
                                                            ready_harness: None, open_page: Any) -> None:  # fmt: skip
    runs = tmp_path / "live"
    server = AppServer(create_app(runs, refresh_interval=0.2)).start()
    proc = None
    try:
        page = open_page(server.url)
        p = page.open("/")
        loaded(p)
        p.evaluate("window.sameDocument = true")
        proc = pomona("run", "--benchmark", "files", "--model", "oracle", "-k", "2", "--concurrency", "1",
                      "--trajectories", str(runs), "--state-dir", state_dir)  # fmt: skip
        row = p.locator("table tbody tr").first
        expect(row.locator(".badge.live")).to_have_text("running", timeout=WAIT_MS)
        page.shot("runs-live")
        expect(row).to_contain_text("finished", timeout=2 * WAIT_MS)
        out = finish(proc)
        assert proc.returncode == 0, out
        episodes = row.locator("td").nth(5)
        expect(episodes).to_have_text("6", timeout=WAIT_MS)
        assert p.evaluate("window.sameDocument") is True  # the same page all along: no reload
        assert page.errors == []
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        server.stop()
