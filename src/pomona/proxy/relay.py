"""An answer on its way back to the client, recorded as it goes: a whole body byte for byte, or a
stream relayed one whole SSE event at a time whose row is written when it ends, however it ends."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator

import anyio
from fastapi.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from pomona.proxy.dialects import Dialect
from pomona.proxy.errors import UpstreamError, request_ids
from pomona.proxy.recording import Call
from pomona.proxy.sse import Frame, Parser
from pomona.proxy.upstream import Outcome

_SSE_HEADERS = {"cache-control": "no-cache"}


class RecordedStream(StreamingResponse):
    """A StreamingResponse that always closes its iterator, so a client that hangs up mid-stream
    still leaves a record (Starlette would otherwise leave the generator to the garbage collector)."""

    def __init__(self, call: Call, dialect: Dialect, outcome: Outcome):
        self._events = _relay(call, dialect, outcome)
        super().__init__(
            self._events,
            status_code=outcome.status,
            media_type="text/event-stream",
            headers={**_SSE_HEADERS, **request_ids(), **outcome.headers},
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            with anyio.CancelScope(shield=True):
                await self._events.aclose()


def whole(call: Call, dialect: Dialect, outcome: Outcome) -> Response:
    """Record and return a non-streamed answer, byte for byte as the upstream sent it. An upstream
    error that is not in the dialect's own shape, or a success that is not a JSON object, is
    raised as an UpstreamError for the caller's dialect."""
    text = outcome.body.decode("utf-8", "replace")
    try:
        final = json.loads(text)
    except ValueError:
        final = None
    if outcome.status >= 400 and not isinstance(final, dict):
        message = f"upstream answered {outcome.status}: {text[:500]}"
        raise UpstreamError(outcome.status, message, "upstream_error", outcome.headers)
    if not isinstance(final, dict):
        message = f"upstream answered {outcome.status} with a body that is not a JSON object"
        raise UpstreamError(502, f"{message}: {text[:500]}", "upstream_bad_response")
    if outcome.status >= 400:
        error = f"upstream answered {outcome.status}"
        call.finish("upstream_error", outcome.status, response=text, error=error)
    else:
        call.finish("ok", outcome.status, response=text, final=final)
    return Response(
        outcome.body,
        status_code=outcome.status,
        media_type=outcome.content_type,
        headers={**request_ids(), **outcome.headers},
    )


async def _relay(call: Call, dialect: Dialect, outcome: Outcome) -> AsyncGenerator[bytes, None]:
    """Send the stream on as it arrives while recording it. A cut stream ends in the dialect's
    error event; nothing at all is sent after a terminal event."""
    parser = Parser()
    frames: list[Frame] = []
    sent: list[bytes] = []
    status = "incomplete"
    error: str | None = "client disconnected before the stream ended"
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
                tail = dialect.stream_error(e.status_code, e.message)
                sent.append(tail)
                yield tail
    finally:
        if outcome.close is not None:
            with anyio.CancelScope(shield=True):
                await outcome.close()
        final = dialect.assemble(frames)
        stream_text = b"".join(sent).decode("utf-8", "replace")
        call.finish(status, outcome.status, final=final, stream_text=stream_text, error=error)
