"""A browser session: a sandbox holding Chromium (and, optionally, the web it browses), driven by
Playwright from this process over CDP through the sandbox's port tunnel.

    with BrowserSession(client, web=local_web()) as s:
        s.goto("http://shop.pomona.test/")
        obs = s.observe()                 # screenshot with set-of-marks, URL, text view
        s.act(actions.parse("Click [3]"))

Failures are typed (errors.py): Chromium dying or its connection breaking is BrowserCrashed; a
page that stays unloaded or unresponsive is PageHung, after a second try when the navigation
was a GET (safe to repeat); a mark that does not exist is an ActionError the agent gets to see. Every
piece of work runs under a watchdog (watchdog.py): nothing a page does (an endless script,
endless dialogs, a frozen renderer) holds a caller past `step_timeout`; the work then ends in
PageHung. Tabs, popups, dialogs and downloads are kept and bounded by tabs.py; a navigation
outside `allowed` (file:, chrome:, another site) is refused as the agent's ActionError.
"""

from __future__ import annotations

import contextlib
import fnmatch
import io
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlsplit

from pomona.browser_env import dom
from pomona.browser_env import marks as som
from pomona.browser_env.actions import Action
from pomona.browser_env.chromium import Chromium, ChromiumOptions
from pomona.browser_env.errors import (
    ActionError,
    BrowserCrashed,
    BrowserInfraError,
    NavigationFailed,
    PageHung,
)
from pomona.browser_env.tabs import Limits, Tabs
from pomona.browser_env.watchdog import Watchdog
from pomona.errors import SandboxError
from pomona.orchestrator.sdk.client import Sandbox, SandboxClient
from pomona.orchestrator.types import Mount

if TYPE_CHECKING:
    import numpy as np

SEARCH_HOME = "http://search.pomona.test/"  # where `Google` goes: the local web's search page
NAVIGATION_RETRIES = 5  # observations retried when a navigation replaces the page mid-way
# how Chromium names a network failure (refused, unresolvable, reset...), as Playwright reports it
NET_ERROR = re.compile(r"net::ERR_[A-Z_]+")


class Web(Protocol):
    """What a sandbox serves besides the browser (sites, task pages). `install` runs once in a
    fresh sandbox, before Chromium starts."""

    def install(self, sandbox: Sandbox) -> None: ...


@dataclass
class Observation:
    screenshot: bytes  # PNG, with the marks drawn
    url: str
    title: str
    marks: list[som.Mark] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what pages did by themselves since the last

    @property
    def text(self) -> str:
        return som.text_view(self.marks)

    def pixels(self) -> np.ndarray:
        return png_pixels(self.screenshot)


def png_pixels(png: bytes) -> np.ndarray:
    """A PNG as an (height, width, 3) uint8 array (numpy is imported here, not with the module:
    the harness registry loads this module for every `pomona` command)."""
    import numpy as np
    from PIL import Image

    with Image.open(io.BytesIO(png)) as image:
        return np.asarray(image.convert("RGB"), dtype=np.uint8)


@dataclass(frozen=True)
class SessionOptions:
    chromium: ChromiumOptions = field(default_factory=ChromiumOptions)
    image: str = "host"
    network: str = "none"  # the page reaches only the sandbox's own loopback
    gateway: str | None = None  # network="gateway": the model proxy, for a harness that browses
    mounts: tuple[Mount, ...] = ()  # e.g. the harness payload
    page_timeout: float = 30.0  # seconds for a page to load or answer
    step_timeout: float = 120.0  # the watchdog: no piece of work (a step, a reset) takes longer
    settle: float = 0.3  # seconds to let a page react after an action (WebVoyager sleeps 3-5)
    limits: Limits = field(default_factory=Limits)  # open tabs, downloads
    memory: str | None = "2Gi"
    disk: str | None = "1Gi"  # bounds what downloads can write (None where the runtime has none)
    pids: int | None = 1024
    ttl: float = 3600
    search_home: str = SEARCH_HOME


class _Driver:
    """Playwright's sync API allows one instance per thread, so each thread has one driver (a
    child process) that its open sessions share, stopped when the last of them closes: no driver
    outlives the sessions that needed it, whichever threads come and go."""

    def __init__(self) -> None:
        self.instance: Any = None
        self.users = 0

    def acquire(self) -> Any:
        if self.instance is None:
            from playwright.sync_api import sync_playwright

            self.instance = sync_playwright().start()
        self.users += 1
        return self.instance

    def release(self) -> None:
        self.users -= 1
        if self.users <= 0 and self.instance is not None:
            instance, self.instance, self.users = self.instance, None, 0
            with contextlib.suppress(Exception):
                instance.stop()


