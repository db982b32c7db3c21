"""Browsers in sandboxes: Chromium runs inside a Pomona sandbox and Playwright drives it from here
over CDP through the sandbox's port tunnel (session.py), with set-of-marks observations
(marks.py) and WebVoyager's action grammar (actions.py). Failures are typed (errors.py)."""

from pomona.browser_env.actions import Action, parse
from pomona.browser_env.errors import (
    ActionError,
    BrowserCrashed,
    BrowserInfraError,
    NavigationFailed,
    PageHung,
)
from pomona.browser_env.session import BrowserSession, Observation, SessionOptions

__all__ = [
    "Action", "ActionError", "BrowserCrashed", "BrowserInfraError", "BrowserSession",
    "NavigationFailed", "Observation", "PageHung", "SessionOptions", "parse",
]  # fmt: skip
