"""Fake upstream model servers, one per dialect, speaking it on the wire as the real services do.

    with FakeUpstream("chat") as vllm:          # also "responses", "anthropic"
        vllm.url                                 # http://127.0.0.1:PORT; chat and Responses
                                                 # clients use vllm.url + "/v1"
        vllm.seen[-1].body                       # what the last request carried

- **chat** is vLLM-like: `POST /v1/chat/completions`, and with `return_token_ids: true` it adds
  vLLM's `prompt_token_ids` and each choice's `token_ids` (per chunk when streamed), with
  `logprobs.content` when `logprobs` is asked for.
- **responses** serves `POST /v1/responses`; **anthropic** serves `POST /v1/messages`.
- Answers come from the scripted model (`script`), framed exactly as reference/harnesses.md §5
  shows: `data:` lines and `[DONE]` for chat, `event:` lines for the other two.
- Any other path is a 404, so a call that reaches the wrong dialect's route fails loudly.

The upstream model name picks a behaviour, so one server covers every fault:

| model | behaviour |
|---|---|
| `rate-limited` | 429 in the dialect's error shape, with `Retry-After` and `x-ratelimit-*` headers |
| `too-long` | 400 in the dialect's error shape, worded as the engine says the request is longer than the model's context (vLLM's, or Anthropic's) |
| `broken` | 500 with an HTML body |
| `gzip` | the normal answer, gzip-compressed (a stream is compressed event by event) |
| `cut` | a stream that stops mid-event and drops the connection; a whole body cut short |
| `slow` | waits `delay` seconds, then answers |
| `stall` | a stream that sends one event, then nothing for `delay` seconds |
| `hang` | never answers; notes in `cancelled` when the client (the proxy) gives up |
| `trailing` | a stream that goes on after its terminal event (an error event, then junk) |
| `spaced` | a stream whose events arrive 0.2 s apart, each in its own read (a slow network) |
| anything else | the scripted answer |
"""

from __future__ import annotations

import asyncio
import gzip
import json
import zlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import Response, StreamingResponse

from pomona.proxy import scripted
from pomona.proxy.appserver import AppServer
from pomona.proxy.dialects import DIALECTS

PATHS = {"chat": "/v1/chat/completions", "responses": "/v1/responses", "anthropic": "/v1/messages"}
RATE_LIMIT_HEADERS = {
    "retry-after": "7",
    "x-ratelimit-limit-requests": "60",
    "x-ratelimit-remaining-requests": "0",
    "x-ratelimit-reset-requests": "7s",
}


@dataclass
class Seen:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    raw: bytes


