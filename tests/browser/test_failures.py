"""Infra failures are typed, never scored: a browser that dies mid-episode, a page that hangs."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import pytest

import pomona  # noqa: F401 - registers the envs
from pomona.browser_env import BrowserSession, PageHung, SessionOptions

HANG = (
    'setsid python3 -c \'import socket, time; s = socket.create_server(("127.0.0.1", 8801)); '
    "conns = [s.accept() for _ in range(64)]; time.sleep(3600)' >/dev/null 2>&1 &"
)


def test_a_crashed_browser_is_a_sandbox_failure(browser_state: str) -> None:
    env = gym.make("pomona/BrowserEnv-v0", benchmark="miniwob", state_dir=browser_state)
    try:
        env.reset(seed=0, options={"task": "miniwob/click-button"})
        sandbox = env.unwrapped.session.sandbox
        sandbox.exec("pkill -9 -f -- --user-data-dir=/tmp/pomona-chromium", timeout=30)
        obs, reward, terminated, _, info = env.step("Click [0]")
        assert terminated and info["failure"] == "sandbox" and reward == 0.0, info
        assert "score" not in info and obs["text"].startswith("[sandbox failure]")
        assert env.unwrapped.session is None  # not reused; the next reset starts a new browser
        _, info = env.reset(seed=0, options={"task": "miniwob/click-button"})
        assert info["marks"]
    finally:
        env.close()


def test_a_hung_page_is_a_timeout_failure(client: Any) -> None:
    with BrowserSession(client, options=SessionOptions(page_timeout=5)) as session:
        session.sandbox.exec(HANG, timeout=30)
        session.sandbox.exec(
            'until python3 -c \'import socket; socket.create_connection(("127.0.0.1", '
            "8801))' 2>/dev/null; do sleep 0.1; done",
            timeout=120,
        )
        with pytest.raises(PageHung, match="did not (answer|load) within 5 s") as caught:
            session.goto("http://127.0.0.1:8801/")
        assert caught.value.kind == "timeout"
    listed = client.list_sandboxes({"role": "browser"})
    assert not [s for s in listed if s.state not in ("deleted",)]  # nothing left behind
