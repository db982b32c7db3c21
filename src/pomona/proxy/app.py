"""The recording proxy as a FastAPI app: three dialects, per-episode base URLs, every call recorded."""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from typing import Any

import anyio
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from pomona.proxy import scripted
from pomona.proxy.config import SCRIPTED, ProxyConfig
from pomona.proxy.dialects import DIALECTS, Dialect
from pomona.proxy.episodes import Episode, Episodes
from pomona.proxy.policy import POLICY, CallExpired
from pomona.proxy.recording import Call, Recorder
from pomona.proxy.sse import Parser
from pomona.proxy.upstream import Outcome, UpstreamError, Upstreams
from pomona.trajectories.schema import FAILURE_KINDS

_SSE_HEADERS = {"cache-control": "no-cache"}
_PROBES = ("/api/tags", "/v1/props", "/props", "/version", "/api/version")


class BadRequest(Exception):
    def __init__(self, status: int, message: str, code: str | None = None):
        super().__init__(message)
        self.status, self.message, self.code = status, message, code


class ProxyState:
    """Everything one proxy app owns."""

    def __init__(self, config: ProxyConfig):
        self.config = config
        self.episodes = Episodes()
        self.recorder = Recorder(config.trajectories, config.durable)
        self.upstreams = Upstreams(config)

    def close_episode(self, key: str, outcome: dict[str, Any]) -> Episode:
        """Close once; the first close writes the `episodes` row with its outcome."""
        ep = self.episodes.get(key)
        if ep is None:
            raise KeyError(key)
        if not ep.closed:
            self.episodes.close(key)
            self.recorder.episode(ep, outcome)
        return ep

    def base_url(self, request: Request | None) -> str:
        if self.config.public_url:
            return self.config.public_url.rstrip("/")
        return str(request.base_url).rstrip("/") if request else ""


def _ids() -> dict[str, str]:
    rid = "req_" + secrets.token_hex(12)
    return {"x-request-id": rid, "request-id": rid}


def error_response(
    dialect: Dialect, status: int, message: str, code: str | None = None
) -> JSONResponse:
    return JSONResponse(dialect.error(status, message, code), status_code=status, headers=_ids())


class RecordedStream(StreamingResponse):
    """A StreamingResponse that always closes its iterator, so a client that hangs up mid-stream
    still leaves a record (Starlette would otherwise leave the generator to the garbage collector)."""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            with anyio.CancelScope(shield=True):
                await self.body_iterator.aclose()  # type: ignore[attr-defined]


async def _read_json(request: Request, limit: int) -> tuple[bytes, dict[str, Any]]:
    """The raw body and its JSON object, or a BadRequest saying what is wrong with it."""
    ctype = request.headers.get("content-type", "")
    if ctype and "json" not in ctype.lower():
        raise BadRequest(
            415, f"expected an application/json body, got {ctype!r}", "unsupported_media_type"
        )
    if int(request.headers.get("content-length") or 0) > limit:
        raise BadRequest(413, f"request body exceeds {limit} bytes", "request_too_large")
    raw = b""
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > limit:
            raise BadRequest(413, f"request body exceeds {limit} bytes", "request_too_large")
    try:
        body = json.loads(raw)
    except ValueError as e:
        raise BadRequest(400, f"malformed JSON body: {e}", "invalid_json") from e
    if not isinstance(body, dict):
        raise BadRequest(400, "the JSON body must be an object", "invalid_json")
    return raw, body