class FakeUpstream(AppServer):
    """One dialect's fake model server on a free port (uvicorn in a thread, like ProxyServer)."""

    def __init__(
        self,
        dialect: str,
        *,
        script: Sequence[str] = ("echo hello > out.txt",),
        delay: float = 30.0,
    ):
        if dialect not in PATHS:
            raise ValueError(f"dialect must be one of {sorted(PATHS)}, not {dialect!r}")
        self.dialect = DIALECTS[dialect]
        self.script = list(script)
        self.delay = delay
        self.seen: list[Seen] = []
        self.cancelled: list[str] = []
        app = FastAPI()
        app.add_api_route(PATHS[dialect], self._answer, methods=["POST"])
        super().__init__(app)

    @property
    def base_url(self) -> str:
        """The base URL an OpenAI client or LiteLLM `api_base` takes (Anthropic: `url`)."""
        return self.url if self.dialect.name == "anthropic" else self.url + "/v1"

    async def _answer(self, request: Request) -> Response:
        raw = await request.body()
        body = json.loads(raw)
        self.seen.append(Seen(request.url.path, dict(request.headers), body, raw))
        model = str(body.get("model"))
        stream = self.dialect.is_stream(body)
        if model == "rate-limited":
            error = self.dialect.error(429, "rate limit reached; retry after 7 s", "rate_limit")
            return Response(
                json.dumps(error), 429, RATE_LIMIT_HEADERS, media_type="application/json"
            )
        if model == "too-long":
            message = (
                "prompt is too long: 210000 tokens > 200000 maximum"
                if self.dialect.name == "anthropic"
                else "This model's maximum context length is 8192 tokens. However, you requested "
                "9120 tokens (8096 in the messages, 1024 in the completion)."
            )
            error = self.dialect.error(400, message, "invalid_request_error")
            return Response(json.dumps(error), 400, media_type="application/json")
        if model == "broken":
            return Response(b"<html><h1>502 Bad Gateway</h1></html>", 500, media_type="text/html")
        if model in ("hang", "slow") and await self._wait_or_leave(request, model):
            return Response(status_code=499)
        reply = scripted.reply(self.dialect, body, self.script)
        final = self.dialect.final(reply, model, body)
        events = list(self.dialect.events(final, body)) if stream else []
        if model == "cut":
            if not stream:
                data = json.dumps(final).encode()
                return _Truncated(data[: len(data) // 2], len(data))
            return StreamingResponse(self._cut(events), media_type="text/event-stream")
        if model == "stall" and stream:
            return StreamingResponse(self._stall(events), media_type="text/event-stream")
        if model == "gzip":
            if not stream:
                data = gzip.compress(json.dumps(final).encode())
                return Response(
                    data, headers={"content-encoding": "gzip"}, media_type="application/json"
                )
            return StreamingResponse(
                _gzipped(events),
                media_type="text/event-stream",
                headers={"content-encoding": "gzip"},
            )
        if model == "trailing" and stream:
            extra = [self.dialect.stream_error(500, "after the end"), b"data: junk\n\n"]
            return StreamingResponse(_each(events + extra), media_type="text/event-stream")
        if model == "spaced" and stream:
            return StreamingResponse(_spaced(events), media_type="text/event-stream")
        if stream:
            return StreamingResponse(_each(events), media_type="text/event-stream")
        return Response(json.dumps(final), media_type="application/json")

    async def _wait_or_leave(self, request: Request, model: str) -> bool:
        """Wait out the delay (forever for `hang`); True if the client left first."""
        try:
            async with asyncio.timeout(self.delay if model == "slow" else None):
                while (await request.receive())["type"] != "http.disconnect":
                    pass
        except TimeoutError:
            return False
        self.cancelled.append(model)
        return True

    async def _cut(self, events: list[bytes]) -> AsyncIterator[bytes]:
        yield events[0]
        yield events[1][: len(events[1]) // 2]
        raise ConnectionResetError("the fake upstream drops the connection mid-event")

    async def _stall(self, events: list[bytes]) -> AsyncIterator[bytes]:
        yield events[0]
        try:
            await asyncio.sleep(self.delay)
        except asyncio.CancelledError:
            self.cancelled.append("stall")
            raise
        for e in events[1:]:
            yield e


class _Truncated(Response):
    """A body that promises `length` bytes and stops short: the connection dies mid-body."""

    def __init__(self, data: bytes, length: int):
        super().__init__(data, media_type="application/json")
        self.headers["content-length"] = str(length)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
        await send({"type": "http.response.body", "body": self.body, "more_body": True})
        raise ConnectionResetError("the fake upstream drops the connection mid-body")


async def _each(events: list[bytes]) -> AsyncIterator[bytes]:
    for e in events:
        yield e


async def _spaced(events: list[bytes]) -> AsyncIterator[bytes]:
    for e in events:
        await asyncio.sleep(0.2)
        yield e


async def _gzipped(events: list[bytes]) -> AsyncIterator[bytes]:
    """One gzip stream, flushed after every event so each arrives as soon as it is sent."""
    c = zlib.compressobj(wbits=31)
    for e in events:
        yield c.compress(e) + c.flush(zlib.Z_SYNC_FLUSH)
    yield c.flush()
