"""MiniWoB++ through BrowserEnv: every task the `miniwob` package registers (its 125 MiniWoB
pages and 3 FlightWoB sites, as the package's own Gymnasium registry lists them), with the
pages' own reward.

Each page draws a random instance (seeded with `Math.seedrandom`, as the package's Python env
does), shows an utterance, and ends its episode itself by calling `core.endEpisode(reward)`.
The reward is on BrowserGym's scale by default: 1.0 when the page's raw reward is positive, else
0.0 (a wrong submit scores 0, not MiniWoB's -1); `scale="raw"` gives the raw reward in [-1, 1]
(`WOB_RAW_REWARD_GLOBAL`). MiniWoB's time-decayed reward depends on how fast the machine and the
model are, so it is kept in the details only; the page's own time limit is lifted to the
episode's and its countdown never runs (BrowserGym removes it too), so the same seed shows the
same page however long the agent takes: the screenshot and the DOM are the same each time.

Tasks the package marks nondeterministic (a date picker's "today", FlightWoB's airline sites)
carry `nondeterministic` in their metadata. For a few tasks a solver reads the instance
(utterance and marks) and returns the actions that solve it: the oracle's reference sequence.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

from pomona.benchmarks.task import Environment, Score, Task
from pomona.browser_env.marks import Mark
from pomona.errors import EpisodeFailure, Unknown

ROOT = "http://miniwob.pomona.test/"
BASE = f"{ROOT}miniwob/"
EPISODE_LIMIT_MS = 3_600_000
SCALES = ("browsergym", "raw")

START_SCRIPT = """(seed) => {
  Math.seedrandom(seed);
  core.EPISODE_MAX_TIME = EPISODE_LIMIT;
  core.countdownTimer = function () {};  // no clock: the page looks the same at any time
  core.startEpisodeReal();
  if (document.getElementById('reward-display')) core.hideDisplay();
}""".replace("EPISODE_LIMIT", str(EPISODE_LIMIT_MS))
READY_SCRIPT = """() => new Promise((ready) => {
  const check = () => (typeof WOB_TASK_READY === 'undefined' || WOB_TASK_READY)
    ? ready(core.getUtterance()) : setTimeout(check, 50);
  check();
})"""
STATE_SCRIPT = """() => ({done: WOB_DONE_GLOBAL, reward: WOB_REWARD_GLOBAL,
  raw: WOB_RAW_REWARD_GLOBAL, reason: WOB_REWARD_REASON, utterance: core.getUtterance()})"""


class Unsolvable(EpisodeFailure, LookupError):
    """The oracle has no solution for this instance (no solver, or the page lacks what it
    looks for): the oracle's failure, a `harness` failure of the attempt, never a 0."""


def _utterance(task: dict[str, Any] | str) -> str:
    return task if isinstance(task, str) else str(task.get("utterance", ""))


def _quoted(utterance: str) -> list[str]:
    return re.findall(r'"([^"]*)"', utterance)


def _first(marks: list[Mark], pred: Callable[[Mark], bool], what: str) -> Mark:
    for m in marks:
        if pred(m):
            return m
    raise Unsolvable(f"no element on the page is {what}")


def _with_text(marks: list[Mark], text: str) -> Mark:
    return _first(marks, lambda m: m.text == text, repr(text))


def _text_fields(marks: list[Mark]) -> list[Mark]:
    return [m for m in marks if m.typeable]


def _submit(marks: list[Mark], label: str = "submit") -> str:
    button = _first(
        marks, lambda m: m.tag == "button" and m.text.lower() == label, f"a {label} button"
    )
    return f"Click [{button.index}]"


def solve_click_button(u: str, marks: list[Mark]) -> list[str]:
    want = _quoted(u)[0]
    return [
        f"Click [{_first(marks, lambda m: m.tag == 'button' and m.text == want, repr(want)).index}]"
    ]


def solve_click_link(u: str, marks: list[Mark]) -> list[str]:
    want = _quoted(u)[0]
    return [f"Click [{_first(marks, lambda m: m.text == want, repr(want)).index}]"]


def solve_enter_text(u: str, marks: list[Mark]) -> list[str]:
    field = _text_fields(marks)[0]
    return [f"Type [{field.index}]; {_quoted(u)[0]}", _submit(marks)]


def solve_focus_text(u: str, marks: list[Mark]) -> list[str]:
    return [f"Click [{_text_fields(marks)[0].index}]"]


def solve_login_user(u: str, marks: list[Mark]) -> list[str]:
    user, password = _quoted(u)[:2]
    name, secret = _text_fields(marks)[:2]
    return [
        f"Type [{name.index}]; {user}",
        f"Type [{secret.index}]; {password}",
        _submit(marks, "login"),
    ]


