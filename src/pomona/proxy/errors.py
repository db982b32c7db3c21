"""Failures, in the caller's own dialect, with one status code per kind of failure on every route.

| failure                                        | status | code                  |
|------------------------------------------------|--------|-----------------------|
| the upstream cannot be reached (refused, DNS)  | 502    | upstream_unreachable  |
| the upstream broke off or sent an unreadable answer | 502 | upstream_bad_response |
| connect, read or total timeout                 | 504    | upstream_timeout      |
| the upstream answered 4xx/5xx                  | its own | passed on            |

An upstream's rate-limit headers (`Retry-After`, `retry-after-ms`, `x-ratelimit-*`,
`anthropic-ratelimit-*`) reach the client with its answer, success or error, so SDKs back off
as the upstream asked instead of retrying in a tight loop.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping
from typing import Any

from fastapi.responses import JSONResponse

from pomona.proxy.dialects import Dialect


class BadRequest(Exception):
    """The caller's request cannot be served as sent: a 4xx in its dialect."""

    def __init__(self, status: int, message: str, code: str | None = None):
        super().__init__(message)
        self.status, self.message, self.code = status, message, code


class UpstreamError(Exception):
    """The upstream could not be reached, timed out, or refused: the caller gets `status`."""

    def __init__(
        self,
        status: int,
        message: str,
        code: str = "upstream_error",
        headers: Mapping[str, str] | None = None,
    ):
        super().__init__(message)
        self.status, self.message, self.code = status, message, code
        self.headers = dict(headers or {})


def unreachable(name: str, detail: Any) -> UpstreamError:
    return UpstreamError(502, f"upstream {name} unreachable: {detail}", "upstream_unreachable")


def broke_off(name: str, detail: Any) -> UpstreamError:
    return UpstreamError(502, f"upstream {name} broke off: {detail}", "upstream_bad_response")


def timed_out(name: str, detail: Any) -> UpstreamError:
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
    if isinstance(err, dict) and isinstance(err.get("message"), str):
        return err["message"]
    if isinstance(data, dict) and isinstance(data.get("message"), str):
        return data["message"]
    text = body.decode("utf-8", "replace").strip()
    return f"upstream answered {status}" + (f": {text[:500]}" if text else "")


def request_ids() -> dict[str, str]:
    rid = "req_" + secrets.token_hex(12)
    return {"x-request-id": rid, "request-id": rid}


def error_response(
    dialect: Dialect,
    status: int,
    message: str,
    code: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    return JSONResponse(
        dialect.error(status, message, code),
        status_code=status,
        headers={**request_ids(), **(headers or {})},
    )
