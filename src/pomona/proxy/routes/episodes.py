"""Opening, reading and closing episodes over HTTP (in-process: `ProxyServer`, the same API)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from pomona.proxy import openapi, schemas
from pomona.proxy.dependencies import JsonBody, State, UrlEpisode
from pomona.proxy.errors import ProxyError
from pomona.proxy.state import episode_urls

router = APIRouter(prefix="/episodes")


@router.post("", openapi_extra=openapi.body("EpisodeSpec", required=False))
async def open_episode(request: Request, state: State, spec: JsonBody) -> Response:
    """Open an episode: its key, and the base URLs to give the harness."""
    ep = state.open_episode(schemas.validated(schemas.EpisodeSpec, spec))
    return JSONResponse(episode_urls(state.base_url(str(request.base_url)), ep.key))


@router.get("/{key}")
async def get_episode(episode: UrlEpisode) -> Response:
    """Counts of main and side calls, and whether the episode is closed."""
    return JSONResponse(episode.public())


@router.post("/{key}/close", openapi_extra=openapi.body("EpisodeOutcome", required=False))
async def close_episode(state: State, episode: UrlEpisode, outcome: JsonBody) -> Response:
    """Close an episode; an optional body (reward, resolved, failure_kind, ...) is recorded.
    A refused close (400) leaves the episode open."""
    try:
        state.close_episode(episode.key, outcome)
    except OSError as e:
        raise ProxyError(503, f"the episode row could not be written: {e}", "store_error") from e
    return JSONResponse(episode.public())
