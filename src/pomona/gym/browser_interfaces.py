"""The two ways an agent sees and drives BrowserEnv: WebVoyager's and BrowserGym's.

    webvoyager  observation {screenshot with set-of-marks, url, text (one line per numbered
                element), instruction}; actions in WebVoyager's grammar (`Click [3]`,
                `Type [2]; text`, `ANSWER; text`, ...); the episode ends on ANSWER
    browsergym  BrowserGym's observation keys (chat_messages, goal, goal_object,
                open_pages_urls, open_pages_titles, active_page_index, url, screenshot,
                dom_object, axtree_object, extra_element_properties, focused_element_bid,
                last_action, last_action_error) plus Pomona's `axtree_txt`, `pruned_html` and
                `page_events`; actions are BrowserGym's high-level action strings
                (`click("12")`, `fill("4", "text")`, `send_msg_to_user("...")`); a message to the
                user is the answer of a task graded on one, and ends its episode

What BrowserGym has and this does not: no `elapsed_time`, and a chat message's `timestamp` is
the step at which it was sent (0 for the goal), so the same seed and actions give equal
observations and infos (Gymnasium's determinism check compares both). Chrome's own node and frame
ids are renumbered for the same reason (browser_env/dom.py).
"""

from __future__ import annotations

import string
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from gymnasium import spaces

from pomona.browser_env import actions as webvoyager_grammar
from pomona.browser_env import flatten
from pomona.browser_env.errors import ActionError, NavigationFailed
from pomona.browser_env.highlevel import DEFAULT_SUBSETS, HighLevelActions
from pomona.browser_env.session import BrowserSession, Observation, png_pixels

CHARSET = string.printable
MAX_TEXT = 20_000


def printable(text: str, limit: int = MAX_TEXT) -> str:
    return "".join(c if c in CHARSET else "?" for c in text)[:limit]


class Unicode(spaces.Space[str]):
    """Any string (page text is any text); sampled as the empty string."""

    def __init__(self) -> None:
        super().__init__(dtype=str)

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        return ""

    def contains(self, x: Any) -> bool:
        return isinstance(x, str)


class Number(spaces.Space[float]):
    """A float (a chat message's step)."""

    def __init__(self) -> None:
        super().__init__(dtype=float)

    def sample(self, mask: Any = None, probability: Any = None) -> float:
        return 0.0

    def contains(self, x: Any) -> bool:
        return isinstance(x, float)


class AnyJSON(spaces.Space[Any]):
    """A JSON-like value (BrowserGym's dom_object, axtree_object, ...); sampled empty."""

    def __init__(self) -> None:
        super().__init__()

    def sample(self, mask: Any = None, probability: Any = None) -> dict[str, Any]:
        return {}

    def contains(self, x: Any) -> bool:
        return isinstance(x, dict | list)


def fit(pixels: np.ndarray, viewport: tuple[int, int]) -> np.ndarray:
    """The screenshot at exactly the viewport's shape."""
    width, height = viewport
    if pixels.shape == (height, width, 3):
        return pixels
    canvas = np.zeros((height, width, 3), np.uint8)
    h, w = min(height, pixels.shape[0]), min(width, pixels.shape[1])
    canvas[:h, :w] = pixels[:h, :w]
    return canvas


@dataclass
class Outcome:
    """What one action came to: an answer ends the episode (None: it goes on)."""

    answer: str | None = None
    finished: bool = False
    error: str = ""  # shown to the agent: the action was malformed or could not be done


class WebVoyagerInterface:
    name = "webvoyager"

    def __init__(self, viewport: tuple[int, int]):
        self.viewport = viewport
        width, height = viewport
        self.observation_space = spaces.Dict({
            "screenshot": spaces.Box(0, 255, (height, width, 3), np.uint8),
            "url": spaces.Text(max_length=2048, min_length=0, charset=CHARSET),
            "text": spaces.Text(max_length=MAX_TEXT, min_length=0, charset=CHARSET),
            "instruction": spaces.Text(max_length=4096, min_length=0, charset=CHARSET),
        })  # fmt: skip
        self.last: Observation | None = None
        self.instruction = ""

    def begin(self, session: BrowserSession, instruction: str) -> None:
        self.instruction, self.last = instruction, None

    def observe(self, session: BrowserSession, error: str = "") -> dict[str, Any]:
        self.last = session.observe()
        lines = ([error] if error else []) + [f"[page] {n}" for n in self.last.notes]
        return {
            "screenshot": fit(self.last.pixels(), self.viewport),
            "url": printable(self.last.url, 2048),
            "text": printable("\n".join([*lines, self.last.text])),
            "instruction": printable(self.instruction, 4096),
        }

    def info(self) -> dict[str, Any]:
        last = self.last
        return {"marks": last.marks if last else [], "url": last.url if last else ""}

    def blank(self, note: str) -> dict[str, Any]:
        width, height = self.viewport
        return {
            "screenshot": np.zeros((height, width, 3), np.uint8),
            "url": "",
            "text": printable(note),
            "instruction": printable(self.instruction, 4096),
        }

    def act(self, session: BrowserSession, action: str) -> Outcome:
        try:
            parsed = webvoyager_grammar.parse(action)
            if parsed.kind == "answer":
                return Outcome(parsed.text, finished=True)
            session.act(parsed, self.last.marks if self.last else [])
        except NavigationFailed as e:  # carried out; the page is the browser's error page
            return Outcome(error=f"[navigation error] {e}")
        except ActionError as e:
            return Outcome(error=f"[invalid action] {e}")
        return Outcome()


