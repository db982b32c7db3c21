"""The runs, a run's tasks and the leaderboard."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response

from pomona.viewer import queries
from pomona.viewer.routes.common import Key, Limit, Offset, Store, Text, answer, missing

router = APIRouter(prefix="", tags=["runs"])


@router.get("/api/overview")
def overview(index: Store) -> Response:
    return answer(queries.overview(index), index)


@router.get("/api/runs")
def runs(index: Store) -> Response:
    return answer({"runs": queries.runs(index), "in_flight": queries.in_flight(index)}, index)


@router.get("/api/run")
def run(index: Store, run: Key) -> Response:
    found = queries.run_detail(index, run)
    return answer(found, index) if found else missing(f"no run {run!r} in this store")


@router.get("/api/run/tasks")
def run_tasks(index: Store, run: Key, status: Text = None, failure_kind: Text = None,
              task: Text = None, offset: Offset = 0, limit: Limit = 50) -> Response:  # fmt: skip
    page = queries.run_tasks(index, run, status=status, failure_kind=failure_kind, task=task,
                             offset=offset, limit=limit)  # fmt: skip
    return answer(page, index)


@router.get("/api/leaderboard")
def leaderboard(index: Store) -> Response:
    return answer(queries.leaderboard(index), index)


@router.get("/api/leaderboard.png")
def leaderboard_png(index: Store) -> Response:
    try:
        png = queries.leaderboard_png(index)
    except ImportError:
        return missing("the plot needs matplotlib (pip install 'pomona[bench]')")
    if png is None:
        return missing("no episodes yet: nothing to plot")
    return Response(png, media_type="image/png")
