"""WebVoyager's action grammar, parsed into actions.

    Click [N]            Type [N]; text          Scroll [N|WINDOW]; up|down
    Wait                 GoBack                  Google                  ANSWER; text

As in WebVoyager's own parser, the brackets around the content are optional and `;` or spaces
separate the parts. A model's whole reply (`Thought: ...\\nAction: ...`, possibly inside a code
fence) is accepted too: the action is the line after the last `Action:`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from pomona.browser_env.errors import ActionError

Kind = Literal["click", "type", "scroll", "wait", "goback", "google", "answer"]

GRAMMAR = (
    "Click [N] | Type [N]; text | Scroll [N or WINDOW]; up or down | Wait | GoBack | Google | "
    "ANSWER; text"
)

_PATTERNS: list[tuple[Kind, re.Pattern[str]]] = [
    ("click", re.compile(r"click\s*\[?\s*(\d+)\s*\]?\s*$", re.I)),
    ("type", re.compile(r"type\s*\[?\s*(\d+)\s*\]?\s*[;\s]\s*\[?(.*?)\]?\s*$", re.I | re.S)),
    (
        "scroll",
        re.compile(r"scroll\s*\[?\s*(\d+|window)\s*\]?\s*[;\s]\s*\[?\s*(up|down)\s*\]?\s*$", re.I),
    ),
    ("wait", re.compile(r"wait\s*$", re.I)),
    ("goback", re.compile(r"go\s*back\s*$", re.I)),
    ("google", re.compile(r"google\s*$", re.I)),
    ("answer", re.compile(r"answer\s*[;:\s]\s*\[?(.*?)\]?\s*$", re.I | re.S)),
]


@dataclass(frozen=True)
class Action:
    kind: Kind
    index: int | None = None  # the mark number; None for WINDOW and for page-wide actions
    text: str = ""  # what to type, or the answer
    direction: Literal["up", "down"] | None = None

    def __str__(self) -> str:
        label = "WINDOW" if self.index is None else str(self.index)
        return {
            "click": f"Click [{self.index}]",
            "type": f"Type [{self.index}]; {self.text}",
            "scroll": f"Scroll [{label}]; {self.direction}",
            "wait": "Wait",
            "goback": "GoBack",
            "google": "Google",
            "answer": f"ANSWER; {self.text}",
        }[self.kind]


def action_line(reply: str) -> str:
    """The action part of a model's reply: after the last `Action:`, first line (an answer keeps
    its remaining lines), code fences removed."""
    text = reply.replace("```bash", "```").strip()
    if "Action:" in text:
        text = text.rsplit("Action:", 1)[1]
    text = text.strip().strip("`").strip()
    if not re.match(r"answer\b", text, re.I):
        text = text.splitlines()[0].strip() if text else ""
    return text


def parse(reply: str) -> Action:
    """The action in `reply`, or ActionError saying what the grammar is."""
    line = action_line(reply)
    if not line:
        raise ActionError(f"no action found; reply with `Action:` followed by one of: {GRAMMAR}")
    for kind, pattern in _PATTERNS:
        m = pattern.match(line)
        if not m:
            continue
        if kind == "click":
            return Action("click", int(m.group(1)))
        if kind == "type":
            return Action("type", int(m.group(1)), m.group(2).strip())
        if kind == "scroll":
            target = m.group(1)
            index = None if target.lower() == "window" else int(target)
            return Action("scroll", index, direction=m.group(2).lower())  # type: ignore[arg-type]
        if kind == "answer":
            return Action("answer", text=m.group(1).strip())
        return Action(kind)
    raise ActionError(f"cannot parse the action {line[:200]!r}; the grammar is: {GRAMMAR}")
