"""Every failure the proxy answers on purpose, and the one handler that answers it in the caller's
own dialect.

    PomonaError
    └── ProxyError              status_code, message, code, headers   (`calls.status` of its row)
        ├── BadRequest          the request cannot be served as sent   4xx      client_error
        │   ├── MalformedRequest  a body or argument fails its schema  400      (also a ValueError)
        │   ├── Unauthenticated   no valid API key on a guarded route   401
        │   ├── EpisodeNotFound   no such episode (or no policy in it)  404
        │   ├── EpisodeExists     an episode key already taken          409
        │   ├── CallExpired       a reply to a call no longer waiting   409      (also a RuntimeError)
        │   └── EpisodeClosed     a model call to a closed episode      410      refused
        ├── ClientGone          the client hung up before its answer    499      incomplete
        └── UpstreamError       the upstream (or the policy) failed     5xx/its  upstream_error

Upstream failures, one status per kind on every route:

| failure                                             | status  | code                  |
|-----------------------------------------------------|---------|-----------------------|
| the upstream cannot be reached (refused, DNS)       | 502     | upstream_unreachable  |
| the upstream broke off or sent an unreadable answer | 502     | upstream_bad_response |
| connect, read or total timeout                      | 504     | upstream_timeout      |
| the upstream answered 4xx/5xx                       | its own | passed on             |

An upstream's rate-limit headers (`Retry-After`, `retry-after-ms`, `x-ratelimit-*`,
`anthropic-ratelimit-*`) reach the client with its answer, success or error, so SDKs back off
as the upstream asked instead of retrying in a tight loop.

Routes raise; `add_handlers` installs the one place that turns an error into a response. The
caller's dialect is told by the URL it called (`caller_dialect`): the Anthropic SDK calls
`.../messages` and `.../messages/count_tokens`, everything else (the OpenAI SDKs, the proxy's own
routes) gets OpenAI's error shape.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Mapping, Sequence
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException

from pomona.errors import PomonaError
from pomona.proxy.dialects import DIALECTS, Dialect


class ProxyError(PomonaError):
    """A failure answered with `status_code` in the caller's dialect."""

    row_status = "client_error"  # what the `calls` row of a failed model call says

    def __init__(
        self,
        status_code: int,
        message: str,
        code: str | None = None,
        headers: Mapping[str, str] | None = None,
    ):
        super().__init__(message)
        self.status_code, self.message, self.code = status_code, message, code
        self.headers = dict(headers or {})

    def body(self, dialect: Dialect) -> bytes:
        """The error body the caller gets, in its dialect's error shape."""
        return _json(dialect.error(self.status_code, self.message, self.code))


class BadRequest(ProxyError):
    """The caller's request cannot be served as sent: a 4xx."""


class MalformedRequest(BadRequest, ValueError):
    """A body, or an in-process argument, that its schema refuses (the message names the field)."""

    def __init__(self, message: str, code: str = "invalid_request"):
        super().__init__(400, message, code)


class Unauthenticated(BadRequest):
    def __init__(self) -> None:
        super().__init__(401, "a valid API key is required (Bearer or x-api-key)")


class EpisodeNotFound(BadRequest):
    def __init__(self, key: str, what: str = "episode key"):
        super().__init__(404, f"unknown {what} {key!r}", "episode_not_found")


class EpisodeExists(BadRequest):
    def __init__(self, key: str):
        super().__init__(409, f"episode {key!r} already exists", "episode_exists")


class CallExpired(BadRequest, RuntimeError):
    """A reply came for a call that is no longer waiting (timed out, or the episode ended)."""

    def __init__(self, message: str):
        super().__init__(409, message, "call_expired")


class EpisodeClosed(BadRequest):
    row_status = "refused"

    def __init__(self, key: str):
        super().__init__(410, f"episode {key!r} is closed", "episode_closed")


class ClientGone(ProxyError):
    """The client hung up before its answer was ready (499: nobody reads the answer)."""

    row_status = "incomplete"

    def __init__(self) -> None:
        super().__init__(499, "client disconnected before the answer", "client_gone")


class UpstreamError(ProxyError):
    """The upstream could not be reached, timed out, or refused: the caller gets `status_code`."""

    row_status = "upstream_error"

    def __init__(
        self,
        status_code: int,
        message: str,
        code: str = "upstream_error",
        headers: Mapping[str, str] | None = None,
    ):
        super().__init__(status_code, message, code, headers)


