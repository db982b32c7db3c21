"""Cross-dialect calls through LiteLLM: the caller's dialect in, the upstream's on the wire.

LiteLLM is imported the first time a translating route is used (importing it costs seconds),
with its cost map read locally and every HTTP client it makes recording through `capture`.
The proxy never retries on LiteLLM's behalf: the caller's SDK does, as the upstream's
`Retry-After` tells it. Token-capable upstreams are asked for token ids and logprobs whatever
the caller's dialect; the translation drops them from the caller's answer, and the recorder
reads them from the captured upstream response instead.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import AsyncIterator
from typing import Any

import httpx

from pomona.proxy import capture
from pomona.proxy.config import ModelRoute
from pomona.proxy.dialects import Dialect
from pomona.proxy.errors import (
    UpstreamError,
    broke_off,
    rate_limit_headers,
    timed_out,
    unreachable,
    upstream_message,
)
from pomona.proxy.sse import frame
from pomona.proxy.upstream import Outcome, UpstreamCall

_litellm: Any = None
_importing = threading.Lock()


def import_litellm() -> Any:
    """LiteLLM, imported and set up once per process (thread-safe: warm-up runs in threads)."""
    global _litellm
    with _importing:
        if _litellm is not None:
            return _litellm
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # never fetch it from GitHub
        import litellm

        litellm.suppress_debug_info = True
        litellm.drop_params = True  # a field the target provider lacks is dropped, not an error
        capture.install(litellm)
        _litellm = litellm
        return litellm


def wire_dialect(route: ModelRoute) -> str:
    """The dialect LiteLLM speaks to this route's upstream."""
    if route.provider == "anthropic":
        return "anthropic"
    if route.provider == "openai" and route.params["model"].startswith("openai/responses/"):
        return "responses"
    if route.provider == "openai" and route.dialects == {"responses"}:
        return "responses"
    return "chat"


def _model(route: ModelRoute) -> str:
    """LiteLLM's model string; a Responses-only OpenAI upstream goes through its bridge."""
    model: str = route.params["model"]
    if wire_dialect(route) == "responses" and not model.startswith("openai/responses/"):
        return "openai/responses/" + route.upstream_model
    return model


def _kwargs(call: UpstreamCall) -> dict[str, Any]:
    route = call.route
    kwargs = {k: v for k, v in call.body.items() if k not in ("model", "stream")}
    kwargs.update({k: v for k, v in route.params.items() if k != "model"})
    t = route.timeouts
    kwargs["timeout"] = httpx.Timeout(connect=t.connect, read=t.read, write=t.read, pool=t.connect)
    kwargs["max_retries"] = 0
    kwargs["num_retries"] = 0
    if call.dialect.name == "responses" and wire_dialect(route) == "chat":
        kwargs["use_chat_completions_api"] = True  # the bridge, even if LiteLLM deems it native
    if route.token_ids and wire_dialect(route) == "chat":
        extra = dict(kwargs.get("extra_body") or {})
        extra["return_token_ids"] = True
        extra.setdefault("logprobs", True)
        kwargs["extra_body"] = extra
    return kwargs


def _dump(obj: Any) -> Any:
    if hasattr(obj, "model_dump"):
        return obj.model_dump(mode="json", exclude_none=True)
    return obj


def _failure(route: ModelRoute, e: BaseException, exchange: capture.Exchange) -> UpstreamError:
    """One status per kind of failure, whatever exception class LiteLLM chose for it."""
    if isinstance(e, UpstreamError):
        return e
    if exchange.status is not None and exchange.status >= 400:
        return UpstreamError(
            exchange.status,
            upstream_message(exchange.response_body, exchange.status),
            "upstream_error",
            rate_limit_headers(exchange.response_headers),
        )
    chain: list[BaseException] = []
    cur: BaseException | None = e
    while cur is not None and len(chain) < 10:
        chain.append(cur)
        cur = cur.__cause__ or cur.__context__
    detail = f"{type(e).__name__}: {e}"
    if any(isinstance(c, httpx.TimeoutException | TimeoutError) for c in chain) or (
        type(e).__name__ == "Timeout"
    ):
        return timed_out(route.name, detail)
    if exchange.status is None:
        return unreachable(route.name, detail)
    return broke_off(route.name, detail)


async def translate(call: UpstreamCall) -> Outcome:
    """Serve a caller's dialect from an upstream that speaks another one, via LiteLLM."""
    litellm = import_litellm()
    route, dialect = call.route, call.dialect
    exchange = capture.exchange.get() or capture.Exchange()
    stream = dialect.is_stream(call.body)
    method = {
        "chat": litellm.acompletion,
        "responses": litellm.aresponses,
        "anthropic": litellm.anthropic.messages.acreate,
    }[dialect.name]
    try:
        result = await method(model=_model(route), stream=stream, **_kwargs(call))
    except Exception as e:  # LiteLLM maps provider failures to its own exception classes
        raise _failure(route, e, exchange) from e
    passed = rate_limit_headers(exchange.response_headers)
    wire = wire_dialect(route)
    if not stream:
        body = json.dumps(_dump(result), ensure_ascii=False).encode()
        return Outcome(200, body, upstream="litellm", upstream_dialect=wire, headers=passed)
    return Outcome(
        200,
        stream=_frames(result, dialect, route, exchange),
        content_type="text/event-stream",
        upstream="litellm",
        upstream_dialect=wire,
        headers=passed,
    )


async def _frames(
    result: Any, dialect: Dialect, route: ModelRoute, exchange: capture.Exchange
) -> AsyncIterator[bytes]:
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
        raise _failure(route, e, exchange) from e
    if dialect.name == "chat":
        yield frame("[DONE]")
