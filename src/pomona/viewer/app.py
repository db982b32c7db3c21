"""The viewer's web app: static pages (plain HTML and JavaScript modules, no build step) over a
read-only JSON API computed from a `StoreIndex`.

Pages: `/` runs, `/leaderboard`, `/run?run=ID`, `/episode?key=KEY`, `/compare?a=KEY&b=KEY`.
Every API answer carries `X-Store-Version`; pages poll `/api/overview` and fetch again only
when the version moved, which is how a live run's new rows appear without a reload.

Everything shown comes from trajectories, which are untrusted (models and tools write them):
pages only ever insert text (never HTML) and a strict Content-Security-Policy forbids inline
and foreign scripts, so a recorded `<script>` stays text.
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import os
import socket
import sys
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles

from pomona.viewer.index import StoreIndex
from pomona.viewer.routes import episodes, runs

STATIC = Path(__file__).parent / "static"
PAGES = {"/": ("Runs", "runs.js"), "/leaderboard": ("Leaderboard", "leaderboard.js"),
         "/run": ("Run", "run.js"), "/episode": ("Episode", "episode.js"),
         "/compare": ("Compare episodes", "compare.js")}  # fmt: skip
"""Route -> (title, script): every page is the one template with its own module."""
SECURITY_HEADERS = {
    "content-security-policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
    "img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-store",
}


def create_app(directory: str | os.PathLike[str], refresh_interval: float = 1.0) -> FastAPI:
    """The viewer over one trajectory directory (it may not exist yet: it is shown once it does)."""
    index = StoreIndex(directory, refresh_interval)
    app = FastAPI(title="pomona view", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.index = index

    @app.middleware("http")
    async def headers(request: Request, call_next: Any) -> Response:
        if request.method not in ("GET", "HEAD"):
            return JSONResponse({"error": "read_only", "detail": "the viewer is read-only"}, 405)
        response = await call_next(request)
        for name, value in SECURITY_HEADERS.items():
            response.headers.setdefault(name, value)
        return response

    for route, (title, script) in PAGES.items():
        page = _page(title, script, route)
        app.add_api_route(route, page, methods=["GET", "HEAD"], include_in_schema=False)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    for router in (runs.router, episodes.router):
        app.include_router(router)
    return app


def _page(title: str, script: str, route: str) -> Any:
    """The page's HTML: the shared template with its title, script and current nav link."""
    current = ' aria-current="page"'
    html = (Path(__file__).parent / "page.html").read_text().format(
        title=title, script=script, runs_current=current if route == "/" else "",
        leaderboard_current=current if route == "/leaderboard" else "",
    )  # fmt: skip

    async def page() -> HTMLResponse:
        return HTMLResponse(html)

    return page


# --- the command line ------------------------------------------------------------------------


def _loopback(host: str) -> bool:
    with contextlib.suppress(ValueError):
        return ipaddress.ip_address(host).is_loopback
    return host == "localhost"


def add_view_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register `view` on a `pomona` subparsers object."""
    p = subparsers.add_parser("view", help="browse runs, the leaderboard and episodes in a browser")
    p.add_argument("runs_dir", nargs="?", type=Path, default=Path("pomona-runs"),
                   help="the trajectory directory (default ./pomona-runs)")  # fmt: skip
    p.add_argument("--port", type=int, default=8765)
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="the address to serve on; the viewer has no login, so keep it local",
    )
    p.set_defaults(func=_run_view)
    return p


def _listen(host: str, port: int) -> socket.socket:
    """A listening socket, so a taken port is said plainly before anything is served."""
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def _run_view(args: argparse.Namespace) -> int:
    import uvicorn

    try:
        sock = _listen(args.host, args.port)
    except OSError as e:
        print(f"pomona view: cannot listen on {args.host}:{args.port} ({e.strerror or e}); "
              "choose another --port", file=sys.stderr)  # fmt: skip
        return 2
    if not _loopback(args.host):
        print(f"warning: serving {args.host}: anyone who reaches it can read every trajectory")
    directory = args.runs_dir.resolve()
    if not directory.is_dir():
        print(f"{directory} does not exist yet: its runs will show once it does")
    print(f"pomona view: http://{args.host}:{args.port}/  ({directory})", flush=True)
    config = uvicorn.Config(create_app(directory), log_level="warning")
    uvicorn.Server(config).run(sockets=[sock])
    return 0