def create_app(config: ProxyConfig | None = None) -> FastAPI:
    """The proxy app. `app.state.proxy` holds its episodes, recorder and upstream clients."""
    state = ProxyState(config or ProxyConfig())

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        await state.upstreams.aclose()
        state.recorder.close()

    app = FastAPI(
        title="pomona proxy", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None
    )
    app.state.proxy = state

    async def model_call(request: Request, dialect: Dialect) -> Response:
        key = request.path_params.get("key")
        episode = state.episodes.get(key) if key is not None else None
        if key is not None and episode is None:
            return error_response(dialect, 404, f"unknown episode key {key!r}", "episode_not_found")
        call = Call(state.recorder, dialect, request.url.path, dict(request.headers), episode)
        try:
            raw, body = await _read_json(request, state.config.max_body_bytes)
        except BadRequest as e:
            call.request(b"")
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
        try:
            outcome = await _dispatch(model, dialect, raw, body, request, episode, side)
        except BadRequest as e:
            call.route(model, None)
            call.finish("client_error", e.status, error=e.message)
            return error_response(dialect, e.status, e.message, e.code)
        except UpstreamError as e:
            route = state.config.route(str(model))
            call.route(
                model, route.path_for(dialect.name) if route else getattr(e, "upstream", None)
            )
            call.finish("upstream_error", e.status, error=e.message)
            return error_response(dialect, e.status, e.message, "upstream_error")
        call.route(model, outcome.upstream)
        if outcome.stream is None:
            return _whole(call, dialect, outcome)
        return RecordedStream(
            _relay(call, dialect, outcome),
            status_code=outcome.status,
            media_type="text/event-stream",
            headers={**_SSE_HEADERS, **_ids()},
        )

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
            reply = scripted.reply(
                dialect,
                body,
                script,
                final=episode.final if episode else "done",
                tool_less_is_side=episode.tool_less_is_side if episode else True,
            )
            final = dialect.final(reply, str(body.get("model") or SCRIPTED), body)
            return _rendered(dialect, final, body, "scripted")
        route = state.config.route(str(model)) if isinstance(model, str) else None
        if route is None:
            raise BadRequest(
                404, f"model {model!r} is not in the proxy's model list", "model_not_found"
            )
        headers = dict(request.headers)
        return await state.upstreams.call(route, dialect, raw, body, headers, request.url.query)

    def register(path: str, dialect: Dialect) -> None:
        async def handler(request: Request) -> Response:
            return await model_call(request, dialect)

        for prefix in ("", "/e/{key}"):
            app.add_api_route(
                prefix + path, handler, methods=["POST"], name=f"{dialect.name}{prefix}"
            )

    register("/v1/chat/completions", DIALECTS["chat"])
    register("/v1/responses", DIALECTS["responses"])
    register("/v1/messages", DIALECTS["anthropic"])

    # --- episodes ------------------------------------------------------------------------
    @app.post("/episodes")
    async def open_episode(request: Request) -> Response:
        try:
            spec = json.loads(await request.body() or b"{}")
            if not isinstance(spec, dict):
                raise ValueError("the body must be a JSON object")
            script = spec.get("script") or []
            if isinstance(script, str):
                script = [line for line in script.splitlines() if line.strip()]
            if not all(isinstance(c, str) for c in script):
                raise ValueError("script must be a list of shell command strings")
            ep = state.episodes.open(
                spec.get("key"),
                model=spec.get("model"),
                script=list(script),
                metadata=spec.get("metadata") or {},
                final=spec.get("final", "done"),
                tool_less_is_side=spec.get("tool_less_calls", "side") == "side",
            )
            if ep.policy is not None and spec.get("policy_timeout") is not None:
                ep.policy.timeout = float(spec["policy_timeout"])
        except (ValueError, KeyError, TypeError) as e:
            return JSONResponse(DIALECTS["chat"].error(400, str(e)), status_code=400)
        base = state.base_url(request)
        return JSONResponse(
            {
                "key": ep.key,
                "base_url": f"{base}/e/{ep.key}/v1",
                "anthropic_base_url": f"{base}/e/{ep.key}",
            }
        )

    @app.get("/episodes/{key}")
    async def get_episode(key: str) -> Response:
        ep = state.episodes.get(key)
        if ep is None:
            return JSONResponse(
                DIALECTS["chat"].error(404, f"unknown episode key {key!r}"), status_code=404
            )
        return JSONResponse(ep.public())

    @app.post("/episodes/{key}/close")
    async def close_episode(key: str, request: Request) -> Response:
        """Close an episode; an optional body (reward, resolved, failure_kind, ...) is recorded."""
        if state.episodes.get(key) is None:
            return JSONResponse(
                DIALECTS["chat"].error(404, f"unknown episode key {key!r}"), status_code=404
            )
        try:
            outcome = json.loads(await request.body() or b"{}")
            if outcome.get("failure_kind", "none") not in FAILURE_KINDS:
                raise ValueError(f"failure_kind must be one of {FAILURE_KINDS}")
        except (ValueError, AttributeError) as e:
            return JSONResponse(DIALECTS["chat"].error(400, str(e)), status_code=400)
        ep = state.close_episode(key, outcome)
        return JSONResponse(ep.public())

    # --- the policy of a "policy" episode, over HTTP (in-process: Episode.policy) ----------
    def _policy_of(key: str) -> Any:
        ep = state.episodes.get(key)
        if ep is None or ep.policy is None:
            raise BadRequest(404, f"no policy episode {key!r}", "episode_not_found")
        return ep.policy

    @app.get("/episodes/{key}/calls/next")
    async def next_policy_call(key: str, timeout: float = 30.0) -> Response:
        """The next held call (dialect-neutral); 204 once the episode is over, 408 on timeout."""
        try:
            policy = _policy_of(key)
            call = await anyio.to_thread.run_sync(policy.next_call, min(timeout, 600.0))
        except BadRequest as e:
            return JSONResponse(DIALECTS["chat"].error(e.status, e.message), status_code=e.status)
        except TimeoutError as e:
            return JSONResponse(DIALECTS["chat"].error(408, str(e)), status_code=408)
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

    @app.post("/episodes/{key}/calls/{sequence}/reply")
    async def reply_policy_call(key: str, sequence: int, request: Request) -> Response:
        """Release a held call with {"text", "tool_calls": [{"name", "arguments"}]}."""
        try:
            policy = _policy_of(key)
            call = policy.held(sequence)
            if call is None:
                raise BadRequest(409, f"call {sequence} is not waiting", "call_expired")
            policy.reply(call, json.loads(await request.body() or b"{}"))
        except BadRequest as e:
            return JSONResponse(DIALECTS["chat"].error(e.status, e.message), status_code=e.status)
        except CallExpired as e:
            return JSONResponse(DIALECTS["chat"].error(409, str(e)), status_code=409)
        except (ValueError, TypeError) as e:
            return JSONResponse(DIALECTS["chat"].error(400, str(e)), status_code=400)
        return JSONResponse({"released": sequence})

    # --- discovery and probes --------------------------------------------------------------
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

    for path in (
        "/v1/models",
        "/models",
        "/api/v1/models",
        "/e/{key}/v1/models",
        "/e/{key}/models",
    ):
        app.add_api_route(path, lambda: JSONResponse(models_list()), methods=["GET"])

    async def count_tokens(request: Request) -> Response:
        try:
            raw, _ = await _read_json(request, state.config.max_body_bytes)
        except BadRequest as e:
            return error_response(DIALECTS["anthropic"], e.status, e.message, e.code)
        return JSONResponse({"input_tokens": max(1, len(raw) // 4)})

    for prefix in ("", "/e/{key}"):
        app.add_api_route(prefix + "/v1/messages/count_tokens", count_tokens, methods=["POST"])

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
    async def not_found(request: Request, exc: StarletteHTTPException) -> Response:
        """Unknown routes and probes (Hermes' /api/tags, /v1/props...) get a harmless JSON 404."""
        path = request.url.path
        status = exc.status_code
        if path.endswith(("/messages", "/count_tokens")):
            return error_response(
                DIALECTS["anthropic"], status, f"{request.method} {path}: {exc.detail}"
            )
        body = {
            "error": {
                "message": f"{request.method} {path}: {exc.detail}",
                "type": "not_found" if status == 404 else "invalid_request_error",
            }
        }
        return JSONResponse(body, status_code=status, headers=_ids())

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
    if outcome.status >= 400:
        message = f"upstream answered {outcome.status}"
        call.finish("upstream_error", outcome.status, response=text, error=message)
        if not isinstance(final, dict):  # not the dialect's own error shape: wrap it
            return error_response(
                dialect, outcome.status, f"{message}: {text[:500]}", "upstream_error"
            )
    else:
        call.finish(
            "ok", outcome.status, response=text, final=final if isinstance(final, dict) else None
        )
    return Response(
        outcome.body, status_code=outcome.status, media_type=outcome.content_type, headers=_ids()
    )


async def _relay(call: Call, dialect: Dialect, outcome: Outcome) -> AsyncIterator[bytes]:
    """Send the stream on as it arrives while recording it; a cut stream ends in a dialect error."""
    parser, frames, sent = Parser(), [], []
    status, error = "incomplete", "client disconnected before the stream ended"
    terminal = False
    assert outcome.stream is not None
    try:
        try:
            async for chunk in outcome.stream:
                new, whole = parser.feed(chunk)
                frames += new
                terminal = terminal or any(dialect.is_terminal(f) for f in new)
                if whole:
                    call.first_byte()
                    sent.append(whole)
                    yield whole
            if terminal:
                status, error = "ok", None
            else:
                status, error = "upstream_error", "upstream stream ended before its final event"
                tail = dialect.stream_error(502, error)
                sent.append(tail)
                yield tail
        except UpstreamError as e:
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
