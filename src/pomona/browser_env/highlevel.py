"""BrowserGym's high-level action set: the same action strings its agents emit (`click("12")`,
`fill("a4", "text")`, `send_msg_to_user("...")`), parsed here and carried out on a
BrowserSession by bid.

Parsing follows BrowserGym's loose rule: every Python-like call with literal arguments found in
the text is an action (a model's reasoning around ```click("12")``` is skipped, as are calls in
`#` comments), and with `multiaction=False` more than one is an error. Arguments are read with
`ast.literal_eval` only: an action string is never executed as code, so an agent reaches the
page and nothing else (BrowserGym runs the actions it builds as Python in its own process).

Subsets are BrowserGym's: chat, infeas, bid, coord, nav, tab (noop is always there). An action
that cannot be done (no element with that bid, a hidden element, a tab that does not exist, a
site outside the task's) is the agent's ActionError, shown as `last_action_error`; only a
browser that fails is an infra failure.
"""

from __future__ import annotations

import ast
import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pomona.browser_env.errors import ActionError

SUBSETS: dict[str, tuple[str, ...]] = {
    "chat": ("send_msg_to_user",),
    "infeas": ("report_infeasible",),
    "bid": ("scroll", "fill", "select_option", "click", "dblclick", "hover", "press", "focus",
            "clear", "drag_and_drop", "upload_file"),
    "coord": ("scroll_at", "mouse_move", "mouse_up", "mouse_down", "mouse_click",
              "mouse_dblclick", "mouse_drag_and_drop", "mouse_upload_file", "keyboard_down",
              "keyboard_up", "keyboard_press", "keyboard_type", "keyboard_insert_text"),
    "nav": ("go_back", "go_forward", "goto"),
    "tab": ("tab_close", "tab_focus", "new_tab"),
}  # fmt: skip
DEFAULT_SUBSETS = ("chat", "infeas", "bid", "nav", "tab")  # BrowserGym's default action set
ACTION_TIMEOUT_MS = 2000  # an element must become actionable this fast (BrowserGym: 500)
MAX_NOOP_MS = 10_000

_CALL = re.compile(r"\b([A-Za-z_]\w*)\s*\(")


@dataclass(frozen=True)
class Call:
    name: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        parts = [repr(a) for a in self.args] + [f"{k}={v!r}" for k, v in self.kwargs.items()]
        return f"{self.name}({', '.join(parts)})"


def _in_comment(text: str, at: int) -> bool:
    line = text[text.rfind("\n", 0, at) + 1 : at]
    quote = None
    for c in line:
        if quote:
            quote = None if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c == "#":
            return True
    return False


def _call_at(text: str, start: int) -> tuple[Call, int] | None:
    """The call starting at `start`, if the text from there parses as one with literal
    arguments, and where it ends."""
    end = start
    while (end := text.find(")", end + 1)) != -1:
        try:
            tree = ast.parse(text[start : end + 1], mode="eval")
        except SyntaxError:
            continue
        node = tree.body
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
            return None
        try:
            args = tuple(ast.literal_eval(a) for a in node.args)
            kwargs = {k.arg: ast.literal_eval(k.value) for k in node.keywords if k.arg}
        except ValueError:
            return None
        if len(kwargs) != len(node.keywords):
            return None  # **kwargs
        return Call(node.func.id, args, kwargs), end + 1
    return None


def parse(text: str) -> list[Call]:
    """Every action call in `text`, in order (no validation against an action set)."""
    calls: list[Call] = []
    at = 0
    while m := _CALL.search(text, at):
        found = None if _in_comment(text, m.start()) else _call_at(text, m.start())
        if found is None:
            at = m.end()
            continue
        calls.append(found[0])
        at = found[1]
    return calls


