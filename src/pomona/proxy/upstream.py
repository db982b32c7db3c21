"""The upstream contract: what a module that serves a model (an upstream *kind*) takes and
gives, and the table of kinds. Their default and their use, under one set of time limits, are
in upstreams.py.

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

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from pomona.proxy.config import ModelRoute, ProxyConfig
from pomona.proxy.dialects import Dialect
from pomona.proxy.errors import UpstreamError
from pomona.proxy.sampling import Pin

__all__ = ["KINDS", "Outcome", "Upstream", "UpstreamCall", "UpstreamError", "register_kind"]


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
