"""The upstream layer: which module serves a model, under one set of time limits.

An upstream *kind* is one module that turns a caller's request into an `Outcome` (a whole
body or a byte stream in the caller's dialect). A route names its kind in the model list
(`model_info.pomona.kind`); the default, `litellm`, passes a call through unchanged when the
upstream speaks the caller's dialect (`passthrough.py`) and translates it with LiteLLM
otherwise (`translation.py`). To add a kind:

    from pomona.proxy.upstream import Outcome, UpstreamCall, register_kind

    class MyUpstream:
        def __init__(self, config: ProxyConfig): ...
        async def call(self, call: UpstreamCall) -> Outcome: ...   # raise UpstreamError on failure
        async def aclose(self) -> None: ...

    register_kind("mine", MyUpstream)          # routes with model_info.pomona.kind: mine

Whatever the kind, the proxy records the upstream HTTP exchange (`capture.py`), applies the
route's total time limit to the whole call, stream included, and cancels the call when the
client leaves.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import anyio

from pomona.proxy.config import ModelRoute, ProxyConfig
from pomona.proxy.dialects import Dialect
from pomona.proxy.errors import UpstreamError, timed_out
from pomona.proxy.sampling import Pin

__all__ = [
    "KINDS",
    "Outcome",
    "Upstream",
    "UpstreamCall",
    "UpstreamError",
    "Upstreams",
    "register_kind",
]


@dataclass
class UpstreamCall:
    """One caller request bound for a route."""

    route: ModelRoute
    dialect: Dialect  # the caller's
    raw: bytes  # the body exactly as the caller sent it
    body: dict[str, Any]
    headers: dict[str, str]
    query: str = ""
    pin: Pin | None = None  # the route's pinned sampling, already written into `body`
    started: float | None = None  # perf_counter when the kind was called (after its warm-up)
    first_byte: float | None = None  # perf_counter when its answer, or a stream's first chunk, came

    @property
    def ttfb(self) -> float | None:
        """The upstream's own time to first byte in seconds, once it answered."""
        if self.started is None or self.first_byte is None:
            return None
        return self.first_byte - self.started


@dataclass
class Outcome:
    """An answer in the caller's dialect: a whole body, or a byte stream to relay."""

    status: int
    body: bytes = b""
    stream: AsyncIterator[bytes] | None = None
    close: Callable[[], Awaitable[None]] | None = None
    content_type: str = "application/json"
    upstream: str = "passthrough"  # recorded in `calls.upstream`
    upstream_dialect: str | None = None  # the dialect spoken on the upstream wire, if any
    headers: dict[str, str] = field(default_factory=dict)  # passed on to the client


class Upstream(Protocol):
    async def call(self, call: UpstreamCall) -> Outcome: ...

    async def aclose(self) -> None: ...


@runtime_checkable
class WarmingUpstream(Upstream, Protocol):
    """A kind with one-time set-up (imports, model loads), awaited before a call's time limits
    start."""

    async def warm(self, call: UpstreamCall) -> None: ...


KINDS: dict[str, Callable[[ProxyConfig], Upstream]] = {}


def register_kind(name: str, factory: Callable[[ProxyConfig], Upstream]) -> None:
    """Make `model_info.pomona.kind: NAME` routes be served by `factory(config)`."""
    KINDS[name] = factory


class ProviderUpstream:
    """The default kind: pass-through for the route's native dialects, LiteLLM for the rest."""

    def __init__(self, config: ProxyConfig):
        from pomona.proxy.passthrough import Passthrough

        self.passthrough = Passthrough()

    async def warm(self, call: UpstreamCall) -> None:
        """Slow one-time set-up off the event loop, before any time limit runs: a
        `transformers/<model dir>` route gets its local model server (local_model.py), a
        translating route imports LiteLLM (seconds)."""
        if call.route.provider == "transformers":
            from pomona.proxy.local_model import served_route

            served = await anyio.to_thread.run_sync(served_route, call.route)
            call.route = dataclasses.replace(served, timeouts=call.route.timeouts)
        if call.route.path_for(call.dialect.name) != "passthrough":
            from pomona.proxy.translation import import_litellm

            await anyio.to_thread.run_sync(import_litellm)

    async def call(self, call: UpstreamCall) -> Outcome:
        if call.route.path_for(call.dialect.name) == "passthrough":
            return await self.passthrough.call(call)
        from pomona.proxy.translation import translate

        return await translate(call)

    async def aclose(self) -> None:
        await self.passthrough.aclose()


register_kind("litellm", ProviderUpstream)


class Upstreams:
    """The kinds in use by one proxy, created on first use, and the total time limit."""

    def __init__(self, config: ProxyConfig):
        self.config = config
        self._kinds: dict[str, Upstream] = {}

    def _kind(self, route: ModelRoute) -> Upstream:
        if route.kind not in self._kinds:
            if route.kind not in KINDS:
                raise UpstreamError(
                    500, f"model {route.name!r} names unknown upstream kind {route.kind!r}"
                )
            self._kinds[route.kind] = KINDS[route.kind](self.config)
        return self._kinds[route.kind]

    async def aclose(self) -> None:
        for kind in self._kinds.values():
            await kind.aclose()

    async def call(self, call: UpstreamCall) -> Outcome:
        """The kind's answer within the route's total time limit, which also ends its stream;
        `call.started` and `call.first_byte` say when the kind began and first answered."""
        kind = self._kind(call.route)
        if isinstance(kind, WarmingUpstream):
            await kind.warm(call)
        total = call.route.timeouts.total
        call.started = time.perf_counter()
        try:
            async with asyncio.timeout(total) as limit:
                outcome = await kind.call(call)
        except TimeoutError:
            raise timed_out(call.route.name, f"no answer within {total:g} s") from None
        if outcome.stream is None:
            call.first_byte = time.perf_counter()
        else:
            outcome.stream = _until(outcome.stream, call, limit.when())
        return outcome


async def _until(
    stream: AsyncIterator[bytes], call: UpstreamCall, deadline: float | None
) -> AsyncIterator[bytes]:
    """The stream, noting its first chunk on `call`, cut with a timeout error at `deadline` (the
    event loop's clock; None: never)."""
    try:
        while True:
            try:
                async with asyncio.timeout_at(deadline):
                    chunk = await anext(stream)
            except StopAsyncIteration:
                return
            except TimeoutError:
                total = call.route.timeouts.total
                raise timed_out(call.route.name, f"stream not done within {total:g} s") from None
            if call.first_byte is None:
                call.first_byte = time.perf_counter()
            yield chunk
    finally:
        close = getattr(stream, "aclose", None)
        if close is not None:
            with anyio.CancelScope(shield=True):
                await close()
