"""Episodes: the list, one episode's timeline and calls, its raw rows and its artifacts."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.responses import FileResponse, JSONResponse, Response

from pomona.viewer import artifacts as arts
from pomona.viewer import queries
from pomona.viewer.routes.common import Key, Limit, Offset, Store, Text, answer, missing

router = APIRouter(prefix="", tags=["episodes"])


@router.get("/api/episodes")
def episodes(index: Store, run: Text = None, benchmark: Text = None, task: Text = None,
             harness: Text = None, model: Text = None, status: Text = None,
             failure_kind: Text = None, offset: Offset = 0, limit: Limit = 50) -> Response:  # fmt: skip
    page = queries.episodes(index, offset=offset, limit=limit, run=run, benchmark=benchmark,
                            task=task, harness=harness, model=model, status=status,
                            failure_kind=failure_kind)  # fmt: skip
    return answer(page, index)


@router.get("/api/episode")
def episode(index: Store, key: Key) -> Response:
    found = queries.episode(index, key)
    if found is None:
        return missing(f"no episode {key!r} in this store")
    found["artifacts"] = [a.describe(index.directory) for a in arts.of_row(found["episode"])]
    found["same_task"] = queries.same_task(index, key)
    return answer(found, index)


@router.get("/api/episode/call")
def call_messages(index: Store, key: Key, n: Annotated[int, Query(ge=0)]) -> Response:
    """Every message one call sent, the earlier ones included (the episode page folds those)."""
    found = queries.call_messages(index, key, n)
    if found is None:
        return missing(f"episode {key!r} has no call {n}")
    return answer({"key": key, "n": n, "messages": found}, index)


@router.get("/api/episode/raw")
def raw(index: Store, key: Key) -> Response:
    """The episode's rows exactly as stored: the episodes row and every calls row, whole."""
    row = queries.episode_row(index, key)
    calls = queries.call_rows(index, key)
    if row is None and not calls:
        return missing(f"no episode {key!r} in this store")
    return answer({"episode": row, "calls": calls}, index)


@router.get("/api/episode/artifact")
def artifact(
    index: Store,
    key: Key,
    index_: Annotated[int, Query(alias="index", ge=0)],
    preview: bool = False,
) -> Response:
    found = arts.of_row(queries.episode_row(index, key))
    if index_ >= len(found):
        return missing(f"episode {key!r} has no artifact {index_}")
    item = found[index_]
    try:
        path = arts.resolve(item.uri, index.directory)
    except arts.ArtifactRefused as e:
        return JSONResponse({"error": "refused", "detail": str(e)}, 403)
    if preview and item.kind != "image":
        text, cut = arts.preview(path)
        shown = {"name": item.name, "kind": item.kind, "text": text, "truncated": cut}
        return answer(shown, index)
    return FileResponse(
        path,
        media_type=arts.media_type(item),
        headers={"content-security-policy": "sandbox; default-src 'none'"},
    )
