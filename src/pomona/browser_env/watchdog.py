"""A time limit on browser work that nothing inside the page can outlast.

Playwright waits on Chromium without a bound of its own in places that matter: a click whose
handler never returns (`for (;;) {}`), an endless stream of dialogs, a script evaluation on a
frozen renderer. The watchdog is a second thread that, when the limit passes, breaks whatever the
work waits on, in escalating steps (each given `grace` seconds to take effect): first the page's
renderer processes are killed (Playwright's pending calls then fail with "Target crashed"), then
the connection to the browser is cut. The thread doing the work sees a Playwright error, and the
session turns it into `PageHung` (kind `timeout`) because the watchdog fired.

    dog = Watchdog([kill_renderers, cut_connection])
    with dog.limit(30, "clicking [3]"):
        page.mouse.click(x, y)
    if dog.fired: ...                       # what was cut short, e.g. "clicking [3]"
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator

GRACE = 3.0  # seconds each breaker gets before the next, stronger one


class Watchdog:
    def __init__(self, breakers: list[Callable[[], None]], grace: float = GRACE):
        self.breakers, self.grace = breakers, grace
        self.fired: str | None = None  # what the last limit cut short, until the next limit
        self.seconds = 0.0
        self._depth = 0

    @contextlib.contextmanager
    def limit(self, seconds: float, doing: str) -> Iterator[None]:
        """Bound the block to `seconds`. Nested limits are part of the outer one."""
        if self._depth:
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
            return
        self.fired, self.seconds, self._depth = None, seconds, 1
        done = threading.Event()
        guard = threading.Thread(
            target=self._watch, args=(done, seconds, doing), name="pomona-watchdog", daemon=True
        )
        guard.start()
        try:
            yield
        finally:  # not joined: a breaker still at work must not hold the caller up
            self._depth = 0
            done.set()

    def _watch(self, done: threading.Event, seconds: float, doing: str) -> None:
        if done.wait(seconds):
            return
        self.fired = doing
        for breaker in self.breakers:
            with contextlib.suppress(Exception):  # a breaker that fails leaves the next one
                breaker()
            if done.wait(self.grace):
                return
