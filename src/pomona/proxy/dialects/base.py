"""What the three wire dialects share: the neutral reply, tool discovery, errors and SSE framing.

A dialect turns a neutral `Reply` into its final JSON object, turns that object into the exact
SSE sequence clients need (reference/harnesses.md §5), and assembles a recorded stream back into
the final object. Keeping `events(final)` and `assemble(frames)` inverse of each other lets
scripted answers and passed-through streams be recorded the same way.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

from pomona.proxy.sse import Frame, frame


@dataclass
class Tool:
    """A tool the request offers, reduced to what the scripted model needs."""

    name: str
    parameters: dict[str, Any] = field(default_factory=dict)
    kind: str = "function"  # function | local_shell


@dataclass
class ToolCall:
    name: str
    arguments: dict[str, Any]
    kind: str = "function"


@dataclass
class Reply:
    """A model answer before it is dressed in a dialect: text or one tool call."""

    text: str | None = None
    tool_call: ToolCall | None = None
    input_tokens: int = 10
    output_tokens: int = 2
    prompt_token_ids: list[int] | None = None
    completion_token_ids: list[int] | None = None
    logprobs: list[dict[str, Any]] | None = None  # OpenAI logprobs.content entries


@dataclass
class TokenData:
    prompt_ids: list[int] | None = None
    completion_ids: list[int] | None = None
    logprobs: list[float] | None = None


_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    409: "invalid_request_error",
    410: "invalid_request_error",
    413: "request_too_large",
    415: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
    502: "api_error",
    503: "overloaded_error",
    504: "timeout_error",
}


def error_type(status: int) -> str:
    return _ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")


def new_id(prefix: str, n: int = 12) -> str:
    return prefix + secrets.token_hex(n // 2)


def now() -> int:
    return int(time.time())


def text_of(content: Any) -> str:
    """The text in a message content, whether a string or a list of parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            text_of(p.get("text", p.get("content", ""))) for p in content if isinstance(p, dict)
        )
    return ""


class Dialect:
    """The shared shape of a dialect; subclasses fill in the wire specifics."""

    name: ClassVar[str]

    # --- reading requests -------------------------------------------------------------
    def tools(self, body: dict[str, Any]) -> list[Tool]:
        raise NotImplementedError

    def tool_results(self, body: dict[str, Any]) -> int:
        """How many tool results the conversation carries (reference §5.0)."""
        raise NotImplementedError

    def assistant_texts(self, body: dict[str, Any]) -> list[str]:
        raise NotImplementedError

    def is_stream(self, body: dict[str, Any]) -> bool:
        return bool(body.get("stream"))

    # --- writing responses ------------------------------------------------------------
    def error(self, status: int, message: str, code: str | None = None) -> dict[str, Any]:
        return {
            "error": {"message": message, "type": error_type(status), "code": code, "param": None}
        }

    def stream_error(self, status: int, message: str) -> bytes:
        """An in-band error for a stream whose 200 headers were already sent."""
        return frame(self.error(status, message))

    def final(self, reply: Reply, model: str, body: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    def events(self, final: dict[str, Any], body: dict[str, Any]) -> Iterator[bytes]:
        raise NotImplementedError

    # --- recording --------------------------------------------------------------------
    def assemble(self, frames: Iterable[Frame]) -> dict[str, Any] | None:
        """The final object a stream amounts to (None if it held nothing recognisable)."""
        raise NotImplementedError

    def is_terminal(self, f: Frame) -> bool:
        """Did this frame end the stream properly? Without one the stream was cut."""
        raise NotImplementedError

    def usage(self, final: dict[str, Any]) -> dict[str, int | None]:
        u = final.get("usage") or {}
        i = u.get("input_tokens", u.get("prompt_tokens"))
        o = u.get("output_tokens", u.get("completion_tokens"))
        t = u.get("total_tokens", (i or 0) + (o or 0) if i is not None or o is not None else None)
        return {"input_tokens": i, "output_tokens": o, "total_tokens": t}

    def token_data(self, final: dict[str, Any]) -> TokenData:
        return TokenData()
