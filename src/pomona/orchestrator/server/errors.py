"""How the service answers a failure. Routes only raise; the handlers here turn what was raised
into one body, `{"error": <class>, "detail": <what to fix>, "request_id", "job_id"?}`, with the
status its class maps to (a class not listed takes its nearest listed base's):

    InvalidRequest 422 · NotFound 404 · SandboxConflict, JobCancelled 409 · TooLarge 413
    AuthenticationRequired 401 · PermissionDenied 403 · WaitTimedOut 408 (the only 408)
    QuotaExceeded 429 · Overloaded, StoreUnavailable, RuntimeUnavailable 503 + Retry-After
    anything else 500

What is not a PomonaError is translated to one first: a request that fails its schema is an
InvalidRequest, a refusal of the filesystem (a path too long, a disk full) the error its errno
means, an unreachable store a StoreUnavailable.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import sqlite3
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from pomona.errors import (
    AuthenticationRequired,
    FileNotFoundInSandbox,
    InvalidRequest,
    JobCancelled,
    NotFound,
    Overloaded,
    PathOutsideSandbox,
    PermissionDenied,
    PomonaError,
    QuotaExceeded,
    RuntimeUnavailable,
    SandboxConflict,
    StoreUnavailable,
    SystemCallFailed,
    TooLarge,
    WaitTimedOut,
)
from pomona.orchestrator.api_models import ErrorBody

log = logging.getLogger("pomona.service")
STATUS: dict[type[PomonaError], int] = {
    InvalidRequest: 422, NotFound: 404, SandboxConflict: 409, JobCancelled: 409, TooLarge: 413,
    AuthenticationRequired: 401, PermissionDenied: 403, WaitTimedOut: 408, QuotaExceeded: 429,
    Overloaded: 503, StoreUnavailable: 503, RuntimeUnavailable: 503,
}  # fmt: skip
OS_ERRORS: dict[int, type[PomonaError]] = {
    errno.ENAMETOOLONG: InvalidRequest, errno.EINVAL: InvalidRequest, errno.ENOTDIR: InvalidRequest,
    errno.EISDIR: InvalidRequest, errno.ENOENT: FileNotFoundInSandbox, errno.ELOOP: PathOutsideSandbox,
    errno.ENOSPC: TooLarge, errno.EDQUOT: TooLarge, errno.EFBIG: TooLarge,
}  # fmt: skip
HTTP_ERRORS: dict[int, type[PomonaError]] = {
    401: AuthenticationRequired,
    403: PermissionDenied,
    404: NotFound,
    413: TooLarge,
}
RETRY_AFTER = "1"  # seconds, on every 503: the SDK waits this long (plus jitter) and retries
ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorBody, "description": text}
    for code, text in (
        (401, "no X-API-Key"),
        (403, "unknown key"),
        (404, "unknown id (or not yours)"),
        (409, "conflict"),
        (413, "too large"),
        (422, "invalid input"),
        (503, "overloaded or store unreachable: retry after Retry-After"),
    )
}  # the error answers every authenticated route documents
CREATES = {  # routes that create sandboxes also answer a spent quota
    **ERRORS,
    429: {"model": ErrorBody, "description": "the key's quota (sandboxes, CPU, memory) is used up"},
}


def status_of(error: PomonaError) -> int:
    return next((STATUS[c] for c in type(error).__mro__ if c in STATUS), 500)


def error_response(
    status: int, name: str, detail: Any, request_id: str | None, job_id: str | None = None
) -> JSONResponse:
    body = ErrorBody(error=name, detail=detail, request_id=request_id, job_id=job_id)
    headers = {"Retry-After": RETRY_AFTER} if status == 503 else None
    return JSONResponse(body.model_dump(exclude_none=True), status, headers=headers)


def _answer(
    request: Request, status: int, name: str, detail: Any, job_id: str | None = None
) -> JSONResponse:
    return error_response(status, name, detail, request.state.request_id, job_id)


async def pomona_error(request: Request, e: Exception) -> JSONResponse:
    assert isinstance(e, PomonaError)
    job_id = e.job_id if isinstance(e, WaitTimedOut) else None
    return _answer(request, status_of(e), type(e).__name__, str(e), job_id)


async def invalid_request(request: Request, e: Exception) -> JSONResponse:
    assert isinstance(e, RequestValidationError)
    problems = "; ".join(
        f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in e.errors()
    )
    return await pomona_error(request, InvalidRequest(f"invalid request: {problems}"))


async def http_error(request: Request, e: Exception) -> JSONResponse:
    """Starlette's own refusals: an unknown route, a method the route lacks, a body too large."""
    assert isinstance(e, HTTPException)
    known = HTTP_ERRORS.get(e.status_code)
    name = known.__name__ if known else "MethodNotAllowed" if e.status_code == 405 else "HTTPError"
    return _answer(request, e.status_code, name, e.detail)


async def store_unreachable(request: Request, e: Exception) -> JSONResponse:
    log.warning("store unreachable: %s", e)
    return await pomona_error(
        request,
        StoreUnavailable(f"the state store is unreachable ({type(e).__name__}); retry shortly"),
    )


async def os_error(request: Request, e: Exception) -> JSONResponse:
    """What a path or size asked of the filesystem and it refused: the caller's to fix."""
    assert isinstance(e, OSError)
    code = e.errno or 0
    detail = f"{e.strerror or e} ({errno.errorcode.get(code, '?')})"
    if (kind := OS_ERRORS.get(code)) is not None:
        return await pomona_error(request, kind(detail))
    log.exception("unhandled OS error in %s %s", request.method, request.url.path)
    return _answer(request, 500, "InternalError", detail)


async def internal_error(request: Request, e: Exception) -> JSONResponse:
    log.exception("unhandled error in %s %s", request.method, request.url.path)
    return _answer(request, 500, "InternalError", f"{type(e).__name__}: {e}")


def _store_errors() -> tuple[type[Exception], ...]:
    errors: list[type[Exception]] = [sqlite3.OperationalError]
    with contextlib.suppress(ImportError):
        import redis.exceptions

        errors += [
            redis.exceptions.ConnectionError,
            redis.exceptions.TimeoutError,
            redis.exceptions.BusyLoadingError,
        ]
    return tuple(errors)


def add_handlers(app: FastAPI) -> None:
    """Answer everything the app raises as an ErrorBody (the most specific handler wins)."""
    app.add_exception_handler(PomonaError, pomona_error)
    app.add_exception_handler(RequestValidationError, invalid_request)
    app.add_exception_handler(HTTPException, http_error)
    for store_error in _store_errors():
        app.add_exception_handler(store_error, store_unreachable)
    app.add_exception_handler(OSError, os_error)
    # a failed system call is an OSError first: its errno says whose fault it is (a name too
    # long is the caller's), not the PomonaError it also is (that handler would answer 500)
    app.add_exception_handler(SystemCallFailed, os_error)
    app.add_exception_handler(Exception, internal_error)