# How engines say a request does not fit the model's context: OpenAI's error code, vLLM's and
# OpenAI's wording, SGLang's, Anthropic's, LiteLLM's exception, and Pomona's own model server
_CONTEXT_EXCEEDED = re.compile(
    r"context_length_exceeded|maximum context length|context window|ContextWindowExceeded"
    r"|prompt is too long|longer than the model's context length|exceeds the model's context",
    re.IGNORECASE,
)


def context_exceeded(status_code: int | None, *texts: str | None) -> bool:
    """Whether an upstream's 4xx says the request outgrew the model's context: the episode's own
    end (its conversation grew too long for the model), not a failure of the infrastructure."""
    return (
        status_code is not None
        and 400 <= status_code < 500
        and any(t and _CONTEXT_EXCEEDED.search(t) for t in texts)
    )


def at_fault(errors: Sequence[Mapping[str, Any]]) -> str:
    """Pydantic's validation errors as one line naming each bad field (the first five)."""
    return "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}" for e in errors[:5]
    )


def unreachable(name: str, detail: object) -> UpstreamError:
    return UpstreamError(502, f"upstream {name} unreachable: {detail}", "upstream_unreachable")


def broke_off(name: str, detail: object) -> UpstreamError:
    return UpstreamError(502, f"upstream {name} broke off: {detail}", "upstream_bad_response")


def timed_out(name: str, detail: object) -> UpstreamError:
    return UpstreamError(504, f"upstream {name} timed out: {detail}", "upstream_timeout")


_RATE_PREFIXES = ("x-ratelimit-", "anthropic-ratelimit-", "ratelimit-")
_RATE_NAMES = frozenset({"retry-after", "retry-after-ms", "x-should-retry"})


def rate_limit_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The headers that tell a client when to retry, taken from an upstream answer."""
    return {
        k: v
        for k, v in headers.items()
        if k.lower() in _RATE_NAMES or k.lower().startswith(_RATE_PREFIXES)
    }


def upstream_message(body: bytes, status: int) -> str:
    """The upstream's own error message, whichever dialect's error shape it used."""
    try:
        data = json.loads(body)
    except ValueError:
        data = None
    err = data.get("error") if isinstance(data, dict) else None
    for holder in (err, data):  # OpenAI and Anthropic nest it under "error"; others do not
        message = holder.get("message") if isinstance(holder, dict) else None
        if isinstance(message, str):
            return message
    text = body.decode("utf-8", "replace").strip()
    return f"upstream answered {status}" + (f": {text[:500]}" if text else "")


# --- answering ----------------------------------------------------------------------------------


def request_ids() -> dict[str, str]:
    rid = "req_" + secrets.token_hex(12)
    return {"x-request-id": rid, "request-id": rid}


def caller_dialect(path: str) -> Dialect:
    """The dialect whose error shape the caller of `path` understands."""
    if path.endswith(("/messages", "/count_tokens")):
        return DIALECTS["anthropic"]
    return DIALECTS["responses" if path.endswith("/responses") else "chat"]


def _json(content: object) -> bytes:
    return json.dumps(content, ensure_ascii=False, separators=(",", ":")).encode()


def _answer(status: int, body: bytes, headers: Mapping[str, str] | None = None) -> Response:
    return Response(
        body,
        status_code=status,
        media_type="application/json",
        headers={**request_ids(), **(headers or {})},
    )


def error_response(dialect: Dialect, error: ProxyError) -> Response:
    return _answer(error.status_code, error.body(dialect), error.headers)


async def _proxy_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ProxyError)
    return error_response(caller_dialect(request.url.path), exc)


async def _http_error(request: Request, exc: Exception) -> Response:
    """Unknown routes and probes (Hermes' /api/tags, /v1/props...) get a harmless JSON 404;
    other refusals (405...) come in the dialect the path speaks."""
    assert isinstance(exc, HTTPException)
    path, status = request.url.path, exc.status_code
    message = f"{request.method} {path}: {exc.detail}"
    dialect = caller_dialect(path)
    if status == 404 and dialect.name != "anthropic":
        return _answer(404, _json({"error": {"message": message, "type": "not_found"}}))
    return error_response(dialect, ProxyError(status, message, headers=exc.headers))


async def _invalid_parameters(request: Request, exc: Exception) -> Response:
    """A path or query parameter of the wrong type or range (`timeout=-1`): a 400."""
    assert isinstance(exc, RequestValidationError)
    error = MalformedRequest(f"invalid request: {at_fault(exc.errors())}")
    return error_response(caller_dialect(request.url.path), error)


def add_handlers(app: FastAPI) -> None:
    """Answer every error the app raises in its caller's dialect."""
    app.add_exception_handler(ProxyError, _proxy_error)
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _invalid_parameters)
