"""One model call, from request to response: the body read and checked, the call recorded, its
answerer chosen (the episode's policy, the scripted model, or the model's route), and the answer
relayed, all while the client is still there.

Every call ends in exactly one `calls` row. A refusal or failure is recorded here, with the
error body the client gets, and raised on to the app's error handler (errors.py), which answers
it in the caller's dialect.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any, TypeVar

from fastapi import Request, Response

from pomona.proxy import capture, relay, sampling, schemas, scripted
from pomona.proxy.config import SCRIPTED, ModelRoute
from pomona.proxy.dependencies import json_object, read_body
from pomona.proxy.dialects import Dialect
from pomona.proxy.episodes import Episode
from pomona.proxy.errors import BadRequest, ClientGone, EpisodeClosed, ProxyError
from pomona.proxy.policy import POLICY
from pomona.proxy.recording import Call
from pomona.proxy.state import ProxyState
from pomona.proxy.upstream import Outcome, UpstreamCall

T = TypeVar("T")
Answer = Callable[[], Awaitable[Outcome]]


async def serve(
    state: ProxyState, request: Request, dialect: Dialect, episode: Episode | None
) -> Response:
    """Answer one model call in `dialect`, inside `episode` or on the proxy's own URL."""
    call = Call(state.recorder, dialect, request.url.path, dict(request.headers), episode)
    try:
        return await _serve(state, request, dialect, episode, call)
    except ClientGone as e:
        call.finish(e.row_status, e.status_code, error=e.message)  # nobody is there to answer
        raise
    except ProxyError as e:
        answer = e.body(dialect).decode()
        call.finish(e.row_status, e.status_code, response=answer, error=e.message)
        raise


async def _serve(
    state: ProxyState, request: Request, dialect: Dialect, episode: Episode | None, call: Call
) -> Response:
    raw = b""
    try:
        raw = await read_body(request, state.config.max_body_bytes)
        body = json_object(raw)
        schemas.check(dialect.name, body)
    except BadRequest:
        call.request(raw)
        raise
    if episode is not None and episode.closed:
        call.request(raw, body)
        raise EpisodeClosed(episode.key)
    side = (episode.tool_less_is_side if episode else True) and scripted.is_side(dialect, body)
    call.request(raw, body, side=side)
    model = (episode.model if episode and episode.model else None) or body.get("model")
    call.route(model, None)  # the model is recorded even when nothing serves it
    upstream, answer = _answerer(state, request, call, raw, body, model, side)
    call.route(model, upstream)
    call.exchange = capture.Exchange()
    token = capture.exchange.set(call.exchange)
    try:
        outcome = await until_client_leaves(request, answer())
    finally:
        capture.exchange.reset(token)
    call.route(model, outcome.upstream, outcome.upstream_dialect)
    sent = call.exchange.request_body if call.exchange.url is not None else None
    pin = call.upstream.pin if call.upstream is not None else None
    call.row.update(sampling.columns(pin, outcome.upstream_dialect, sent, model=model, side=side))
    if outcome.stream is None:
        return relay.whole(call, dialect, outcome)
    return relay.RecordedStream(call, dialect, outcome)


def _answerer(
    state: ProxyState,
    request: Request,
    call: Call,
    raw: bytes,
    body: dict[str, Any],
    model: Any,
    side: bool,
) -> tuple[str, Answer]:
    """Who answers the call, and the upstream name its row carries until the answer names one.
    A call to the model's route is noted on `call` (`call.upstream`), for its timings."""
    dialect, episode = call.dialect, call.episode
    if episode is not None and episode.policy is not None:
        policy = episode.policy

        async def from_policy() -> Outcome:
            return _rendered(dialect, await policy.answer(dialect, body, side=side), body, POLICY)

        return POLICY, from_policy
    if model == SCRIPTED or (episode is not None and episode.model == SCRIPTED):

        async def from_script() -> Outcome:
            final = scripted.answer(
                dialect,
                body,
                episode.script if episode else state.config.default_script,
                final=episode.final if episode else "done",
                tool_less_is_side=episode.tool_less_is_side if episode else True,
            )
            return _rendered(dialect, final, body, SCRIPTED)

        return SCRIPTED, from_script
    route = state.config.route(model) if isinstance(model, str) else None
    if route is None:
        raise BadRequest(
            404, f"model {model!r} is not in the proxy's model list", "model_not_found"
        )
    body, raw = _pinned(route, dialect, body, raw, side)
    upstream_call = call.upstream = UpstreamCall(
        route, dialect, raw, body, dict(request.headers), request.url.query, pin=route.pin
    )
    return route.path_for(dialect.name), lambda: state.upstreams.call(upstream_call)


def _pinned(
    route: ModelRoute, dialect: Dialect, body: dict[str, Any], raw: bytes, side: bool
) -> tuple[dict[str, Any], bytes]:
    """The request with its route's pinned sampling written in (raises PinRefused for a value
    the pin refuses). A seed reaches only a chat-speaking engine: in the body of a chat call,
    through LiteLLM's extra body for a call it translates."""
    from pomona.proxy.translation import wire_dialect

    if route.pin is None:
        return body, raw
    if dialect.name == "chat":
        seed_to: str | None = "body"
    elif route.path_for(dialect.name) != "passthrough" and wire_dialect(route) == "chat":
        seed_to = "extra_body"
    else:
        seed_to = None
    pinned = sampling.apply(route.pin, dialect.name, body, side=side, seed_to=seed_to)
    return (body, raw) if pinned is body else (pinned, json.dumps(pinned).encode())


async def until_client_leaves(request: Request, work: Awaitable[T]) -> T:
    """`work`'s result, unless the client hangs up first: then `work` (and with it the upstream
    call) is cancelled and ClientGone raised."""
    try:
        async with asyncio.TaskGroup() as group:
            watcher = group.create_task(_hang_up(request))
            result = await work  # in this task, so the context variables it sets stay visible
            watcher.cancel()
    except BaseExceptionGroup as failed:  # ClientGone, or the work's own failure
        gone = [e for e in failed.exceptions if isinstance(e, ClientGone)]
        raise (gone or failed.exceptions)[0] from None
    return result


async def _hang_up(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass
    raise ClientGone


async def _events(items: Iterable[bytes]) -> AsyncIterator[bytes]:
    for item in items:
        yield item


def _rendered(
    dialect: Dialect, final: dict[str, Any], body: dict[str, Any], upstream: str
) -> Outcome:
    """An answer the proxy made itself (scripted model, policy), streamed if the caller asked."""
    if dialect.is_stream(body):
        return Outcome(200, stream=_events(dialect.events(final, body)), upstream=upstream)
    return Outcome(200, json.dumps(final, ensure_ascii=False).encode(), upstream=upstream)
