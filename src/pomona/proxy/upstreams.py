"""The upstreams one proxy uses: each route's kind (the contract is upstream.py) created on first
use, under the route's total time limit, stream included; and the default kind, `litellm`:
pass-through for the route's own dialects (passthrough.py), LiteLLM for the rest
(translation.py), a `transformers/<model dir>` route served by its local model
(local_model.py)."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator

import anyio

from pomona.proxy.config import ModelRoute, ProxyConfig
from pomona.proxy.errors import UpstreamError, timed_out
from pomona.proxy.upstream import (
    KINDS,
    Outcome,
    Upstream,
    UpstreamCall,
    WarmingUpstream,
    register_kind,
)


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
            from pomona.proxy.local_model import served_params

            route = call.route
            params = await anyio.to_thread.run_sync(
                served_params, route.upstream_model, route.name, route.params
            )
            chat = frozenset({"chat"})
            call.route = dataclasses.replace(route, params=params, dialects=chat, token_ids=True)
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
