"""Nothing hangs: pages that misbehave (the local web's hazards site) end a step or a reset in a
typed failure within the step's time limit, and the next reset recovers; what a page does by
itself (dialogs, popups, downloads) is shown to the agent and bounded; a page outside the task's
sites is the agent's error, not the environment's failure.

Each test's hard bound is pytest-timeout's; that the watchdog (not a Playwright timeout) ended a
step shows in its message, which names the step's limit."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import gymnasium as gym
import pytest

import pomona  # noqa: F401 - registers the envs
from pomona.benchmarks.browser.oracle import SiteOracle
from pomona.benchmarks.task import Task
from pomona.browser_env.tabs import Limits

LIMIT = 10  # seconds: the step's time limit in these tests
PAGE = 4  # seconds for a page to load


def hazard(path: str) -> Task:
    return Task(
        id=f"hazards{path}",
        instruction="Look around.",
        scorer=SiteOracle(),
        benchmark="webvoyager-local",
        metadata={"web": f"http://hazards.pomona.test{path}", "expect": {"answer": [["x"]]}},
    )


TASKS = [hazard(p) for p in ("/", "/loop", "/alerts", "/confirm", "/stall", "/popups",
                             "/downloads", "/local")]  # fmt: skip


@pytest.fixture(scope="module")
def env(browser_state: str) -> Iterator[Any]:
    env = gym.make(
        "pomona/BrowserEnv-v0", tasks=TASKS, interface="browsergym", state_dir=browser_state,
        page_timeout=PAGE, step_timeout=LIMIT, max_steps=50, limits=Limits(tabs=3, downloads=2),
    )  # fmt: skip
    yield env
    env.close()


def bid(obs: dict[str, Any], text: str) -> str:
    """The bid of the element whose line in the accessibility tree names `text`."""
    for line in obs["axtree_txt"].splitlines():
        if repr(text) in line and line.strip().startswith("["):
            return line.strip()[1:].split("]", 1)[0]
    raise AssertionError(f"no element {text!r} in:\n{obs['axtree_txt']}")


def reset(env: Any, path: str) -> tuple[dict[str, Any], dict[str, Any]]:
    obs, info = env.reset(options={"task": f"hazards{path}"})
    assert "failure" not in info, info
    return obs, info


@pytest.mark.timeout(180)
@pytest.mark.parametrize(("path", "button"), [("/loop", "Start"), ("/alerts", "Start")])
def test_an_endless_page_is_a_timeout_and_the_next_reset_recovers(
    env: Any, path: str, button: str
) -> None:
    obs, _ = reset(env, path)
    obs, reward, terminated, _, info = env.step(f'click("{bid(obs, button)}")')
    assert terminated and reward == 0.0 and info["failure"] == "timeout", info
    assert f"within {LIMIT} s" in info["error"] and "score" not in info
    obs, info = reset(env, "/confirm")  # a new browser
    assert bid(obs, "Delete")


@pytest.mark.timeout(120)
def test_a_dialog_is_answered_and_shown(env: Any) -> None:
    obs, _ = reset(env, "/confirm")
    obs, _, terminated, _, info = env.step(f'click("{bid(obs, "Delete")}")')
    assert not terminated and obs["last_action_error"] == "", info
    assert any("confirm dialog ('Delete everything?')" in e for e in obs["page_events"])
    assert "StaticText 'kept'" in obs["axtree_txt"]  # dismissed: the page goes on


@pytest.mark.timeout(120)
def test_a_start_page_that_never_answers_is_a_failure_from_reset(env: Any) -> None:
    obs, info = env.reset(options={"task": "hazards/stall"})
    assert info["failure"] == "timeout", info
    assert obs in env.observation_space and obs["last_action_error"].startswith("[timeout")
    _, reward, terminated, _, info = env.step('click("1")')
    assert terminated and reward == 0.0 and info["failure"] == "timeout"
    reset(env, "/confirm")


@pytest.mark.timeout(120)
def test_a_page_that_never_finishes_loading_is_a_timeout(env: Any) -> None:
    obs, _ = reset(env, "/")
    _, _, terminated, _, info = env.step(f'click("{bid(obs, "A page that never finishes")}")')
    assert terminated and info["failure"] == "timeout", info


@pytest.mark.timeout(120)
def test_a_crashed_renderer_is_a_sandbox_failure(env: Any) -> None:
    obs, _ = reset(env, "/confirm")
    env.unwrapped.session.sandbox.exec("pkill -9 -f -- --type=renderer", timeout=30)
    _, reward, terminated, _, info = env.step(f'click("{bid(obs, "Delete")}")')
    assert terminated and reward == 0.0 and info["failure"] == "sandbox", info
    reset(env, "/confirm")


@pytest.mark.timeout(120)
def test_the_machines_files_are_the_agents_error(env: Any) -> None:
    obs, _ = reset(env, "/local")
    obs, _, terminated, _, info = env.step('goto("file:///etc/passwd")')
    assert not terminated and "failure" not in info
    assert "only http(s) pages of the task's sites" in obs["last_action_error"]
    obs, _, terminated, _, info = env.step('goto("http://example.com/")')
    assert not terminated and "outside the sites this task allows" in obs["last_action_error"]
    obs, _, terminated, _, _ = env.step(f'click("{bid(obs, "Open /etc/passwd")}")')
    assert not terminated and obs["url"] == "http://hazards.pomona.test/local"  # Chromium refuses
    assert "root:" not in obs["axtree_txt"]


@pytest.mark.timeout(120)
def test_popups_become_tabs_within_the_limit(env: Any) -> None:
    obs, _ = reset(env, "/popups")
    link = bid(obs, "Open a tab")
    obs, _, _, _, _ = env.step(f'click("{bid(obs, "Open 30 windows")}")')
    assert len(obs["open_pages_urls"]) == 2  # Chromium's popup blocker lets one through
    assert obs["active_page_index"][0] == 1 and obs["url"].endswith("/tab?n=0")
    assert any("a new tab opened" in e for e in obs["page_events"])
    limit = env.unwrapped.options.limits.tabs
    assert limit == 3
    events = []
    for _ in range(limit):
        obs, _, _, _, info = env.step(f'tab_focus(0) click("{link}")')
        events += obs["page_events"]
    assert len(obs["open_pages_urls"]) == limit, info
    assert sum("was closed: at most" in e for e in events) == 2
    obs, _, _, _, _ = env.step("new_tab()")
    assert f"{limit} tabs are open, the most allowed" in obs["last_action_error"]
    obs, _, _, _, _ = env.step("tab_focus(0)")
    assert obs["url"] == "http://hazards.pomona.test/popups" and obs["active_page_index"][0] == 0
    obs, _, _, _, _ = env.step("tab_close()")
    assert len(obs["open_pages_urls"]) == limit - 1
    obs, _, _, _, _ = env.step("tab_focus(99)")
    assert "there is no tab 99" in obs["last_action_error"]


@pytest.mark.timeout(120)
def test_downloads_are_listed_and_bounded(env: Any) -> None:
    obs, _ = reset(env, "/downloads")
    limit = env.unwrapped.options.limits.downloads
    obs, _, _, _, _ = env.step(" ".join([f'click("{bid(obs, "Get the report")}")'] * (limit + 3)))
    assert limit == 2
    events = list(obs["page_events"])
    downloads = env.unwrapped.session.tabs.downloads
    for _ in range(10):  # a busy browser may start the later downloads a little later
        if len(downloads) == limit + 3:
            break
        obs, _, _, _, _ = env.step("noop(500)")
        events += obs["page_events"]
    assert len(downloads) == limit + 3 and sum(d.accepted for d in downloads) == limit
    assert sum("a download started: report.txt" in e for e in events) == limit
    assert sum("was refused: at most" in e for e in events) == 3
    # what a download may write is bounded by the browser sandbox's disk, not by a list
    assert env.unwrapped.session.sandbox.info.spec.limits.disk == 2**30
