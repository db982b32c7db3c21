"""What the proxy's routes depend on, as FastAPI dependencies: the app's state, the API-key guard,
the episode (or policy) a URL names, and bounded JSON bodies.

Each raises a `ProxyError` the app's one handler answers in the caller's dialect. All are
`async def`, so none costs a trip through the thread pool.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Path, Request

from pomona.proxy import auth, schemas
from pomona.proxy.episodes import Episode
from pomona.proxy.errors import BadRequest, EpisodeNotFound, Unauthenticated
from pomona.proxy.policy import Policy
from pomona.proxy.state import ProxyState


async def proxy_state(request: Request) -> ProxyState:
    return ProxyState.of(request.app)


State = Annotated[ProxyState, Depends(proxy_state)]


async def require_api_key(request: Request, state: State) -> None:
    """The guard of every route outside /e/KEY (a no-op when no keys are configured)."""
    if not auth.allowed(state.config.api_keys, request.headers):
        raise Unauthenticated


async def episode_in_url(
    key: Annotated[str, Path(description="an episode key")],
    state: State,
) -> Episode:
    """The episode the URL names, open or closed; 404 if there is none."""
    episode = state.episodes.get(key)
    if episode is None:
        raise EpisodeNotFound(key)
    return episode


UrlEpisode = Annotated[Episode, Depends(episode_in_url)]


async def policy_in_url(episode: UrlEpisode) -> Policy:
    """The policy of the "policy" episode the URL names; 404 for any other episode."""
    if episode.policy is None:
        raise EpisodeNotFound(episode.key, "policy episode")
    return episode.policy


UrlPolicy = Annotated[Policy, Depends(policy_in_url)]


async def read_body(request: Request, limit: int) -> bytes:
    """The raw body, refused (415) unless JSON and (413) beyond `limit` bytes, declared or sent."""
    ctype = request.headers.get("content-type", "")
    if ctype and "json" not in ctype.lower():
        raise BadRequest(
            415, f"expected an application/json body, got {ctype!r}", "unsupported_media_type"
        )
    declared = request.headers.get("content-length") or "0"
    if declared.isdigit() and int(declared) > limit:
        raise BadRequest(413, f"request body exceeds {limit} bytes", "request_too_large")
    chunks, size = [], 0
    async for chunk in request.stream():
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            raise BadRequest(413, f"request body exceeds {limit} bytes", "request_too_large")
    return b"".join(chunks)


def json_object(raw: bytes) -> dict[str, Any]:
    """A request body that must be a JSON object (model calls)."""
    body = schemas.parse_json(raw)
    if not isinstance(body, dict):
        raise BadRequest(400, "the JSON body must be an object", "invalid_json")
    return body


async def optional_json(request: Request, state: State) -> Any:
    """The JSON body of one of the proxy's own routes; `{}` when there is none."""
    raw = await read_body(request, state.config.max_body_bytes)
    return schemas.parse_json(raw) if raw.strip() else {}


JsonBody = Annotated[Any, Depends(optional_json)]
