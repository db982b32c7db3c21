"""The local web, installed into a browser's sandbox: the site server, the sites' data and, for
MiniWoB++, the task pages from the `miniwob` package.

Files go in through the SDK's files API (so this works on every runtime and over HTTP), the
server starts as the sandbox's root and writes its state log where the browser's user cannot
write. State resets with the sandbox: a fresh sandbox per episode is a fresh shop.
"""

from __future__ import annotations

import io
import json
import tarfile
import time
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from pomona.browser_env.chromium import LOCAL_DOMAIN, SITES_PORT
from pomona.browser_env.errors import BrowserCrashed
from pomona.errors import MissingExtra
from pomona.orchestrator.sdk.client import Sandbox

SERVER = Path(__file__).parent / "sites" / "server.py"
DATA = Path(__file__).resolve().parents[1] / "data" / "browser"
SITE_FILES = ("shop.json", "recipes.json", "dictionary.json")
INSTALL_DIR = "/tmp/pomona-web"
STATE_DIR = "/var/lib/pomona-web"
STATE_LOG = f"{STATE_DIR}/state.jsonl"
START_TIMEOUT = 60.0


def site_url(name: str, path: str = "/") -> str:
    return f"http://{name}.{LOCAL_DOMAIN}{path}"


def miniwob_root() -> Path:
    try:
        import miniwob
    except ImportError as e:
        raise MissingExtra(
            "MiniWoB++ needs the `miniwob` package: pip install 'pomona[browser]'"
        ) from e
    return Path(miniwob.__file__).parent / "html"


def _tar(entries: dict[str, Path]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, path in entries.items():
            tar.add(str(path), arcname=name)
    return buffer.getvalue()


@cache
def _bundle(with_miniwob: bool) -> bytes:
    entries = {"server.py": SERVER, **{f"data/{n}": DATA / n for n in SITE_FILES}}
    if with_miniwob:
        entries["miniwob"] = miniwob_root()
    return _tar(entries)


@dataclass(frozen=True)
class LocalWeb:
    """The sites (and optionally MiniWoB++'s pages) served inside the browser's sandbox."""

    miniwob: bool = False

    def install(self, sandbox: Sandbox) -> None:
        sandbox.upload_dir(INSTALL_DIR, _bundle(self.miniwob))
        argv = (
            f"python3 {INSTALL_DIR}/server.py --port {SITES_PORT} --data {INSTALL_DIR}/data "
            f"--state {STATE_LOG}" + (f" --miniwob {INSTALL_DIR}/miniwob" if self.miniwob else "")
        )
        started = sandbox.exec(
            # the sites' data and the state log are root's: an agent with a shell in the same
            # sandbox (a harness that browses) reads the sites only through the sites
            f"chown -R 0:0 {INSTALL_DIR} && chmod -R go-rwx {INSTALL_DIR} && "
            f"mkdir -p {STATE_DIR} && chmod 700 {STATE_DIR} && "
            f"(setsid {argv} > /tmp/pomona-web.log 2>&1 < /dev/null &)",
            user="root",
            timeout=60,
        )
        if started.exit_code != 0:
            raise BrowserCrashed(f"the site server did not start: {started.stderr.strip()}")
        deadline = time.monotonic() + START_TIMEOUT
        while sandbox.exec(f"grep -q '\"ready\"' {STATE_LOG}", user="root", timeout=30).exit_code:
            if time.monotonic() > deadline:
                log = sandbox.exec("tail -n 5 /tmp/pomona-web.log", timeout=30).stdout
                raise BrowserCrashed(f"the site server did not come up: {log.strip()}")
            time.sleep(0.05)


def read_state(sandbox: Sandbox) -> list[dict[str, Any]]:
    """The state log's entries, in order."""
    raw = sandbox.read_file(STATE_LOG).decode("utf-8", "replace")
    return [json.loads(line) for line in raw.splitlines() if line.strip()]
