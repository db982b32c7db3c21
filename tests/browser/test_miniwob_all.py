"""Every MiniWoB++ task the `miniwob` package registers loads in one real browser, draws its
instance and takes an action: the oracle's where Pomona has a solver (reward 1 on BrowserGym's
scale), a random click elsewhere (a reward in BrowserGym's {0, 1} once the page ends it). Kept
cheap: one sandbox, one page, no screenshots; BrowserEnv's own path is test_env.py's."""

from __future__ import annotations

import random
from typing import Any

import pytest

from pomona.benchmarks.browser import miniwob, suite
from pomona.browser_env import BrowserSession, SessionOptions
from pomona.browser_env import marks as som
from pomona.browser_env.actions import parse

CLICKABLE = """() => [...document.querySelectorAll(
  'button, input, a, select, textarea, [onclick], span, div, td, li, svg, canvas')]
  .map((e) => e.getBoundingClientRect())
  .filter((r) => r.width > 2 && r.height > 2 && r.top >= 0 && r.left >= 0)
  .map((r) => [r.left + r.width / 2, r.top + r.height / 2])"""


def marks(session: Any) -> list[Any]:
    """The set-of-marks labels without the screenshot (what the oracle reads)."""
    found = session.evaluate(som.LABEL_SCRIPT)
    session.evaluate(som.CLEAR_SCRIPT)
    return som.parse_marks(found)


def test_every_task_loads_and_takes_an_action(client: Any) -> None:
    names = miniwob.registered()
    assert len(names) == 128 and {"click-button", "flight.AA", "use-slider"} <= set(names)
    rng = random.Random(7)
    options = SessionOptions(page_timeout=30)
    solved, ended = [], []
    with BrowserSession(
        client, web=suite.web_for(miniwob.task("click-button")), options=options
    ) as s:
        for name in names:
            task = miniwob.task(name)
            utterance = suite.begin(s, task, seed=1)
            assert utterance.strip(), name
            if name in miniwob.SOLVERS:
                for line in suite.oracle_actions(task, utterance, marks(s)):
                    s.act(parse(line), marks(s))
            else:
                points = s.evaluate(CLICKABLE)
                assert points, f"{name}: nothing to click"
                s.page.mouse.click(*rng.choice(points))
            score = suite.grade(s, task, None)
            assert score.reward in (0.0, 1.0), (name, score)
            if name in miniwob.SOLVERS:
                assert score.reward == 1.0, (name, score.details)
                solved.append(name)
            ended += [name] if score.details["done"] else []
    assert len(solved) == len(miniwob.SOLVERS)
    assert set(solved) <= set(ended)


@pytest.mark.parametrize("scale", ["browsergym", "raw"])
def test_a_wrong_submit_scores_on_the_chosen_scale(scale: str) -> None:
    task = miniwob.task("click-button", scale=scale)
    wrong = {"done": True, "raw": -1.0, "reward": -0.8}
    score = task.scorer.score(task, wrong)
    assert not score.resolved and score.reward == (0.0 if scale == "browsergym" else -1.0)
    assert task.scorer.score(task, {"done": False, "raw": 0}).reward == 0.0
    assert task.scorer.score(task, {"done": True, "raw": 0.5}).reward == (
        1.0 if scale == "browsergym" else 0.5
    )
