"""The recording proxy as a FastAPI app: three dialects, per-episode base URLs, every call recorded."""

from __future__ import annotations

import json
import threading
from collections.abc import AsyncIterator, Awaitable, Iterable
from contextlib import asynccontextmanager
from typing import Any

import anyio
from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from pomona.proxy import auth, capture, openapi, schemas, scripted
from pomona.proxy.config import SCRIPTED, ProxyConfig
from pomona.proxy.dialects import DIALECTS, Dialect
from pomona.proxy.episodes import Episode, Episodes, utcnow
from pomona.proxy.errors import BadRequest, UpstreamError, error_response, request_ids
from pomona.proxy.metrics import instrument
from pomona.proxy.policy import POLICY, CallExpired
from pomona.proxy.recording import Call, Recorder
from pomona.proxy.sse import Parser
from pomona.proxy.upstream import Outcome, UpstreamCall, Upstreams

_SSE_HEADERS = {"cache-control": "no-cache"}
_ADMIN = DIALECTS["chat"]  # the proxy's own routes answer errors in the OpenAI shape


class ClientGone(Exception):
    """The client hung up before its answer was ready."""


class ProxyState:
    """Everything one proxy app owns."""

    def __init__(self, config: ProxyConfig):
        self.config = config
        self.episodes = Episodes()
        held = [m.params.get("api_key") for m in config.models] + list(config.api_keys.values())
        self.recorder = Recorder(config.trajectories, config.durable, secrets=held)
        self.upstreams = Upstreams(config)
        self._closing = threading.Lock()

    def close_episode(self, key: str, outcome: dict[str, Any] | None = None) -> Episode:
        """Close once; the first close writes the `episodes` row with its outcome.

        Atomic: a malformed outcome (ValueError) or a failed write leaves the episode open, so
        a corrected retry still writes its row.
        """
        ep = self.episodes.get(key)
        if ep is None:
            raise KeyError(key)
        row = schemas.validated(schemas.EpisodeOutcome, outcome or {}).row()
        with self._closing:
            if not ep.closed:
                ended = utcnow()
                try:
                    self.recorder.episode(ep, row, ended)
                except (TypeError, OverflowError) as e:  # ArrowInvalid is a ValueError
                    raise ValueError(f"the outcome cannot be recorded: {e}") from e
                self.episodes.close(key, ended)
        return ep

    def base_url(self, request: Request | None) -> str:
        if self.config.public_url:
            return self.config.public_url.rstrip("/")
        return str(request.base_url).rstrip("/") if request else ""


def _admin_error(status: int, message: str, code: str | None = None) -> JSONResponse:
    return error_response(_ADMIN, status, message, code)


class RecordedStream(StreamingResponse):
    """A StreamingResponse that always closes its iterator, so a client that hangs up mid-stream
    still leaves a record (Starlette would otherwise leave the generator to the garbage collector)."""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            with anyio.CancelScope(shield=True):
                await self.body_iterator.aclose()  # type: ignore[attr-defined]


async def _read_body(request: Request, limit: int) -> bytes:
    """The raw body, or a BadRequest for a wrong content type or a body over `limit` bytes."""
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


def _object(raw: bytes) -> dict[str, Any]:
    body = schemas.parse_json(raw)
    if not isinstance(body, dict):
        raise BadRequest(400, "the JSON body must be an object", "invalid_json")
    return body


async def _unless_client_leaves(request: Request, work: Awaitable[Outcome]) -> Outcome:
    """Run `work`, cancelling it (and so the upstream call) if the client hangs up meanwhile."""
    result: Outcome | None = None
    error: BaseException | None = None
    gone = False
    async with anyio.create_task_group() as tg:

        async def watch() -> None:
            nonlocal gone
            while (await request.receive())["type"] != "http.disconnect":
                pass
            gone = True
            tg.cancel_scope.cancel()

        tg.start_soon(watch)
        try:
            result = await work
        except Exception as e:
            error = e
        tg.cancel_scope.cancel()
    if gone:
        raise ClientGone
    if error is not None:
        raise error
    assert result is not None
    return result


