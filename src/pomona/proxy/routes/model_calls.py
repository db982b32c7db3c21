"""What harnesses call through their SDKs: model calls in the three dialects, Anthropic's token
count, and the model list (one list that fits both the OpenAI and the Anthropic list shapes).

`router` serves them on the proxy's own URL; `episode_router` serves them again under
`/e/{key}`, where the handlers get the episode the URL names.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from pomona.proxy import openapi, schemas
from pomona.proxy.dependencies import State, UrlEpisode, json_object, read_body
from pomona.proxy.dialects import DIALECTS, Dialect
from pomona.proxy.model_call import serve

router = APIRouter()
episode_router = APIRouter()

PATHS = {"chat": "/v1/chat/completions", "responses": "/v1/responses", "anthropic": "/v1/messages"}


def _model_calls(dialect: Dialect, path: str) -> None:
    """POST `path` in `dialect`, on both routers."""
    body = openapi.body(schemas.REQUESTS[dialect.name].__name__)

    async def model_call(request: Request, state: State) -> Response:
        return await serve(state, request, dialect, None)

    async def episode_model_call(request: Request, state: State, episode: UrlEpisode) -> Response:
        return await serve(state, request, dialect, episode)

    router.add_api_route(path, model_call, methods=["POST"], name=dialect.name, openapi_extra=body)
    episode_router.add_api_route(
        path,
        episode_model_call,
        methods=["POST"],
        name=f"{dialect.name}_in_episode",
        openapi_extra=body,
    )


for _name, _path in PATHS.items():
    _model_calls(DIALECTS[_name], _path)


@router.post("/v1/messages/count_tokens", openapi_extra=openapi.body("CountTokensRequest"))
@episode_router.post("/v1/messages/count_tokens", openapi_extra=openapi.body("CountTokensRequest"))
async def count_tokens(request: Request, state: State) -> Response:
    """An estimate (a token per 4 bytes): what Claude Code asks before it compacts."""
    raw = await read_body(request, state.config.max_body_bytes)
    json_object(raw)
    return JSONResponse({"input_tokens": max(1, len(raw) // 4)})


@router.get("/v1/models")
@router.get("/models")
@router.get("/api/v1/models")
@episode_router.get("/v1/models")
@episode_router.get("/models")
async def list_models(state: State) -> Response:
    names = state.config.model_names()
    data = [
        {"id": n, "object": "model", "created": 0, "owned_by": "proxy", "type": "model", "display_name": n,
         "created_at": "2025-01-01T00:00:00Z"}
        for n in names
    ]  # fmt: skip
    listing: dict[str, Any] = {
        "object": "list",
        "data": data,
        "has_more": False,
        "first_id": names[0],
        "last_id": names[-1],
    }
    return JSONResponse(listing)
