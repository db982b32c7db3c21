"""Chromium inside a sandbox: its command line, starting it, and waiting for its DevTools port.

The browser runs in the sandbox, so a page reaches only what the sandbox's network mode allows
(nothing but the sandbox's own loopback in `none` mode). Chromium's own sandbox is off
(`--no-sandbox`): it needs user namespaces of its own, which the Pomona sandbox does not hand
out; the Pomona sandbox is the boundary. Host names of the local web (`*.pomona.test`) resolve to
the site server inside the same sandbox through `--host-resolver-rules`, so no DNS is involved.
"""

from __future__ import annotations

import shlex
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx

from pomona.browser_env.errors import BrowserCrashed
from pomona.browser_env.tunnel import PortForward
from pomona.orchestrator.sdk.client import Sandbox

DEVTOOLS_PORT = 9222
SITES_PORT = 8800
LOCAL_DOMAIN = "pomona.test"
PROFILE = "/tmp/pomona-chromium"
LOG = "/tmp/pomona-chromium.log"
# machine.md's flags, plus what a headless, offline, reproducible screenshot needs
FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage", "--no-first-run",
    "--no-default-browser-check", "--hide-scrollbars", "--mute-audio",
    "--force-device-scale-factor=1", "--font-render-hinting=none",
    "--disable-features=Translate,MediaRouter,OptimizationHints",
)  # fmt: skip
EXECUTABLES = ("/usr/lib/chromium/chromium", "/usr/bin/chromium", "chromium", "chromium-browser")


@dataclass(frozen=True)
class ChromiumOptions:
    viewport: tuple[int, int] = (1024, 768)
    executable: str | None = None  # default: the first of EXECUTABLES the image has
    start_timeout: float = 60.0  # a busy 2-core machine can take many seconds
    extra_flags: tuple[str, ...] = ()


def command_line(options: ChromiumOptions, executable: str) -> list[str]:
    width, height = options.viewport
    return [
        executable, *FLAGS, *options.extra_flags,
        f"--remote-debugging-port={DEVTOOLS_PORT}", "--remote-debugging-address=127.0.0.1",
        f"--user-data-dir={PROFILE}", f"--window-size={width},{height}",
        f"--host-resolver-rules=MAP *.{LOCAL_DOMAIN} 127.0.0.1:{SITES_PORT}, EXCLUDE localhost",
        "about:blank",
    ]  # fmt: skip


def find_executable(sandbox: Sandbox, options: ChromiumOptions) -> str:
    candidates = (options.executable,) if options.executable else EXECUTABLES
    probe = " || ".join(f"command -v {shlex.quote(c)}" for c in candidates)
    result = sandbox.exec(probe, timeout=30)
    found = result.stdout.strip().splitlines()
    if result.exit_code != 0 or not found:
        raise BrowserCrashed(
            f"no Chromium in the sandbox's image (looked for {', '.join(candidates)}): use the host "
            "image with Debian's `chromium` installed, or `pomona browser image` for containers"
        )
    return found[0]


class Chromium:
    """One Chromium process in a sandbox, and the local port its DevTools endpoint is reached by."""

    def __init__(self, sandbox: Sandbox, options: ChromiumOptions | None = None):
        self.sandbox = sandbox
        self.options = options or ChromiumOptions()
        self.forward: PortForward | None = None

    def start(self) -> str:
        """Start Chromium and return its browser WebSocket URL, reachable from this process."""
        executable = find_executable(self.sandbox, self.options)
        argv = shlex.join(command_line(self.options, executable))
        started = self.sandbox.exec(
            f"rm -rf {PROFILE}; setsid {argv} > {LOG} 2>&1 < /dev/null &", timeout=30
        )
        if started.exit_code != 0:
            raise BrowserCrashed(f"could not start Chromium: {started.stderr.strip()}")
        self.forward = PortForward(self.sandbox, DEVTOOLS_PORT)
        return self._wait_for_devtools()

    def _wait_for_devtools(self) -> str:
        assert self.forward is not None
        deadline = time.monotonic() + self.options.start_timeout
        while True:
            try:
                r = httpx.get(f"{self.forward.url}/json/version", timeout=10)
                if r.status_code == 200:
                    path = urlsplit(r.json()["webSocketDebuggerUrl"]).path
                    return f"ws://127.0.0.1:{self.forward.port}{path}"
            except (httpx.HTTPError, ValueError, KeyError):
                pass
            if not self.alive():
                raise BrowserCrashed(f"Chromium exited at start: {self.log_tail()}")
            if time.monotonic() > deadline:
                raise BrowserCrashed(
                    f"Chromium's DevTools port did not open in {self.options.start_timeout:g} s: "
                    f"{self.log_tail()}"
                )
            time.sleep(0.1)

    def alive(self) -> bool:
        result = self.sandbox.exec(
            f"pgrep -f -- '--user-data-dir={PROFILE}' >/dev/null", timeout=30
        )
        return result.exit_code == 0

    def log_tail(self, lines: int = 5) -> str:
        """The last lines of Chromium's log that are not its routine D-Bus complaints."""
        result = self.sandbox.exec(
            f"grep -v -e dbus -e DevTools {LOG} | tail -n {lines}", timeout=30
        )
        return result.stdout.strip() or "(no output)"

    def close(self) -> None:
        if self.forward is not None:
            self.forward.close()
            self.forward = None
