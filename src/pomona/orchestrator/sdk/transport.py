"""The SDK's HTTP transport: httpx's requests and responses over aiohttp's connection pool.

A 1,000-sandbox run holds a thousand requests open at once. httpcore's pool walks every
connection (polling each idle socket) whenever a request starts or ends, and its per-request
cost made the SDK's own CPU, not the service, bound such a run on 2 cores; aiohttp's pool finds
a connection without a walk and parses responses in C. httpx stays the SDK's API (its requests,
responses, timeouts and exception classes), so the retry rules in remote.py read the same.

aiohttp's errors are mapped to httpx's by what they say about the request, since remote.py
repeats a request on a never-sent error only: a failed or timed-out connect never sent it
(ConnectError, ConnectTimeout); anything after that may have (ReadError, ReadTimeout,
RemoteProtocolError). aiohttp itself re-sends only idempotent methods on a reused connection
the server had closed.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator

import aiohttp
import httpx

NEVER_SENT: list[tuple[type[Exception], type[httpx.TransportError]]] = [
    (aiohttp.ConnectionTimeoutError, httpx.ConnectTimeout),
    (aiohttp.ClientConnectorError, httpx.ConnectError),
]
MAYBE_SENT: list[tuple[type[Exception], type[httpx.TransportError]]] = [
    (aiohttp.SocketTimeoutError, httpx.ReadTimeout),
    (aiohttp.ServerDisconnectedError, httpx.RemoteProtocolError),
    (aiohttp.ClientPayloadError, httpx.ReadError),
    (aiohttp.ClientError, httpx.ReadError),
]


@contextlib.contextmanager
def _as_httpx(request: httpx.Request) -> Iterator[None]:
    try:
        yield
    except aiohttp.ClientError as e:
        cls = next(to for frm, to in (*NEVER_SENT, *MAYBE_SENT) if isinstance(e, frm))
        raise cls(f"{type(e).__name__}: {e}", request=request) from e


class _Body(httpx.AsyncByteStream):
    def __init__(self, response: aiohttp.ClientResponse, request: httpx.Request):
        self._response, self._request = response, request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with _as_httpx(self._request):
            async for chunk in self._response.content.iter_any():
                yield chunk

    async def aclose(self) -> None:
        self._response.release()


class AiohttpTransport(httpx.AsyncBaseTransport):
    """At most `max_connections` connections; idle ones are kept `keepalive` seconds (shorter
    than the service's own keep-alive, so a connection it closes is never reused)."""

    def __init__(self, max_connections: int, keepalive: float = 60.0):
        self.max_connections, self.keepalive = max_connections, keepalive
        self._session: aiohttp.ClientSession | None = None

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:  # made inside the running loop
            connector = aiohttp.TCPConnector(
                limit=self.max_connections, limit_per_host=0, keepalive_timeout=self.keepalive
            )
            self._session = aiohttp.ClientSession(
                connector=connector, auto_decompress=False, skip_auto_headers={"User-Agent"}
            )
        return self._session

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        limits = request.extensions.get("timeout", {})
        timeout = aiohttp.ClientTimeout(
            total=None,
            connect=limits.get("pool"),
            sock_connect=limits.get("connect"),
            sock_read=limits.get("read"),
        )
        with _as_httpx(request):
            response = await self._open().request(
                request.method,
                str(request.url),
                headers=request.headers.multi_items(),
                data=await request.aread() or None,
                allow_redirects=False,
                timeout=timeout,
            )
        return httpx.Response(
            response.status,
            headers=response.raw_headers,
            stream=_Body(response, request),
            request=request,
        )

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