def solve_enter_password(u: str, marks: list[Mark]) -> list[str]:
    password = _quoted(u)[0]
    return [*(f"Type [{f.index}]; {password}" for f in _text_fields(marks)[:2]), _submit(marks)]


def solve_click_checkboxes(u: str, marks: list[Mark]) -> list[str]:
    wanted = re.match(r"Select (.*) and click Submit", u)
    names = [] if not wanted or wanted.group(1) == "nothing" else wanted.group(1).split(", ")
    boxes = [m for m in marks if m.type == "checkbox"]
    picks = [_with_text(boxes, n) for n in names]
    return [*(f"Click [{m.index}]" for m in picks), _submit(marks)]


def solve_click_tab(u: str, marks: list[Mark]) -> list[str]:
    found = re.search(r"#(\d)", u)
    if found is None:
        raise Unsolvable(f"no tab number in the instruction {u!r}")
    number = found.group(1)
    return [f"Click [{_first(marks, lambda m: m.text == f'Tab #{number}', 'the tab').index}]"]


SOLVERS: dict[str, Callable[[str, list[Mark]], list[str]]] = {
    "click-button": solve_click_button,
    "click-link": solve_click_link,
    "enter-text": solve_enter_text,
    "focus-text": solve_focus_text,
    "login-user": solve_login_user,
    "enter-password": solve_enter_password,
    "click-checkboxes": solve_click_checkboxes,
    "click-tab": solve_click_tab,
}


@dataclass(frozen=True)
class MiniWoBReward:
    """The page's own reward, read when the episode ends, on BrowserGym's scale or the raw one."""

    scale: str = "browsergym"

    def collect(self, task: Task, session: Any) -> dict[str, Any]:
        return dict(session.evaluate(STATE_SCRIPT))

    def score(self, task: Task, artifacts: dict[str, Any]) -> Score:
        raw = float(artifacts.get("raw") or 0.0) if artifacts.get("done") else 0.0
        reward = raw if self.scale == "raw" else float(raw > 0)
        return Score(reward=reward, resolved=raw > 0, details=artifacts)


@cache
def registered() -> dict[str, bool]:
    """{task name: nondeterministic} for every environment the `miniwob` package registers."""
    import gymnasium
    import miniwob  # noqa: F401 - registers miniwob/* in Gymnasium's registry

    out = {}
    for env_id, spec in gymnasium.registry.items():
        if env_id.startswith("miniwob/"):
            out[env_id.removeprefix("miniwob/").rsplit("-v", 1)[0]] = bool(spec.nondeterministic)
    return dict(sorted(out.items()))


def page_url(name: str) -> str:
    """Where a task's page is on the local web (FlightWoB's sites have a wrapper page)."""
    if name.startswith("flight."):
        return f"{ROOT}{name.replace('.', '/')}/wrapper.html"
    return f"{BASE}{name}.html"


def task(name: str, seed: int = 0, scale: str = "browsergym") -> Task:
    tasks_known = registered()
    if name not in tasks_known:
        raise Unknown(f"the miniwob package has no task {name!r} ({len(tasks_known)} tasks)")
    if scale not in SCALES:
        raise Unknown(f"no MiniWoB reward scale {scale!r}: choose {', '.join(SCALES)}")
    return Task(
        id=f"miniwob/{name}",
        instruction="",
        scorer=MiniWoBReward(scale),
        environment=Environment(image="host", browser=True),
        benchmark="miniwob",
        metadata={
            "web": page_url(name),
            "web_name": "MiniWoB++",
            "miniwob": name,
            "seed": seed,
            "nondeterministic": tasks_known[name],
        },
    )


def tasks(seed: int = 0, scale: str = "browsergym") -> list[Task]:
    return [task(name, seed, scale) for name in registered()]


def begin(session: Any, t: Task, seed: int) -> str:
    """Open the task page, draw the instance for `seed`, and return its utterance."""
    session.goto(t.metadata["web"])
    session.evaluate(START_SCRIPT, seed)
    utterance = session.evaluate(READY_SCRIPT)  # FlightWoB's sites get ready later
    return str(utterance["utterance"] if isinstance(utterance, dict) else utterance)


def ended(session: Any) -> bool:
    return bool(session.evaluate("() => WOB_DONE_GLOBAL"))


def solve(t: Task, utterance: str, marks: list[Mark]) -> list[str]:
    name = t.metadata["miniwob"]
    if name not in SOLVERS:
        raise Unsolvable(f"no solver for {t.id}: the oracle has {', '.join(SOLVERS)}")
    return SOLVERS[name](utterance, marks)