class HighLevelActions:
    """Carries BrowserGym actions out on `session` (a BrowserSession). `chat` collects what the
    agent sent to the user: [(role, text)], role `assistant` or `infeasible`."""

    def __init__(
        self,
        session: Any,
        subsets: tuple[str, ...] = DEFAULT_SUBSETS,
        multiaction: bool = True,
        on_message: Callable[[str, str], None] = lambda role, text: None,
    ):
        unknown = [s for s in subsets if s not in SUBSETS]
        if unknown:
            raise ActionError(f"unknown action subsets {unknown}; BrowserGym's are {list(SUBSETS)}")
        self.session, self.multiaction, self.on_message = session, multiaction, on_message
        self.allowed = {"noop", *(name for s in subsets for name in SUBSETS[s])}

    def describe(self) -> str:
        """The allowed actions, one signature a line."""
        return "\n".join(
            f"{name}{inspect.signature(getattr(self, '_' + name))}" for name in sorted(self.allowed)
        )

    def calls(self, text: str) -> list[Call]:
        """The calls `text` asks for, checked against the action set (ActionError if none fit)."""
        calls = parse(text)
        if not calls:
            raise ActionError("Received an empty action: write one call such as click('12')")
        if len(calls) > 1 and not self.multiaction:
            raise ActionError("Received a multi-action, only single-actions are allowed.")
        for call in calls:
            if call.name not in self.allowed:
                raise ActionError(
                    f"Invalid action type {call.name!r}; allowed: {', '.join(sorted(self.allowed))}"
                )
        return calls

    def run(self, text: str) -> list[Call]:
        """Parse and carry out `text`. ActionError for what the agent got wrong (the page may
        have changed by then, as with a browser); BrowserInfraError when the browser failed."""
        calls = self.calls(text)
        for call in calls:
            method = getattr(self, "_" + call.name)
            try:
                bound = inspect.signature(method).bind(*call.args, **call.kwargs)
            except TypeError as e:
                raise ActionError(f"{call}: {e}") from e
            self.session.carry_out(str(call), lambda m=method, b=bound: m(*b.args, **b.kwargs))
        return calls

    # --- looking things up --------------------------------------------------------------------

    def _element(self, bid: Any) -> Any:
        if not isinstance(bid, str):
            raise ActionError(f"a bid is a string, such as '12' (got {bid!r})")
        frames = re.match(r"^((?:[a-z][A-Z]*)*)(\d*)$", bid)
        if frames is None or not bid:
            raise ActionError(f"{bid!r} is not a bid (a bid looks like '12' or 'a12')")
        scope = self.session.page
        prefix = ""
        for letter in re.findall(r"[a-z][A-Z]*", frames.group(1)):
            prefix += letter
            scope = scope.frame_locator(f'[bid="{prefix}"]')
        return scope.locator(f'[bid="{bid}"]').first

    # --- the actions (their parameters are BrowserGym's) --------------------------------------

    def _noop(self, wait_ms: float = 1000) -> None:
        self.session.page.wait_for_timeout(min(float(wait_ms), MAX_NOOP_MS))

    def _send_msg_to_user(self, text: str) -> None:
        self.on_message("assistant", str(text))

    def _report_infeasible(self, reason: str) -> None:
        self.on_message("infeasible", str(reason))

    def _scroll(self, delta_x: float, delta_y: float) -> None:
        self.session.page.mouse.wheel(float(delta_x), float(delta_y))

    def _fill(self, bid: str, value: str, enable_autocomplete_menu: bool = False) -> None:
        element = self._element(bid)
        if enable_autocomplete_menu and value:
            element.fill(value[:-1], timeout=ACTION_TIMEOUT_MS)
            element.press_sequentially(value[-1], timeout=ACTION_TIMEOUT_MS)
        else:
            element.fill(str(value), timeout=ACTION_TIMEOUT_MS)

    def _select_option(self, bid: str, options: str | list[str]) -> None:
        self._element(bid).select_option(options, timeout=ACTION_TIMEOUT_MS)

    def _click(self, bid: str, button: str = "left", modifiers: list[str] | None = None) -> None:
        self._element(bid).click(
            button=button, modifiers=modifiers or [], timeout=ACTION_TIMEOUT_MS
        )

    def _dblclick(self, bid: str, button: str = "left", modifiers: list[str] | None = None) -> None:
        self._element(bid).dblclick(
            button=button, modifiers=modifiers or [], timeout=ACTION_TIMEOUT_MS
        )

    def _hover(self, bid: str) -> None:
        self._element(bid).hover(timeout=ACTION_TIMEOUT_MS)

    def _press(self, bid: str, key_comb: str) -> None:
        self._element(bid).press(key_comb, timeout=ACTION_TIMEOUT_MS)

    def _focus(self, bid: str) -> None:
        self._element(bid).focus(timeout=ACTION_TIMEOUT_MS)

    def _clear(self, bid: str) -> None:
        self._element(bid).clear(timeout=ACTION_TIMEOUT_MS)

    def _drag_and_drop(self, from_bid: str, to_bid: str) -> None:
        source, target = self._element(from_bid), self._element(to_bid)
        source.hover(timeout=ACTION_TIMEOUT_MS)
        self.session.page.mouse.down()
        target.hover(timeout=ACTION_TIMEOUT_MS)
        self.session.page.mouse.up()

    def _upload_file(self, bid: str, file: str | list[str]) -> None:
        raise ActionError(
            "upload_file is not offered: the browser runs in a sandbox that holds none of the "
            "agent's files"
        )

    def _scroll_at(self, x: int, y: int, dx: int, dy: int) -> None:
        self.session.page.mouse.move(float(x), float(y))
        self.session.page.mouse.wheel(float(dx), float(dy))

    def _mouse_move(self, x: float, y: float) -> None:
        self.session.page.mouse.move(float(x), float(y))

    def _mouse_up(self, x: float, y: float, button: str = "left") -> None:
        self.session.page.mouse.move(float(x), float(y))
        self.session.page.mouse.up(button=button)

    def _mouse_down(self, x: float, y: float, button: str = "left") -> None:
        self.session.page.mouse.move(float(x), float(y))
        self.session.page.mouse.down(button=button)

    def _mouse_click(self, x: float, y: float, button: str = "left") -> None:
        self.session.page.mouse.click(float(x), float(y), button=button)

    def _mouse_dblclick(self, x: float, y: float, button: str = "left") -> None:
        self.session.page.mouse.dblclick(float(x), float(y), button=button)

    def _mouse_drag_and_drop(self, from_x: float, from_y: float, to_x: float, to_y: float) -> None:
        mouse = self.session.page.mouse
        mouse.move(float(from_x), float(from_y))
        mouse.down()
        mouse.move(float(to_x), float(to_y))
        mouse.up()

    def _mouse_upload_file(self, x: float, y: float, file: str | list[str]) -> None:
        self._upload_file("", file)

    def _keyboard_down(self, key: str) -> None:
        self.session.page.keyboard.down(key)

    def _keyboard_up(self, key: str) -> None:
        self.session.page.keyboard.up(key)

    def _keyboard_press(self, key_comb: str) -> None:
        self.session.page.keyboard.press(key_comb)

    def _keyboard_type(self, text: str) -> None:
        self.session.page.keyboard.type(str(text))

    def _keyboard_insert_text(self, text: str) -> None:
        self.session.page.keyboard.insert_text(str(text))

    def _go_back(self) -> None:
        self.session.page.go_back(wait_until="commit")  # the session waits for the load

    def _go_forward(self) -> None:
        self.session.page.go_forward(wait_until="commit")

    def _goto(self, url: str) -> None:
        self.session.goto(str(url))  # refused sites and unreachable pages are ActionErrors

    def _new_tab(self) -> None:
        self.session.tabs.open()

    def _tab_focus(self, index: int) -> None:
        if isinstance(index, bool) or not isinstance(index, int):
            raise ActionError(f"tab_focus takes a tab's number, such as 0 (got {index!r})")
        self.session.tabs.focus(index)

    def _tab_close(self) -> None:
        self.session.tabs.close_active()