_threads = threading.local()


def _driver() -> _Driver:
    """The calling thread's driver."""
    if not hasattr(_threads, "driver"):
        _threads.driver = _Driver()
    return _threads.driver


def _playwright_error() -> type[Exception]:
    from playwright.sync_api import Error

    return Error


class BrowserSession:
    def __init__(
        self,
        client: SandboxClient,
        web: Web | None = None,
        options: SessionOptions | None = None,
        labels: dict[str, str] | None = None,
    ):
        self.client, self.web = client, web
        self.options = options or SessionOptions()
        self.labels = labels or {}
        self.sandbox: Sandbox | None = None
        self.chromium: Chromium | None = None
        self._driver: _Driver | None = None
        self._pw: Any = None
        self._browser: Any = None
        self._context: Any = None
        self.tabs: Tabs | None = None
        self._cdp: tuple[Any, Any] | None = None  # (page, its CDP session), made once per page
        self._crashed = False
        self._last_navigation_method = "GET"
        self.watchdog = Watchdog([self._kill_renderers, self._cut_connection])
        # where the agent may go (the task's sites): fnmatch patterns of http(s) origins such as
        # "http://*.pomona.test"; empty, any http(s) origin
        self.allowed: tuple[str, ...] = ()

    # --- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> BrowserSession:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> BrowserSession:
        """A fresh sandbox, its web, Chromium, and a connected page. Cleans up on failure."""
        o = self.options
        try:
            self.sandbox = self.client.create_sandbox(
                o.image,
                network=o.network,
                gateway=o.gateway,
                mounts=list(o.mounts),
                timeout=o.ttl,
                memory=o.memory,
                pids=o.pids,
                disk=o.disk,
                labels={"role": "browser", **self.labels},
            )
            if self.web is not None:
                self.web.install(self.sandbox)
            self.chromium = Chromium(self.sandbox, o.chromium)
            ws = self.chromium.start()
            self._driver = _driver()
            self._pw = self._driver.acquire()
            self._browser = self._pw.chromium.connect_over_cdp(ws, timeout=o.page_timeout * 1000)
            self.new_page()
        except SandboxError as e:
            self.close()
            raise BrowserCrashed(f"the browser's sandbox failed: {e}") from e
        except BaseException:
            self.close()
            raise
        return self

    def new_page(self) -> None:
        """A fresh browser context (no cookies, storage, history or tabs) with one page."""
        if self._context is not None:
            with contextlib.suppress(Exception):
                self._context.close()
        width, height = self.options.chromium.viewport
        self._context = self._browser.new_context(
            viewport={"width": width, "height": height}, accept_downloads=True
        )
        self._context.set_default_timeout(self.options.page_timeout * 1000)
        self._crashed = False
        self._cdp = None
        self.tabs = Tabs(self._context, self._prepare, self.options.limits)
        self._context.new_page()

    @property
    def page(self) -> Any:
        """The active tab."""
        if self.tabs is None or self.tabs.active is None:
            raise BrowserCrashed("the browser has no open page (the session is not started)")
        return self.tabs.active

    def _prepare(self, page: Any) -> None:
        page.on("crash", lambda _: setattr(self, "_crashed", True))
        page.on("request", self._note_request)

    def _note_request(self, request: Any) -> None:
        with contextlib.suppress(Exception):  # a request of a page that is closing
            if request.is_navigation_request() and request.frame == request.frame.page.main_frame:
                self._last_navigation_method = request.method

    def close(self) -> None:
        with contextlib.suppress(Exception):
            if self._browser is not None:
                self._browser.close()
        if self._pw is not None and self._driver is not None:
            self._driver.release()
        self._browser = self._pw = self._context = self.tabs = None
        if self.chromium is not None:
            self.chromium.close()
            self.chromium = None
        if self.sandbox is not None:
            with contextlib.suppress(SandboxError):
                self.sandbox.delete()
            self.sandbox = None

    # --- failures ----------------------------------------------------------------------------

    def _typed(self, error: Exception, doing: str) -> BrowserInfraError:
        """A Playwright error as the infra failure it stands for."""
        message = str(error).splitlines()[0] if str(error) else type(error).__name__
        if self.watchdog.fired:
            return self._overdue()
        if self._crashed or not self._browser or not self._browser.is_connected():
            return BrowserCrashed(f"the browser died while {doing}: {message}")
        if "Timeout" in type(error).__name__ or "timeout" in message.lower():
            return PageHung(
                f"the page did not answer within {self.options.page_timeout:g} s "
                f"while {doing}: {message}"
            )
        if self.chromium is not None and not self.chromium.alive():
            return BrowserCrashed(f"Chromium exited while {doing}: {message}")
        return BrowserCrashed(f"the browser failed while {doing}: {message}")

    def _overdue(self) -> PageHung:
        return PageHung(
            f"{self.watchdog.fired} did not finish within {self.watchdog.seconds:g} s (the "
            "step's time limit); the page was stopped"
        )

    def _guard(self, doing: str, work: Any) -> Any:
        with self.limit(doing):
            try:
                if self._crashed:
                    raise BrowserCrashed(f"the page's renderer crashed before {doing}")
                result = work()
            except (BrowserInfraError, ActionError):
                if self.watchdog.fired:
                    raise self._overdue() from None
                raise
            except _playwright_error() as e:
                raise self._typed(e, doing) from e
            except SandboxError as e:
                raise BrowserCrashed(f"the browser's sandbox was lost while {doing}: {e}") from e
            if self.watchdog.fired:
                raise self._overdue()
            return result

    @contextlib.contextmanager
    def limit(self, doing: str) -> Iterator[None]:
        """Run the block under the watchdog: within `step_timeout` whatever the page does. A
        caller doing several things as one step (act, then observe) wraps them all."""
        with self.watchdog.limit(self.options.step_timeout, doing):
            yield
        if self.watchdog.fired:
            raise self._overdue()

    def _kill_renderers(self) -> None:
        """The watchdog's first resort: end the page's renderer processes (the browser lives)."""
        if self.sandbox is not None:
            self.sandbox.exec("pkill -9 -f -- --type=renderer", timeout=10)

    def _cut_connection(self) -> None:
        """The last resort: close the connection to the browser under Playwright."""
        if self.chromium is not None and self.chromium.forward is not None:
            self.chromium.forward.close()

    def check_allowed(self, url: str) -> None:
        """ActionError unless the agent may go to `url`: http(s) only (never file:, chrome:,
        data:...), on an origin `allowed` names when it names any."""
        parts = urlsplit(url)
        if url == "about:blank":
            return
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ActionError(
                f"{url!r} cannot be opened: only http(s) pages of the task's sites are allowed"
            )
        origin = f"{parts.scheme}://{parts.hostname}"
        if self.allowed and not any(fnmatch.fnmatch(origin, p) for p in self.allowed):
            raise ActionError(
                f"{url!r} is outside the sites this task allows ({', '.join(self.allowed)})"
            )

    # --- navigation --------------------------------------------------------------------------

    def goto(self, url: str) -> None:
        """Open `url` in the active tab (ActionError when it is not allowed)."""
        self.check_allowed(url)
        self._guard(f"opening {url}", lambda: self._load(lambda: self.page.goto(url), safe=True))

    def _load(self, navigate: Any, safe: bool) -> None:
        """Run a navigation and wait for the load; a timed-out GET is tried once more (a
        navigation that never committed is made again, a page that never finished loading is
        reloaded), and a page the network refused is the agent's NavigationFailed (the browser
        shows its error page)."""
        before = self.page.url
        try:
            navigate()
        except _playwright_error() as e:
            refused = NET_ERROR.search(str(e))
            if refused and self._browser is not None and self._browser.is_connected():
                raise NavigationFailed(
                    f"the page could not be loaded ({refused.group(0)}); the browser shows its "
                    "error page"
                ) from e
            if not (safe and "Timeout" in type(e).__name__):
                raise
            try:
                if self.page.url == before:
                    navigate()
                else:
                    self.page.reload()
            except _playwright_error() as again:
                raise PageHung(
                    f"the page did not load within {self.options.page_timeout:g} s, "
                    f"nor when tried once more: {str(again).splitlines()[0]}"
                ) from e

    def settle(self) -> None:
        """Wait for the load an action may have started; reload once a GET that hangs."""
        time.sleep(self.options.settle)
        try:
            self.page.wait_for_load_state("load")
        except _playwright_error() as e:
            if "Timeout" not in type(e).__name__ or self._last_navigation_method != "GET":
                raise
            self.page.reload()

    # --- observation -------------------------------------------------------------------------

    def observe(self) -> Observation:
        def work() -> Observation:
            for attempt in range(NAVIGATION_RETRIES):
                self.page.wait_for_load_state("load")
                try:
                    raw = self.page.evaluate(som.LABEL_SCRIPT)
                    shot = self.page.screenshot(type="png", animations="disabled")
                    self.page.evaluate(som.CLEAR_SCRIPT)
                    notes = self.tabs.take_notes() if self.tabs else []
                    return Observation(
                        shot, self.page.url, self.page.title(), som.parse_marks(raw), notes
                    )
                except _playwright_error() as e:
                    # a navigation an action started replaced the page mid-observation: the
                    # observation is read-only, so it is safe to take again on the new page
                    if "context was destroyed" not in str(e) or attempt + 1 == NAVIGATION_RETRIES:
                        raise
                    time.sleep(self.options.settle)
            raise AssertionError("unreachable")

        return self._guard("observing the page", work)

    def page_state(self) -> tuple[bytes, dom.PageState]:
        """BrowserGym's observation of the active tab: its screenshot (no marks drawn) and its
        DOM snapshot, accessibility tree and element properties, all with bids (dom.py)."""

        def work() -> tuple[bytes, dom.PageState]:
            page = self.page
            for attempt in range(NAVIGATION_RETRIES):
                page.wait_for_load_state("load")
                try:
                    if self._cdp is None or self._cdp[0] is not page:
                        self._cdp = (page, page.context.new_cdp_session(page))
                    state = dom.capture(page, self._cdp[1])
                    return page.screenshot(type="png", animations="disabled"), state
                except _playwright_error() as e:
                    if "context was destroyed" not in str(e) or attempt + 1 == NAVIGATION_RETRIES:
                        raise
                    time.sleep(self.options.settle)
            raise AssertionError("unreachable")

        return self._guard("observing the page", work)

    def carry_out(self, doing: str, work: Any) -> None:
        """Run one of the agent's actions, then let the page settle. A Playwright error while
        the browser is sound is the agent's ActionError (an element that never became
        clickable, a key that does not exist), as BrowserGym reports it."""

        def act() -> None:
            try:
                work()
            except _playwright_error() as e:
                if self._broken():
                    raise
                first = str(e).splitlines()[0] if str(e) else ""
                raise ActionError(f"{type(e).__name__}: {first}") from e
            self.settle()

        self._guard(doing, act)

    def usable(self) -> bool:
        """Whether the browser is still there to open a new page in (after a page hung and was
        stopped it is; after a crash or a cut connection it is not)."""
        return bool(self._browser and self._browser.is_connected() and self.sandbox is not None)

    def _broken(self) -> bool:
        return bool(
            self.watchdog.fired
            or self._crashed
            or not self._browser
            or not self._browser.is_connected()
        )

    def evaluate(self, script: str, arg: Any = None) -> Any:
        return self._guard("running a script in the page", lambda: self.page.evaluate(script, arg))

    # --- actions -----------------------------------------------------------------------------

    def act(self, action: Action, marks: list[som.Mark]) -> None:
        """Carry out `action` against the marks of the last observation."""

        def mark() -> som.Mark:
            if action.index is None or not 0 <= action.index < len(marks):
                raise ActionError(
                    f"there is no element [{action.index}] on the page; the labels "
                    f"go from 0 to {len(marks) - 1}"
                    if marks
                    else "there are no labelled elements on the page"
                )
            return marks[action.index]

        def work() -> None:
            page = self.page
            if action.kind == "click":
                page.mouse.click(*mark().center)
            elif action.kind == "type":
                target = mark()
                if not target.typeable:
                    raise ActionError(
                        f"element [{target.index}] is a <{target.tag}>, not a text "
                        "field: Type needs an input or textarea"
                    )
                page.mouse.click(*target.center)
                page.keyboard.press("Control+A")
                page.keyboard.press("Backspace")
                page.keyboard.type(action.text)
                page.keyboard.press("Enter")
            elif action.kind == "scroll":
                sign = 1 if action.direction == "down" else -1
                if action.index is None:
                    page.evaluate("(s) => window.scrollBy(0, s * window.innerHeight * 2 / 3)", sign)
                else:
                    page.mouse.move(*mark().center)
                    page.mouse.wheel(0, sign * mark().box[3] * 2 / 3 or sign * 200)
            elif action.kind == "goback":
                # a page restored from the back-forward cache fires no load: settle() waits
                self._load(lambda: page.go_back(wait_until="commit"), safe=True)
            elif action.kind == "google":
                self._load(lambda: page.goto(self.options.search_home), safe=True)
            elif action.kind == "wait":
                time.sleep(max(self.options.settle, 1.0))
            if action.kind != "answer":
                self.settle()

        self._guard(f"doing {action}", work)
