"""What went over the wire to the upstream: the request sent and the response bytes received.

Every upstream HTTP client the proxy uses (its own pass-through client, and LiteLLM's clients
once `install` has run) gets a `CapturingTransport`. A call sets `exchange` (a context variable)
before calling out, so the transport knows whose exchange it is recording without any provider
code having to pass it along; LiteLLM's translation layers therefore need no changes.

The response body is recorded as it is read, so a stream is recorded as it is relayed and a
cut stream keeps what arrived; a body its reader closes early is read to its end (for at most
2 s) before it closes, so the record holds all the upstream sent. Compressed bodies are recorded
decoded.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import zlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx

from pomona.proxy.sse import Parser

exchange: contextvars.ContextVar[Exchange | None] = contextvars.ContextVar(
    "pomona_exchange", default=None
)


@dataclass
class Exchange:
    """One call's upstream HTTP exchange (the last one, should a provider client retry)."""

    url: str | None = None
    request_headers: dict[str, str] = field(default_factory=dict)
    request_body: bytes = b""
    status: int | None = None
    response_headers: dict[str, str] = field(default_factory=dict)
    encoding: str = "identity"
    _raw: list[bytes] = field(default_factory=list)

    def sent(self, request: httpx.Request) -> None:
        self.url, self.request_headers = str(request.url), dict(request.headers)
        self.request_body = request.content
        self.status, self.response_headers, self._raw = None, {}, []

    def received(self, response: httpx.Response) -> None:
        self.status, self.response_headers = response.status_code, dict(response.headers)
        self.encoding = response.headers.get("content-encoding", "identity").strip().lower()

    @property
    def response_body(self) -> bytes:
        """The bytes received so far, content-decoded where the encoding is one we can decode."""
        raw = b"".join(self._raw)
        return _decode(raw, self.encoding)

    def response_json(self) -> Any:
        """The decoded body as JSON (non-streamed answers), else None."""
        import json

        try:
            return json.loads(self.response_body)
        except ValueError:
            return None

    def frames(self) -> list[Any]:
        """The decoded body as SSE frames (streamed answers)."""
        frames, _ = Parser().feed(self.response_body + b"\n\n")
        return frames


def _decode(raw: bytes, encoding: str) -> bytes:
    if not raw or encoding in ("identity", ""):
        return raw
    try:
        if encoding in ("gzip", "x-gzip", "deflate"):
            d = zlib.decompressobj(47)  # gzip or zlib header, detected
            try:
                return d.decompress(raw) + d.flush()
            except zlib.error:
                return zlib.decompressobj(-15).decompress(raw)  # raw deflate
        if encoding == "br":
            import brotli  # type: ignore[import-not-found]  # there when httpx asks for br

            return bytes(brotli.decompress(raw))
        if encoding == "zstd":
            import zstandard  # type: ignore[import-not-found]

            return bytes(zstandard.ZstdDecompressor().decompressobj().decompress(raw))
    except Exception:  # a torn compressed stream: keep what we have, undecoded
        return raw
    return raw


class _TeeStream(httpx.AsyncByteStream):
    """The upstream's body, recorded as its reader reads it, and to its end when the reader
    closes it early: LiteLLM stops reading a stream at the provider's finish reason, and whether
    the final event (Anthropic's `message_stop`) had arrived in the same read is up to the
    network, so the record would otherwise lose it."""

    DRAIN_TIMEOUT = 2.0  # a well-behaved upstream ends its body right after the final event

    def __init__(self, inner: Any, into: Exchange):
        self.inner, self.into = inner, into
        self._chunks: AsyncIterator[bytes] | None = None

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self

    async def __anext__(self) -> bytes:
        if self._chunks is None:
            self._chunks = aiter(self.inner)
        chunk = await anext(self._chunks)
        self.into._raw.append(chunk)
        return chunk

    async def aclose(self) -> None:
        with contextlib.suppress(Exception):  # a cut body keeps what arrived
            async with asyncio.timeout(self.DRAIN_TIMEOUT):
                async for _ in self:
                    pass
        await self.inner.aclose()


class CapturingTransport(httpx.AsyncBaseTransport):
    """Wraps a transport; records into the current `exchange`, if any, what passes through."""

    def __init__(self, inner: httpx.AsyncBaseTransport):
        self.inner = inner

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        into = exchange.get()
        if into is None:
            return await self.inner.handle_async_request(request)
        await request.aread()
        into.sent(request)
        response = await self.inner.handle_async_request(request)
        into.received(response)
        response.stream = _TeeStream(response.stream, into)
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


_installed = False


def install(litellm: Any) -> None:
    """Make every async HTTP client LiteLLM creates from now on record into `exchange`.

    LiteLLM builds its async transports in one place (`AsyncHTTPHandler.create_async_transport`,
    used for its own clients and for the OpenAI SDK clients it makes), so wrapping that factory
    covers every provider, over whichever transport LiteLLM picks (aiohttp by default).
    """
    global _installed
    if _installed:
        return
    from litellm.llms.custom_httpx.http_handler import AsyncHTTPHandler

    make = AsyncHTTPHandler.create_async_transport

    def capturing(*args: Any, **kwargs: Any) -> httpx.AsyncBaseTransport:
        inner = make(*args, **kwargs)
        if inner is None:  # LiteLLM's "httpx's default transport", with the same settings
            inner = httpx.AsyncHTTPTransport(
                verify=kwargs.get("ssl_context") or kwargs.get("ssl_verify") is not False,
                cert=kwargs.get("cert"),
                limits=kwargs.get("limits", httpx.Limits(max_connections=1000)),
            )
        return CapturingTransport(inner)

    AsyncHTTPHandler.create_async_transport = staticmethod(capturing)  # type: ignore[method-assign,assignment]
    AsyncHTTPHandler._create_async_transport = staticmethod(capturing)  # type: ignore[assignment]
    _installed = True