def create_app(config: ProxyConfig | None = None) -> FastAPI:
    """The proxy app. `app.state.proxy` holds its episodes, recorder and upstream clients."""
    state = ProxyState(config or ProxyConfig())
    keys = state.config.api_keys

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        await state.upstreams.aclose()
        state.recorder.close()

    app = FastAPI(
        title="pomona proxy",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url="/openapi.json",
    )
    app.state.proxy = state
    instrument(app, state)  # GET /metrics

    def guard(request: Request) -> None:
        """The API-key check of every route outside /e/KEY (a no-op without keys)."""
        if not auth.allowed(keys, request.headers):
            raise StarletteHTTPException(401, "a valid API key is required (Bearer or x-api-key)")

    # --- model calls -------------------------------------------------------------------------
    async def model_call(request: Request, dialect: Dialect) -> Response:
        key = request.path_params.get("key")
        episode = state.episodes.get(key) if key is not None else None
        if key is not None and episode is None:
            return error_response(dialect, 404, f"unknown episode key {key!r}", "episode_not_found")
        if key is None:
            guard(request)
        call = Call(state.recorder, dialect, request.url.path, dict(request.headers), episode)
        raw = b""
        try:
            raw = await _read_body(request, state.config.max_body_bytes)
            body = _object(raw)
            schemas.check(dialect.name, body)
        except BadRequest as e:
            call.request(raw)
            call.finish("client_error", e.status, error=e.message)
            return error_response(dialect, e.status, e.message, e.code)
        if episode is not None and episode.closed:
            call.request(raw, body)
            message = f"episode {key!r} is closed"
            call.finish("refused", 410, error=message)
            return error_response(dialect, 410, message, "episode_closed")
        tool_less_is_side = episode.tool_less_is_side if episode else True
        side = tool_less_is_side and scripted.is_side(dialect, body)
        call.request(raw, body, side=side)
        model = (episode.model if episode and episode.model else None) or body.get("model")
        call.exchange = capture.Exchange()
        token = capture.exchange.set(call.exchange)
        try:
            work = _dispatch(model, dialect, raw, body, request, episode, side)
            outcome = await _unless_client_leaves(request, work)
        except ClientGone:
            call.route(model, _upstream_name(model, dialect))
            call.finish("incomplete", 499, error="client disconnected before the answer")
            return Response(status_code=499)
        except BadRequest as e:
            call.route(model, None)
            call.finish("client_error", e.status, error=e.message)
            return error_response(dialect, e.status, e.message, e.code)
        except UpstreamError as e:
            call.route(model, getattr(e, "upstream", None) or _upstream_name(model, dialect))
            call.finish("upstream_error", e.status, error=e.message)
            return error_response(dialect, e.status, e.message, e.code, e.headers)
        finally:
            capture.exchange.reset(token)
        call.route(model, outcome.upstream, outcome.upstream_dialect)
        if outcome.stream is None:
            return _whole(call, dialect, outcome)
        return RecordedStream(
            _relay(call, dialect, outcome),
            status_code=outcome.status,
            media_type="text/event-stream",
            headers={**_SSE_HEADERS, **request_ids(), **outcome.headers},
        )

    def _upstream_name(model: Any, dialect: Dialect) -> str | None:
        route = state.config.route(model) if isinstance(model, str) else None
        return route.path_for(dialect.name) if route else None

    async def _dispatch(
        model: Any,
        dialect: Dialect,
        raw: bytes,
        body: dict[str, Any],
        request: Request,
        episode: Episode | None,
        side: bool,
    ) -> Outcome:
        if episode is not None and episode.policy is not None:
            final = await episode.policy.answer(dialect, body, side=side)
            return _rendered(dialect, final, body, POLICY)
        if model == SCRIPTED or (episode is not None and episode.model == SCRIPTED):
            script = episode.script if episode else state.config.default_script
            final = scripted.answer(
                dialect,
                body,
                script,
                final=episode.final if episode else "done",
                tool_less_is_side=episode.tool_less_is_side if episode else True,
            )
            return _rendered(dialect, final, body, "scripted")
        route = state.config.route(model) if isinstance(model, str) else None
        if route is None:
            raise BadRequest(
                404, f"model {model!r} is not in the proxy's model list", "model_not_found"
            )
        headers = dict(request.headers)
        upstream_call = UpstreamCall(route, dialect, raw, body, headers, request.url.query)
        return await state.upstreams.call(upstream_call)

    def register(path: str, dialect: Dialect) -> None:
        async def handler(request: Request) -> Response:
            return await model_call(request, dialect)

        schema_name = schemas.REQUESTS[dialect.name].__name__
        for prefix in ("", "/e/{key}"):
            app.add_api_route(
                prefix + path,
                handler,
                methods=["POST"],
                name=f"{dialect.name}{prefix}",
                openapi_extra=openapi.body(schema_name),
            )

    register("/v1/chat/completions", DIALECTS["chat"])
    register("/v1/responses", DIALECTS["responses"])
    register("/v1/messages", DIALECTS["anthropic"])

    # --- episodes ----------------------------------------------------------------------------
    async def _admin_body(request: Request) -> Any:
        raw = await _read_body(request, state.config.max_body_bytes)
        return schemas.parse_json(raw) if raw.strip() else {}

    @app.post("/episodes", openapi_extra=openapi.body("EpisodeSpec", required=False))
    async def open_episode(request: Request) -> Response:
        guard(request)
        try:
            spec = schemas.validated(schemas.EpisodeSpec, await _admin_body(request))
            ep = state.episodes.open(
                spec.key,
                model=spec.model,
                script=spec.commands(),
                metadata=spec.metadata or {},
                final=spec.final,
                tool_less_is_side=spec.tool_less_calls == "side",
            )
        except BadRequest as e:
            return _admin_error(e.status, e.message, e.code)
        except ValueError as e:
            return _admin_error(400, str(e), "invalid_request")
        except KeyError as e:
            return _admin_error(409, str(e.args[0]), "episode_exists")
        if ep.policy is not None and spec.policy_timeout is not None:
            ep.policy.timeout = spec.policy_timeout
        base = state.base_url(request)
        return JSONResponse(
            {
                "key": ep.key,
                "base_url": f"{base}/e/{ep.key}/v1",
                "anthropic_base_url": f"{base}/e/{ep.key}",
            }
        )

    @app.get("/episodes/{key}")
    async def get_episode(key: str, request: Request) -> Response:
        guard(request)
        ep = state.episodes.get(key)
        if ep is None:
            return _admin_error(404, f"unknown episode key {key!r}", "episode_not_found")
        return JSONResponse(ep.public())

    @app.post("/episodes/{key}/close", openapi_extra=openapi.body("EpisodeOutcome", False))
    async def close_episode(key: str, request: Request) -> Response:
        """Close an episode; an optional body (reward, resolved, failure_kind, ...) is recorded.
        A refused close (400) leaves the episode open."""
        guard(request)
        if state.episodes.get(key) is None:
            return _admin_error(404, f"unknown episode key {key!r}", "episode_not_found")
        try:
            outcome = await _admin_body(request)
            if not isinstance(outcome, dict):
                raise ValueError("the body must be a JSON object")
            ep = state.close_episode(key, outcome)
        except BadRequest as e:
            return _admin_error(e.status, e.message, e.code)
        except ValueError as e:
            return _admin_error(400, f"invalid outcome: {e}", "invalid_outcome")
        except OSError as e:
            return _admin_error(503, f"the episode row could not be written: {e}", "store_error")
        return JSONResponse(ep.public())

    # --- the policy of a "policy" episode, over HTTP (in-process: Episode.policy) -------------
    def _policy_of(key: str) -> Any:
        ep = state.episodes.get(key)
        if ep is None or ep.policy is None:
            raise BadRequest(404, f"no policy episode {key!r}", "episode_not_found")
        return ep.policy

    @app.get("/episodes/{key}/calls/next")
    async def next_policy_call(
        key: str, request: Request, timeout: float = Query(30.0, ge=0, le=600)
    ) -> Response:
        """The next held call (dialect-neutral); 204 once the episode is over, 408 on timeout."""
        guard(request)
        try:
            policy = _policy_of(key)
            call = await anyio.to_thread.run_sync(policy.next_call, timeout)
        except BadRequest as e:
            return _admin_error(e.status, e.message, e.code)
        except TimeoutError as e:
            return _admin_error(408, str(e), "timeout")
        if call is None:
            return Response(status_code=204)
        return JSONResponse(
            {
                "sequence": call.sequence,
                "stream": call.stream,
                "model": call.model,
                **call.observation(),
            }
        )

    @app.post("/episodes/{key}/calls/{sequence}/reply", openapi_extra=openapi.body("PolicyReply"))
    async def reply_policy_call(key: str, sequence: int, request: Request) -> Response:
        """Release a held call with {"text", "tool_calls": [{"name", "arguments"}]}."""
        guard(request)
        try:
            policy = _policy_of(key)
            action = await _admin_body(request)
            call = policy.held(sequence)
            if call is None:
                raise BadRequest(409, f"call {sequence} is not waiting", "call_expired")
            policy.reply(call, action)
        except BadRequest as e:
            return _admin_error(e.status, e.message, e.code)
        except CallExpired as e:
            return _admin_error(409, str(e), "call_expired")
        except (ValueError, TypeError) as e:
            return _admin_error(400, str(e), "invalid_action")
        return JSONResponse({"released": sequence})

    # --- discovery and probes ----------------------------------------------------------------
    def models_list() -> dict[str, Any]:
        names = state.config.model_names()
        data = [
            {"id": n, "object": "model", "created": 0, "owned_by": "proxy", "type": "model", "display_name": n,
             "created_at": "2025-01-01T00:00:00Z"}
            for n in names
        ]  # fmt: skip
        return {
            "object": "list",
            "data": data,
            "has_more": False,
            "first_id": names[0],
            "last_id": names[-1],
        }

    async def list_models(request: Request) -> Response:
        if "key" not in request.path_params:
            guard(request)
        return JSONResponse(models_list())

    for path in (
        "/v1/models",
        "/models",
        "/api/v1/models",
        "/e/{key}/v1/models",
        "/e/{key}/models",
    ):
        app.add_api_route(path, list_models, methods=["GET"])

    async def count_tokens(request: Request) -> Response:
        if "key" not in request.path_params:
            guard(request)
        try:
            raw = await _read_body(request, state.config.max_body_bytes)
            _object(raw)
        except BadRequest as e:
            return error_response(DIALECTS["anthropic"], e.status, e.message, e.code)
        return JSONResponse({"input_tokens": max(1, len(raw) // 4)})

    for prefix in ("", "/e/{key}"):
        app.add_api_route(
            prefix + "/v1/messages/count_tokens",
            count_tokens,
            methods=["POST"],
            openapi_extra=openapi.body("CountTokensRequest"),
        )

    @app.head("/")
    async def head_root() -> Response:
        return Response(status_code=200)

    @app.get("/")
    async def root() -> Response:
        return JSONResponse({"service": "pomona proxy", "models": state.config.model_names()})

    @app.get("/healthz")
    async def healthz() -> Response:
        return JSONResponse({"ok": True})

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        """Unknown routes and probes (Hermes' /api/tags, /v1/props...) get a harmless JSON 404;
        other refusals (401, 405) come in the dialect the path speaks."""
        path = request.url.path
        status = exc.status_code
        message = f"{request.method} {path}: {exc.detail}"
        if path.endswith(("/messages", "/count_tokens")):
            return error_response(DIALECTS["anthropic"], status, message)
        if status == 404:
            body = {"error": {"message": message, "type": "not_found"}}
            return JSONResponse(body, status_code=404, headers=request_ids())
        return error_response(_ADMIN, status, message)

    @app.exception_handler(RequestValidationError)
    async def invalid_parameters(request: Request, exc: RequestValidationError) -> Response:
        where = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()[:5]
        )
        return _admin_error(400, f"invalid request: {where}", "invalid_request")

    app.openapi = lambda: openapi.build(app)  # type: ignore[method-assign]
    return app


async def _aiter(items: Iterable[bytes]) -> AsyncIterator[bytes]:
    for item in items:
        yield item


def _rendered(
    dialect: Dialect, final: dict[str, Any], body: dict[str, Any], upstream: str
) -> Outcome:
    """An answer the proxy made itself (scripted model, policy), streamed if the caller asked."""
    if dialect.is_stream(body):
        return Outcome(200, stream=_aiter(dialect.events(final, body)), upstream=upstream)
    return Outcome(200, json.dumps(final, ensure_ascii=False).encode(), upstream=upstream)


def _whole(call: Call, dialect: Dialect, outcome: Outcome) -> Response:
    """Record and return a non-streamed answer, byte for byte as the upstream sent it."""
    text = outcome.body.decode("utf-8", "replace")
    try:
        final = json.loads(text)
    except ValueError:
        final = None
    headers = {**request_ids(), **outcome.headers}
    if outcome.status >= 400:
        message = f"upstream answered {outcome.status}"
        if not isinstance(final, dict):  # not the dialect's own error shape: wrap it
            wrapped = error_response(
                dialect, outcome.status, f"{message}: {text[:500]}", "upstream_error", headers
            )
            call.finish(
                "upstream_error", outcome.status, response=wrapped.body.decode(), error=message
            )
            return wrapped
        call.finish("upstream_error", outcome.status, response=text, error=message)
    elif not isinstance(final, dict):
        message = f"upstream answered {outcome.status} with a body that is not a JSON object"
        wrapped = error_response(dialect, 502, f"{message}: {text[:500]}", "upstream_bad_response")
        call.finish("upstream_error", 502, response=wrapped.body.decode(), error=message)
        return wrapped
    else:
        call.finish("ok", outcome.status, response=text, final=final)
    return Response(
        outcome.body, status_code=outcome.status, media_type=outcome.content_type, headers=headers
    )


async def _relay(call: Call, dialect: Dialect, outcome: Outcome) -> AsyncIterator[bytes]:
    """Send the stream on as it arrives while recording it. A cut stream ends in the dialect's
    error event; nothing at all is sent after a terminal event."""
    parser, frames, sent = Parser(), [], []  # type: ignore[var-annotated]
    status, error = "incomplete", "client disconnected before the stream ended"
    terminal = False
    assert outcome.stream is not None
    try:
        try:
            async for chunk in outcome.stream:
                out = []
                for raw, f in parser.events(chunk):  # whole events only, up to a terminal one
                    out.append(raw)
                    if f is not None:
                        frames.append(f)
                        terminal = dialect.is_terminal(f)
                        if terminal:
                            break
                if out:
                    call.first_byte()
                    sent.append(b"".join(out))
                    yield sent[-1]
                if terminal:
                    break
            if terminal:
                status, error = "ok", None
            else:
                status, error = "upstream_error", "upstream stream ended before its final event"
                tail = dialect.stream_error(502, error)
                sent.append(tail)
                yield tail
        except UpstreamError as e:
            if terminal:
                status, error = "ok", None
            else:
                status, error = "upstream_error", e.message
                tail = dialect.stream_error(e.status, e.message)
                sent.append(tail)
                yield tail
    finally:
        if outcome.close is not None:
            with anyio.CancelScope(shield=True):
                await outcome.close()
        final = dialect.assemble(frames)
        stream_text = b"".join(sent).decode("utf-8", "replace")
        call.finish(status, outcome.status, final=final, stream_text=stream_text, error=error)