@dataclass
class BrowserGymInterface:
    viewport: tuple[int, int]
    subsets: tuple[str, ...] = DEFAULT_SUBSETS
    multiaction: bool = True
    answer_ends: bool = True  # a message to the user is the task's answer (not MiniWoB's way)
    chat: list[dict[str, Any]] = field(default_factory=list)
    goal: str = ""
    steps: int = 0
    last_action: str = ""
    last_error: str = ""
    name = "browsergym"

    def __post_init__(self) -> None:
        text = Unicode()
        self.observation_space = spaces.Dict({
            "chat_messages": spaces.Sequence(spaces.Dict({
                "role": text, "timestamp": Number(),
                "message": text,
            })),
            "goal": text,
            "goal_object": spaces.Sequence(AnyJSON()),
            "open_pages_urls": spaces.Sequence(text),
            "open_pages_titles": spaces.Sequence(text),
            "active_page_index": spaces.Box(0, 255, (1,), np.int64),
            "url": text,
            "screenshot": spaces.Box(0, 255, (self.viewport[1], self.viewport[0], 3), np.uint8),
            "dom_object": AnyJSON(),
            "axtree_object": AnyJSON(),
            "extra_element_properties": AnyJSON(),
            "focused_element_bid": text,
            "last_action": text,
            "last_action_error": text,
            "axtree_txt": text,
            "pruned_html": text,
            "page_events": spaces.Sequence(text),
        })  # fmt: skip
        self._url = ""

    def begin(self, session: BrowserSession, instruction: str) -> None:
        self.goal, self.steps, self.last_action, self.last_error = instruction, 0, "", ""
        self.chat = [{"role": "user", "timestamp": 0.0, "message": instruction}]

    def _message(self, role: str, text: str) -> None:
        self.chat.append({"role": role, "timestamp": float(self.steps), "message": text})

    def observe(self, session: BrowserSession, error: str = "") -> dict[str, Any]:
        shot, state = session.page_state()
        tabs = session.tabs
        assert tabs is not None
        pages = tabs.pages
        self._url = session.page.url
        return {
            "chat_messages": tuple(dict(m) for m in self.chat),
            "goal": self.goal,
            "goal_object": ({"type": "text", "text": self.goal},),
            "open_pages_urls": tuple(p.url for p in pages),
            "open_pages_titles": tuple(p.title() for p in pages),
            "active_page_index": np.asarray([pages.index(tabs.active)], np.int64),
            "url": self._url,
            "screenshot": fit(png_pixels(shot), self.viewport),
            "dom_object": state.dom_object,
            "axtree_object": state.axtree_object,
            "extra_element_properties": state.extra_element_properties,
            "focused_element_bid": state.focused_element_bid,
            "last_action": self.last_action,
            "last_action_error": error or self.last_error,
            "axtree_txt": flatten.axtree_text(state.axtree_object, state.extra_element_properties),
            "pruned_html": flatten.pruned_html(state.dom_object),
            "page_events": tuple(tabs.take_notes()),
        }

    def info(self) -> dict[str, Any]:
        return {"url": self._url}

    def blank(self, note: str) -> dict[str, Any]:
        width, height = self.viewport
        return {
            "chat_messages": tuple(dict(m) for m in self.chat),
            "goal": self.goal,
            "goal_object": ({"type": "text", "text": self.goal},),
            "open_pages_urls": (),
            "open_pages_titles": (),
            "active_page_index": np.zeros(1, np.int64),
            "url": "",
            "screenshot": np.zeros((height, width, 3), np.uint8),
            "dom_object": {},
            "axtree_object": {},
            "extra_element_properties": {},
            "focused_element_bid": "",
            "last_action": self.last_action,
            "last_action_error": note,
            "axtree_txt": "",
            "pruned_html": "",
            "page_events": (),
        }

    def act(self, session: BrowserSession, action: str) -> Outcome:
        self.steps += 1
        self.last_action, self.last_error = action, ""
        sent: list[tuple[str, str]] = []

        def message(role: str, text: str) -> None:
            sent.append((role, text))
            self._message(role, text)

        actions = HighLevelActions(session, self.subsets, self.multiaction, message)
        try:
            actions.run(action)
        except ActionError as e:
            self.last_error = str(e)
        if any(role == "infeasible" for role, _ in sent):
            return Outcome(None, finished=True, error=self.last_error)
        answers = [text for role, text in sent if role == "assistant"]
        if answers and self.answer_ends:
            return Outcome(answers[-1], finished=True, error=self.last_error)
        return Outcome(error=self.last_error)
