"""Same-dialect pass-through: the caller's body goes on unchanged, the answer comes back as sent.

Pass-through keeps what a translation would lose (token ids, logprobs, reasoning items, unknown
tool types). The body changes only to rename the model and, for token-capable upstreams (vLLM,
SGLang), to ask for token ids and logprobs. Compressed answers are decoded before they are
relayed (the client asked the proxy, not the upstream, for an encoding), so a gzip stream is
relayed as plain SSE events.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx

from pomona.proxy.capture import CapturingTransport
from pomona.proxy.config import ModelRoute
from pomona.proxy.errors import broke_off, rate_limit_headers, timed_out, unreachable
from pomona.proxy.sse import dumps
from pomona.proxy.upstream import Outcome, UpstreamCall
from pomona.trajectories.redact import is_secret_name

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
_PATHS = {"chat": "/chat/completions", "responses": "/responses", "anthropic": "/v1/messages"}


def url(route: ModelRoute, dialect: str) -> str:
    base = route.api_base
    if dialect == "anthropic":
        base = base.removesuffix("/v1")
    return base + _PATHS[dialect]


def headers(route: ModelRoute, dialect: str, incoming: dict[str, str]) -> dict[str, str]:
    """The caller's headers minus hop-by-hop ones. With a key of its own, the route's key
    replaces every credential the caller sent (any secret-named header)."""
    key = route.params.get("api_key")
    out = {
        k: v
        for k, v in incoming.items()
        if k.lower() not in _HOP_HEADERS and not (key and is_secret_name(k))
    }
    if key and dialect == "anthropic":
        out["x-api-key"] = key
    elif key:
        out["authorization"] = f"Bearer {key}"
    if dialect == "anthropic":
        out.setdefault("anthropic-version", "2023-06-01")
    return out


def body(route: ModelRoute, dialect: str, raw: bytes, parsed: dict[str, Any]) -> bytes:
    """The raw body, touched only to rename the model or to ask for token ids."""
    changes: dict[str, Any] = {}
    if parsed.get("model") != route.upstream_model:
        changes["model"] = route.upstream_model
    if route.token_ids and dialect == "chat":
        if not parsed.get("return_token_ids"):
            changes["return_token_ids"] = True
        if parsed.get("logprobs") is None:
            changes["logprobs"] = True
    return dumps({**parsed, **changes}).encode() if changes else raw


def timeout(route: ModelRoute) -> httpx.Timeout:
    t = route.timeouts
    return httpx.Timeout(connect=t.connect, read=t.read, write=t.read, pool=t.connect)


class Passthrough:
    """An httpx client shared by every pass-through route, recording through `capture`."""

    def __init__(self) -> None:
        transport = CapturingTransport(
            httpx.AsyncHTTPTransport(
                limits=httpx.Limits(max_connections=1000, max_keepalive_connections=100)
            )
        )
        self.client = httpx.AsyncClient(transport=transport, timeout=None)

    async def aclose(self) -> None:
        await self.client.aclose()

    async def call(self, call: UpstreamCall) -> Outcome:
        route, dialect = call.route, call.dialect.name
        request = self.client.build_request(
            "POST",
            url(route, dialect) + (f"?{call.query}" if call.query else ""),
            content=body(route, dialect, call.raw, call.body),
            headers=headers(route, dialect, call.headers),
            timeout=timeout(route),
        )
        try:
            response = await self.client.send(request, stream=True)
        except httpx.TimeoutException as e:
            raise timed_out(route.name, repr(e)) from e
        except httpx.HTTPError as e:
            raise unreachable(route.name, repr(e)) from e
        content_type = response.headers.get("content-type", "application/json")
        passed = rate_limit_headers(response.headers)
        if response.status_code >= 400 or "text/event-stream" not in content_type:
            try:
                data = await response.aread()
            except httpx.TimeoutException as e:
                raise timed_out(route.name, repr(e)) from e
            except httpx.HTTPError as e:
                raise broke_off(route.name, repr(e)) from e
            finally:
                await response.aclose()
            return Outcome(
                response.status_code,
                data,
                content_type=content_type,
                upstream_dialect=dialect,
                headers=passed,
            )
        return Outcome(
            response.status_code,
            stream=_relay(response, route.name),
            close=response.aclose,
            content_type=content_type,
            upstream_dialect=dialect,
            headers=passed,
        )


async def _relay(response: httpx.Response, name: str) -> AsyncIterator[bytes]:
    try:
        async for chunk in response.aiter_bytes():
            yield chunk
    except httpx.TimeoutException as e:
        raise timed_out(name, f"stream stalled: {e!r}") from e
    except httpx.HTTPError as e:
        raise broke_off(name, f"stream broke off: {e!r}") from e
