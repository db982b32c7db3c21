"""What every route of the viewer's API shares: the store (refreshed once per request), the
JSON answer stamped with the store's version, the 404, and the query parameter types."""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import Depends, Query, Request
from fastapi.responses import JSONResponse, Response

from pomona.viewer.index import StoreIndex

Offset = Annotated[int, Query(ge=0)]
Limit = Annotated[int, Query(ge=1, le=500)]
Text = Annotated[str | None, Query(max_length=500)]
Key = Annotated[str, Query(max_length=500)]


def _store(request: Request) -> StoreIndex:
    index: StoreIndex = request.app.state.index
    index.refresh()
    return index


Store = Annotated[StoreIndex, Depends(_store)]


def answer(data: Any, index: StoreIndex, status: int = 200) -> Response:
    body = json.dumps(data, ensure_ascii=False, default=str)
    return Response(body, status, media_type="application/json",
                    headers={"x-store-version": str(index.version)})  # fmt: skip


def missing(what: str) -> JSONResponse:
    return JSONResponse({"error": "not_found", "detail": what}, 404)
