"""MiniWoB++ through BrowserEnv: the `miniwob` package's own task pages and its own reward.

Each page draws a random instance (seeded with `Math.seedrandom`, as the package's Python env
does), shows an utterance, and ends its episode itself by calling `core.endEpisode(reward)`.
The reward reported is the raw one (`WOB_RAW_REWARD_GLOBAL`, in [-1, 1]); MiniWoB's time-decayed
reward depends on how fast the machine and the model are, so it is kept in the details only. The
page's own 10-second limit is lifted to the episode's, for the same reason.

The sampled tasks below are those an agent can finish with WebVoyager's grammar (no drag, no
native select menus), each with a solver that reads the instance (utterance and marks) and
returns the actions that solve it: the oracle's reference sequence for that instance.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pomona.benchmarks.task import Environment, Score, Task
from pomona.browser_env.marks import Mark

BASE = "http://miniwob.pomona.test/miniwob/"
EPISODE_LIMIT_MS = 3_600_000

START_SCRIPT = """(seed) => {
  Math.seedrandom(seed);
  core.EPISODE_MAX_TIME = EPISODE_LIMIT;
  core.startEpisodeReal();
  return core.getUtterance();
}""".replace("EPISODE_LIMIT", str(EPISODE_LIMIT_MS))
STATE_SCRIPT = """() => ({done: WOB_DONE_GLOBAL, reward: WOB_REWARD_GLOBAL,
  raw: WOB_RAW_REWARD_GLOBAL, reason: WOB_REWARD_REASON, utterance: core.getUtterance()})"""


def _utterance(task: dict[str, Any] | str) -> str:
    return task if isinstance(task, str) else str(task.get("utterance", ""))


def _quoted(utterance: str) -> list[str]:
    return re.findall(r'"([^"]*)"', utterance)


def _first(marks: list[Mark], pred: Callable[[Mark], bool], what: str) -> Mark:
    for m in marks:
        if pred(m):
            return m
    raise LookupError(f"no element on the page is {what}")


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
        raise LookupError(f"no tab number in the instruction {u!r}")
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
    """The page's own reward, read when the episode ends."""

    def collect(self, task: Task, session: Any) -> dict[str, Any]:
        return dict(session.evaluate(STATE_SCRIPT))

    def score(self, task: Task, artifacts: dict[str, Any]) -> Score:
        raw = float(artifacts.get("raw") or 0.0) if artifacts.get("done") else 0.0
        return Score(reward=raw, resolved=raw > 0, details=artifacts)


def task(name: str, seed: int = 0) -> Task:
    if name not in SOLVERS:
        raise KeyError(f"MiniWoB task {name!r} is not in the sampled set: {', '.join(SOLVERS)}")
    return Task(
        id=f"miniwob/{name}",
        instruction="",
        scorer=MiniWoBReward(),
        environment=Environment(image="host"),
        benchmark="miniwob",
        metadata={
            "web": f"{BASE}{name}.html",
            "web_name": "MiniWoB++",
            "miniwob": name,
            "seed": seed,
        },
    )


def tasks(seed: int = 0) -> list[Task]:
    return [task(name, seed) for name in SOLVERS]


def begin(session: Any, t: Task, seed: int) -> str:
    """Open the task page, draw the instance for `seed`, and return its utterance."""
    session.goto(t.metadata["web"])
    return str(session.evaluate(START_SCRIPT, seed))


def ended(session: Any) -> bool:
    return bool(session.evaluate("() => WOB_DONE_GLOBAL"))


def solve(t: Task, utterance: str, marks: list[Mark]) -> list[str]:
    return SOLVERS[t.metadata["miniwob"]](utterance, marks)
