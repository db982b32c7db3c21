"""Calling real upstreams: byte-for-byte pass-through when dialects match, LiteLLM otherwise.

Pass-through keeps what a translation would lose (token ids, logprobs, reasoning items, unknown
tool types); LiteLLM is imported only when a translating route is first used, since importing
it costs seconds.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from pomona.proxy.config import ModelRoute, ProxyConfig
from pomona.proxy.dialects import Dialect
from pomona.proxy.sse import dumps, frame


class UpstreamError(Exception):
    """The upstream could not be reached or did not answer in time."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass
class Outcome:
    """An upstream's answer: a whole body, or a byte stream to relay."""

    status: int
    body: bytes = b""
    stream: AsyncIterator[bytes] | None = None
    close: Callable[[], Awaitable[None]] | None = None
    content_type: str = "application/json"
    upstream: str = "passthrough"
    headers: dict[str, str] = field(default_factory=dict)


_HOP_HEADERS = frozenset(
    {
        "host",
        "content-length",
        "connection",
        "transfer-encoding",
        "accept-encoding",
        "keep-alive",
        "te",
        "upgrade",
    }
)
_AUTH_HEADERS = frozenset({"authorization", "x-api-key", "api-key"})
_PATHS = {"chat": "/chat/completions", "responses": "/responses", "anthropic": "/v1/messages"}


def _url(route: ModelRoute, dialect: str) -> str:
    base = route.api_base
    if dialect == "anthropic":
        base = base.removesuffix("/v1")
    return base + _PATHS[dialect]


def _headers(route: ModelRoute, dialect: str, incoming: dict[str, str]) -> dict[str, str]:
    key = route.params.get("api_key")
    out = {
        k: v
        for k, v in incoming.items()
        if k.lower() not in _HOP_HEADERS and not (key and k.lower() in _AUTH_HEADERS)
    }
    if key and dialect == "anthropic":
        out["x-api-key"] = key
    elif key:
        out["authorization"] = f"Bearer {key}"
    if dialect == "anthropic":
        out.setdefault("anthropic-version", "2023-06-01")
    return out


def _body(route: ModelRoute, dialect: str, raw: bytes, body: dict[str, Any]) -> bytes:
    """The raw body, touched only to rename the model or to ask for token ids."""
    changes: dict[str, Any] = {}
    if body.get("model") != route.upstream_model:
        changes["model"] = route.upstream_model
    if route.token_ids and dialect == "chat":
        if not body.get("return_token_ids"):
            changes["return_token_ids"] = True
        if body.get("logprobs") is None:
            changes["logprobs"] = True
    return dumps({**body, **changes}).encode() if changes else raw


class Upstreams:
    def __init__(self, config: ProxyConfig):
        self.config = config
        timeout = httpx.Timeout(config.upstream_timeout, connect=config.connect_timeout)
        limits = httpx.Limits(max_connections=1000, max_keepalive_connections=100)
        self.client = httpx.AsyncClient(timeout=timeout, limits=limits)

    async def aclose(self) -> None:
        await self.client.aclose()

    async def call(
        self,
        route: ModelRoute,
        dialect: Dialect,
        raw: bytes,
        body: dict[str, Any],
        headers: dict[str, str],
        query: str,
    ) -> Outcome:
        if route.path_for(dialect.name) == "passthrough":
            return await self.passthrough(route, dialect, raw, body, headers, query)
        return await translate(route, dialect, body)

    async def passthrough(
        self,
        route: ModelRoute,
        dialect: Dialect,
        raw: bytes,
        body: dict[str, Any],
        headers: dict[str, str],
        query: str,
    ) -> Outcome:
        url = _url(route, dialect.name) + (f"?{query}" if query else "")
        request = self.client.build_request(
            "POST",
            url,
            content=_body(route, dialect.name, raw, body),
            headers=_headers(route, dialect.name, headers),
        )
        try:
            response = await self.client.send(request, stream=True)
        except httpx.TimeoutException as e:
            raise UpstreamError(504, f"upstream {route.name} timed out: {e!r}") from e
        except httpx.HTTPError as e:
            raise UpstreamError(502, f"upstream {route.name} unreachable: {e!r}") from e
        content_type = response.headers.get("content-type", "application/json")
        if response.status_code >= 400 or "text/event-stream" not in content_type:
            try:
                data = await response.aread()
            except httpx.HTTPError as e:
                raise UpstreamError(
                    502, f"upstream {route.name} broke off its answer: {e!r}"
                ) from e
            finally:
                await response.aclose()
            return Outcome(response.status_code, data, content_type=content_type)
        return Outcome(
            response.status_code,
            stream=_relay(response, route.name),
            close=response.aclose,
            content_type=content_type,
        )


async def _relay(response: httpx.Response, name: str) -> AsyncIterator[bytes]:
    try:
        async for chunk in response.aiter_raw():
            yield chunk
    except httpx.TimeoutException as e:
        raise UpstreamError(504, f"upstream {name} stream timed out: {e!r}") from e
    except httpx.HTTPError as e:
        raise UpstreamError(502, f"upstream {name} stream broke off: {e!r}") from e


# --- translation through LiteLLM ---------------------------------------------------------------

_litellm: Any = None


def _import_litellm() -> Any:
    global _litellm
    if _litellm is None:
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # never fetch it from GitHub
        import litellm

        litellm.suppress_debug_info = True
        litellm.drop_params = True  # a field the target provider lacks is dropped, not an error
        _litellm = litellm
    return _litellm


def _dump(obj: Any) -> Any:
    if hasattr(obj, "model_dump"):
        return obj.model_dump(mode="json", exclude_none=True)
    return obj


async def translate(route: ModelRoute, dialect: Dialect, body: dict[str, Any]) -> Outcome:
    """Serve a caller's dialect from an upstream that speaks another one, via LiteLLM."""
    litellm = _import_litellm()
    stream = dialect.is_stream(body)
    kwargs = {k: v for k, v in body.items() if k not in ("model", "stream")}
    kwargs.update({k: v for k, v in route.params.items() if k != "model"})
    call = {
        "chat": litellm.acompletion,
        "responses": litellm.aresponses,
        "anthropic": litellm.anthropic.messages.acreate,
    }[dialect.name]
    try:
        result = await call(model=route.params["model"], stream=stream, **kwargs)
    except Exception as e:  # LiteLLM maps provider failures to exceptions with a status code
        status = getattr(e, "status_code", None) or 502
        raise UpstreamError(
            status if isinstance(status, int) else 502, f"{type(e).__name__}: {e}"
        ) from e
    if not stream:
        return Outcome(200, json.dumps(_dump(result)).encode(), upstream="litellm")
    return Outcome(
        200, stream=_frames(result, dialect), content_type="text/event-stream", upstream="litellm"
    )


async def _frames(result: Any, dialect: Dialect) -> AsyncIterator[bytes]:
    """LiteLLM yields SSE bytes for some routes and chunk objects for others; emit SSE either way."""
    try:
        async for item in result:
            if isinstance(item, bytes | str):
                yield item.encode() if isinstance(item, str) else item
                continue
            data = _dump(item)
            event = data.get("type") if dialect.name != "chat" and isinstance(data, dict) else None
            yield frame(data, event)
    except Exception as e:
        raise UpstreamError(
            getattr(e, "status_code", None) or 502, f"{type(e).__name__}: {e}"
        ) from e
    if dialect.name == "chat":
        yield frame("[DONE]")
