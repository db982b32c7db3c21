"""Admission control: how many creates and execs run at once, and how many may wait for a slot."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from pomona.errors import Overloaded


class Admission:
    """At most `limit` at once; up to `queue` more wait (up to `max_wait` s); past that, 503."""

    def __init__(self, what: str, limit: int, queue: int, max_wait: float = 60.0):
        self.what, self.limit, self.queue, self.max_wait = what, limit, queue, max_wait
        self._slots = asyncio.Semaphore(limit)
        self.waiting = 0

    async def acquire(self) -> None:
        if not self._slots.locked():
            await self._slots.acquire()
            return
        if self.waiting >= self.queue:
            raise Overloaded(
                f"{self.limit} {self.what}s are running and {self.waiting} are queued: "
                "retry after the Retry-After delay"
            )
        self.waiting += 1
        try:
            async with asyncio.timeout(self.max_wait):
                await self._slots.acquire()
        except TimeoutError:
            raise Overloaded(
                f"waited {self.max_wait:g} s for a free {self.what} slot; retry later"
            ) from None
        finally:
            self.waiting -= 1

    def release(self) -> None:
        self._slots.release()

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        await self.acquire()
        try:
            yield
        finally:
            self.release()
