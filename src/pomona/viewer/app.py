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
import json
import os
import socket
import sys
from pathlib import Path
from typing import Annotated, Any

from fastapi import FastAPI, Query, Request
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles

from pomona.viewer import artifacts as arts
from pomona.viewer import queries
from pomona.viewer.index import StoreIndex

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
Offset = Annotated[int, Query(ge=0)]
Limit = Annotated[int, Query(ge=1, le=500)]
Text = Annotated[str | None, Query(max_length=500)]


def _json(data: Any, index: StoreIndex, status: int = 200) -> Response:
    body = json.dumps(data, ensure_ascii=False, default=str)
    return Response(body, status, media_type="application/json",
                    headers={"x-store-version": str(index.version)})  # fmt: skip


def _missing(what: str) -> JSONResponse:
    return JSONResponse({"error": "not_found", "detail": what}, 404)


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

    @app.get("/api/overview")
    def overview() -> Response:
        index.refresh()
        return _json(queries.overview(index), index)

    @app.get("/api/runs")
    def runs() -> Response:
        index.refresh()
        return _json({"runs": queries.runs(index), "in_flight": queries.in_flight(index)}, index)

    @app.get("/api/run")
    def run(run: Annotated[str, Query(max_length=500)]) -> Response:
        index.refresh()
        found = queries.run_detail(index, run)
        return _json(found, index) if found else _missing(f"no run {run!r} in this store")

    @app.get("/api/run/tasks")
    def run_tasks(run: Annotated[str, Query(max_length=500)], status: Text = None,
                  failure_kind: Text = None, task: Text = None, offset: Offset = 0,
                  limit: Limit = 50) -> Response:  # fmt: skip
        index.refresh()
        page = queries.run_tasks(index, run, status=status, failure_kind=failure_kind, task=task,
                                 offset=offset, limit=limit)  # fmt: skip
        return _json(page, index)

    @app.get("/api/episodes")
    def episodes(run: Text = None, benchmark: Text = None, task: Text = None, harness: Text = None,
                 model: Text = None, status: Text = None, failure_kind: Text = None,
                 offset: Offset = 0, limit: Limit = 50) -> Response:  # fmt: skip
        index.refresh()
        page = queries.episodes(index, offset=offset, limit=limit, run=run, benchmark=benchmark,
                                task=task, harness=harness, model=model, status=status,
                                failure_kind=failure_kind)  # fmt: skip
        return _json(page, index)

    @app.get("/api/episode")
    def episode(key: Annotated[str, Query(max_length=500)]) -> Response:
        index.refresh()
        found = queries.episode(index, key)
        if found is None:
            return _missing(f"no episode {key!r} in this store")
        found["artifacts"] = [a.describe(index.directory) for a in arts.of_row(found["episode"])]
        found["same_task"] = queries.same_task(index, key)
        return _json(found, index)

    @app.get("/api/episode/call")
    def call_messages(key: Annotated[str, Query(max_length=500)],
                      n: Annotated[int, Query(ge=0)]) -> Response:  # fmt: skip
        """Every message one call sent, the earlier ones included (the episode page folds those)."""
        index.refresh()
        found = queries.call_messages(index, key, n)
        if found is None:
            return _missing(f"episode {key!r} has no call {n}")
        return _json({"key": key, "n": n, "messages": found}, index)

    @app.get("/api/episode/raw")
    def raw(key: Annotated[str, Query(max_length=500)]) -> Response:
        """The episode's rows exactly as stored: the episodes row and every calls row, whole."""
        index.refresh()
        row = queries.episode_row(index, key)
        calls = queries.call_rows(index, key)
        if row is None and not calls:
            return _missing(f"no episode {key!r} in this store")
        return _json({"episode": row, "calls": calls}, index)

    @app.get("/api/episode/artifact")
    def artifact(key: Annotated[str, Query(max_length=500)], index_: Annotated[int, Query(
            alias="index", ge=0)], preview: bool = False) -> Response:  # fmt: skip
        index.refresh()
        found = arts.of_row(queries.episode_row(index, key))
        if index_ >= len(found):
            return _missing(f"episode {key!r} has no artifact {index_}")
        item = found[index_]
        try:
            path = arts.resolve(item.uri, index.directory)
        except arts.ArtifactRefused as e:
            return JSONResponse({"error": "refused", "detail": str(e)}, 403)
        if preview and item.kind != "image":
            text, cut = arts.preview(path)
            return _json({"name": item.name, "kind": item.kind, "text": text, "truncated": cut},
                         index)  # fmt: skip
        return FileResponse(
            path,
            media_type=arts.media_type(item),
            headers={"content-security-policy": "sandbox; default-src 'none'"},
        )

    @app.get("/api/leaderboard")
    def leaderboard() -> Response:
        index.refresh()
        return _json(queries.leaderboard(index), index)

    @app.get("/api/leaderboard.png")
    def leaderboard_png() -> Response:
        index.refresh()
        try:
            png = queries.leaderboard_png(index)
        except ImportError:
            return _missing("the plot needs matplotlib (pip install 'pomona[bench]')")
        if png is None:
            return _missing("no episodes yet: nothing to plot")
        return Response(png, media_type="image/png")

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
