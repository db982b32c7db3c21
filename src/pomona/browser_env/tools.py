"""The browser as tools: WebVoyager's actions offered to any harness through MCP, so a harness
browses with the same observations and the same action space as the WebVoyager loop and the same
graders judge both.

    browser_observe                              the page: set-of-marks screenshot + elements
    browser_click {index}                        Click [N]
    browser_type {index, text}                   Type [N]; text
    browser_scroll {target, direction}           Scroll [N|WINDOW]; up|down
    browser_go_back / browser_search / browser_wait

Every tool answers with the page as it is afterwards. `BrowserTools` carries the calls out on a
BrowserSession (on the thread that owns it) and keeps what the judges and the official layouts
need: every screenshot, and every action with the screenshot it was taken on.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any

from pomona.browser_env.actions import Action
from pomona.browser_env.errors import ActionError, NavigationFailed
from pomona.browser_env.session import BrowserSession, Observation

SERVER_NAME = "webpage"
"""The MCP server's name (Claude Code shows mcp__webpage__browser_click). Not `browser`: Hermes
offers none of a server's tools when its name is one of Hermes' own toolsets."""

_INDEX = {"type": "integer", "minimum": 0, "description": "the element's number on the page"}
_NO_ARGUMENTS: dict[str, Any] = {"type": "object", "properties": {}}

TOOLS: list[dict[str, Any]] = [
    {
        "name": "browser_observe",
        "description": "Show the current page: a screenshot in which every element you can act "
        "on has a numbered box, the URL, and the numbered elements as text.",
        "input_schema": _NO_ARGUMENTS,
    },
    {
        "name": "browser_click",
        "description": "Click element N (a link, button, checkbox, tab...).",
        "input_schema": {"type": "object", "properties": {"index": _INDEX}, "required": ["index"]},
    },
    {
        "name": "browser_type",
        "description": "Clear text field N, type the text into it, then press Enter.",
        "input_schema": {
            "type": "object",
            "properties": {"index": _INDEX, "text": {"type": "string"}},
            "required": ["index", "text"],
        },
    },
    {
        "name": "browser_scroll",
        "description": "Scroll the whole window (target WINDOW) or the scrollable element N.",
        "input_schema": {
            "type": "object",
            "properties": {
                "target": {"type": "string", "description": "WINDOW, or an element's number"},
                "direction": {"type": "string", "enum": ["up", "down"]},
            },
            "required": ["target", "direction"],
        },
    },
    {
        "name": "browser_go_back",
        "description": "Return to the previous page.",
        "input_schema": _NO_ARGUMENTS,
    },
    {
        "name": "browser_search",
        "description": "Open the search engine's start page.",
        "input_schema": _NO_ARGUMENTS,
    },
    {
        "name": "browser_wait",
        "description": "Wait a few seconds for the page, then show it.",
        "input_schema": _NO_ARGUMENTS,
    },
]
TOOL_NAMES = tuple(t["name"] for t in TOOLS)
_PAGE_WIDE = {"browser_go_back": "goback", "browser_search": "google", "browser_wait": "wait"}


def _index(arguments: dict[str, Any]) -> int:
    value = arguments.get("index")
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ActionError(f"`index` must be an element's number, not {value!r}")
    return value


def action_of(name: str, arguments: dict[str, Any] | None) -> Action | None:
    """The action a tool call stands for (None for browser_observe); ActionError when the call
    names no tool or its arguments do not fit."""
    args = arguments if isinstance(arguments, dict) else {}
    if name == "browser_observe":
        return None
    if name == "browser_click":
        return Action("click", _index(args))
    if name == "browser_type":
        text = args.get("text")
        if not isinstance(text, str):
            raise ActionError("browser_type needs `text`, a string")
        return Action("type", _index(args), text)
    if name == "browser_scroll":
        direction = str(args.get("direction", "")).lower()
        if direction not in ("up", "down"):
            raise ActionError("browser_scroll needs `direction`: up or down")
        target = str(args.get("target", "WINDOW")).strip()
        index = None if target.upper() == "WINDOW" else _index({"index": target})
        return Action("scroll", index, direction=direction)  # type: ignore[arg-type]
    if name in _PAGE_WIDE:
        return Action(_PAGE_WIDE[name])  # type: ignore[arg-type]
    raise ActionError(f"no tool {name!r}; the browser's tools are {', '.join(TOOL_NAMES)}")


def tool_call_of(action: Action) -> tuple[str, dict[str, Any]]:
    """The tool call that carries out `action` (the oracle's reference actions as MCP calls)."""
    if action.kind == "click":
        return "browser_click", {"index": action.index}
    if action.kind == "type":
        return "browser_type", {"index": action.index, "text": action.text}
    if action.kind == "scroll":
        target = "WINDOW" if action.index is None else str(action.index)
        return "browser_scroll", {"target": target, "direction": action.direction}
    by_kind = {kind: name for name, kind in _PAGE_WIDE.items()}
    if action.kind in by_kind:
        return by_kind[action.kind], {}
    raise ActionError(f"{action} is the final answer, not a tool call")


def page_content(obs: Observation, note: str = "") -> list[dict[str, Any]]:
    """An observation as MCP content: the elements as text, then the screenshot."""
    text = f"{note}URL: {obs.url}\nTitle: {obs.title}\nNumbered elements:\n{obs.text or '(none)'}"
    data = base64.b64encode(obs.screenshot).decode()
    return [
        {"type": "text", "text": text},
        {"type": "image", "data": data, "mimeType": "image/png"},
    ]


@dataclass
class BrowserTools:
    """Carries tool calls out on `session`; numbers refer to the last page shown."""

    session: BrowserSession
    last: Observation | None = None
    screenshots: list[bytes] = field(default_factory=list)  # one per observation, in order
    steps: list[dict[str, Any]] = field(default_factory=list)  # {action, thought, screenshot}
    calls: int = 0

    def observe(self) -> Observation:
        self.last = self.session.observe()
        self.screenshots.append(self.last.screenshot)
        return self.last

    def call(self, name: str, arguments: dict[str, Any] | None) -> dict[str, Any]:
        """{"content": [...], "is_error": bool}. A malformed call is the agent's error, shown to
        it; a browser failure (BrowserInfraError) is raised: it ends the episode as infra."""
        self.calls += 1
        if self.last is None:
            self.observe()
        assert self.last is not None
        note = ""
        try:
            action = action_of(name, arguments)
            if action is not None:
                step = {
                    "action": str(action),
                    "thought": "",
                    "screenshot": len(self.screenshots) - 1,
                }
                try:
                    self.session.act(action, self.last.marks)
                except NavigationFailed as e:  # carried out: the agent sees the error page
                    note = f"Error: {e}\n"
                self.steps.append(step)
        except ActionError as e:
            return {"content": [{"type": "text", "text": f"Error: {e}"}], "is_error": True}
        return {"content": page_content(self.observe(), note), "is_error": False}
