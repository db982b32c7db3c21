"""BrowserEnv in real Chromium: Gymnasium's checker, every action type, the MiniWoB oracle on
each sampled task, and a no-op scoring 0."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import pomona  # noqa: F401 - registers the envs
from pomona.benchmarks.browser import miniwob, suite


@pytest.fixture(scope="module")
def miniwob_env(browser_state: str) -> Iterator[Any]:
    env = gym.make("pomona/BrowserEnv-v0", benchmark="miniwob", state_dir=browser_state)
    yield env
    env.close()


@pytest.fixture(scope="module")
def site_env(browser_state: str) -> Iterator[Any]:
    env = gym.make(
        "pomona/BrowserEnv-v0", benchmark="webvoyager-local", state_dir=browser_state, max_steps=30
    )
    yield env
    env.close()


def mark(info: dict[str, Any], text: str) -> int:
    return next(m.index for m in info["marks"] if m.text == text)


def field(info: dict[str, Any]) -> int:
    return next(m.index for m in info["marks"] if m.typeable)


def test_check_env(miniwob_env: Any) -> None:
    check_env(miniwob_env.unwrapped)
    obs, _ = miniwob_env.reset(seed=5)
    assert obs["screenshot"].shape == (360, 500, 3) and obs["screenshot"].dtype.name == "uint8"
    assert obs["screenshot"].std() > 0 and "[0]:" in obs["text"]


@pytest.mark.parametrize("name", list(miniwob.SOLVERS))
def test_miniwob_oracle_solves_each_sampled_task(miniwob_env: Any, name: str) -> None:
    for seed in (1, 2):
        _, info = miniwob_env.reset(seed=seed, options={"task": f"miniwob/{name}"})
        task = miniwob_env.unwrapped.task
        for action in suite.oracle_actions(task, info["instruction"], info["marks"]):
            _, reward, terminated, truncated, step = miniwob_env.step(action)
        assert terminated and step["failure"] == "none", step
        assert reward == 1.0 and step["score"]["resolved"]


def test_no_op_scores_zero(miniwob_env: Any, site_env: Any) -> None:
    miniwob_env.reset(seed=3, options={"task": "miniwob/click-button"})
    _, reward, terminated, _, info = miniwob_env.step("ANSWER; nothing")
    assert terminated and reward == 0.0 and info["failure"] == "none"
    site_env.reset(options={"task": "Market--0"})
    _, reward, terminated, _, info = site_env.step("ANSWER; nothing")
    assert terminated and reward == 0.0 and not info["score"]["resolved"]


def test_every_action_type(site_env: Any) -> None:
    obs, info = site_env.reset(options={"task": "Market--1"})
    assert obs["url"] == "http://shop.pomona.test/" and '<input> "Search"' in obs["text"]
    session = site_env.unwrapped.session
    obs, _, _, _, info = site_env.step(f"Type [{field(info)}]; Northwind")
    assert obs["url"].endswith("/search?q=Northwind")
    obs, _, _, _, info = site_env.step("Scroll [WINDOW]; down")
    assert session.evaluate("() => window.scrollY") > 0
    obs, _, _, _, info = site_env.step("Scroll [WINDOW]; up")
    assert session.evaluate("() => window.scrollY") == 0
    obs, _, _, _, info = site_env.step(f"Click [{mark(info, 'white')}]")
    assert "color=white" in obs["url"]
    obs, _, _, _, info = site_env.step(f"Scroll [{mark(info, 'Northwind')}]; down")
    assert info["error"] is None
    obs, _, _, _, info = site_env.step("Wait")
    assert "color=white" in obs["url"]
    obs, _, _, _, info = site_env.step("GoBack")
    assert obs["url"].endswith("/search?q=Northwind")
    obs, _, _, _, info = site_env.step("Google")
    assert obs["url"] == "http://search.pomona.test/"
    for bad, says in (
        ("Hover [2]", "cannot parse"),
        ("Click [999]", "no element [999]"),
        (f"Type [{mark(info, 'Pomona Search')}]; x", "not a text field"),
    ):
        obs, reward, terminated, _, info = site_env.step(bad)
        assert obs["text"].startswith("[invalid action]") and says in obs["text"]
        assert not terminated and reward == 0.0 and obs["url"] == "http://search.pomona.test/"
    _, reward, terminated, _, info = site_env.step("ANSWER; I could not find it")
    assert terminated and reward == 0.0 and info["answer"] == "I could not find it"
