"""The policy upstream: the proxy holds a harness's model call until an outside policy answers it.

An episode opened with model "policy" answers nothing itself. Each main call is parked as a
`HeldCall` (its dialect-neutral messages and tools) on the episode's queue; whoever drives the
episode (ModelCallEnv, an RL trainer) takes it with `next_call`, and its `reply` is rendered
into the caller's dialect, streamed or not, and recorded like any other call. Why a queue and
a future rather than a callback: the proxy runs on its own event loop thread, the policy on the
caller's thread, and neither should block the other.

The queue has two kinds of readers: a thread (`next_call`, in-process policies) waits on a
condition; a coroutine (`next_call_async`, the HTTP long poll) waits on a future of its own
loop, so a waiting poll holds no thread, however many policies poll at once.

- Side calls (no tools: title generation...) never reach the policy; they get `side_text`.
- A call the policy leaves unanswered for `timeout` seconds gets a 504 in the caller's dialect
  (recorded as `upstream_error`, upstream `policy`), and a late reply raises `CallExpired`.
- `close` wakes a waiting `next_call` (it returns None) and fails any call still held, so the
  end of a harness run, or of the episode, never leaves anyone waiting.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from pomona.errors import PomonaError
from pomona.proxy import neutral
from pomona.proxy.dialects import Dialect
from pomona.proxy.errors import CallExpired, UpstreamError
from pomona.proxy.neutral import Action

POLICY = "policy"
DEFAULT_TIMEOUT = 600.0


class NoCall(PomonaError, TimeoutError):
    """No model call arrived within the wait."""


class PolicyError(UpstreamError):
    """The policy did not answer (timeout, episode over); the caller gets it in its dialect."""


@dataclass
class HeldCall:
    """One model call waiting for the policy, in the dialect-neutral form."""

    sequence: int  # order among the episode's main calls
    dialect: str
    stream: bool
    model: str | None  # what the harness asked for
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    request: dict[str, Any]  # the raw request body, for policies that want the wire form
    held_at: float = field(default_factory=time.monotonic)
    _reply: concurrent.futures.Future[Action] = field(
        default_factory=concurrent.futures.Future, repr=False
    )

    @property
    def waiting(self) -> bool:
        return not self._reply.done()

    def observation(self) -> dict[str, Any]:
        return {"dialect": self.dialect, "messages": self.messages, "tools": self.tools}


class Policy:
    """The queue of held calls of one episode, and the replies going back."""

    def __init__(self, timeout: float = DEFAULT_TIMEOUT, side_text: str = "Pomona session"):
        self.timeout = timeout
        self.side_text = side_text
        self.expired: list[int] = []  # sequences of calls the policy let time out
        self._queue: collections.deque[HeldCall] = collections.deque()
        self._held: dict[int, HeldCall] = {}
        self._count = 0
        self._closed = False
        self._lock = threading.Lock()
        self._arrived = threading.Condition(self._lock)  # thread readers
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self._thread_readers = 0

    @property
    def closed(self) -> bool:
        return self._closed

    # --- the proxy's side ---------------------------------------------------------------------
    async def answer(self, dialect: Dialect, body: dict[str, Any], *, side: bool) -> dict[str, Any]:
        """The final response object for one call: automatic for side calls, else the policy's."""
        model = str(body.get("model") or POLICY)
        if side:
            return neutral.render(dialect, Action(text=self.side_text), model, body)
        with self._lock:
            if self._closed:
                raise PolicyError(
                    503, "the policy episode is over; no policy will answer", "policy_closed"
                )
            call = HeldCall(
                self._count,
                dialect.name,
                dialect.is_stream(body),
                body.get("model") if isinstance(body.get("model"), str) else None,
                neutral.messages(dialect, body),
                neutral.tools(dialect, body),
                body,
            )
            self._count += 1
            self._held[call.sequence] = call
            self._queue.append(call)
            self._wake()
        try:
            async with asyncio.timeout(self.timeout):
                action = await asyncio.wrap_future(call._reply)
        except TimeoutError:
            self.expired.append(call.sequence)
            raise PolicyError(
                504, f"the policy did not answer within {self.timeout:g} s", "upstream_timeout"
            ) from None
        except CallExpired as e:
            raise PolicyError(503, str(e), "policy_closed") from None
        finally:
            with self._lock:
                self._held.pop(call.sequence, None)
        return neutral.render(dialect, action, model, body)

    # --- the policy's side --------------------------------------------------------------------
    def next_call(self, timeout: float | None = None) -> HeldCall | None:
        """The next held call; None once the policy is closed. Raises TimeoutError after
        `timeout` seconds with no call. Blocks the calling thread."""
        with self._arrived:
            self._thread_readers += 1
            try:
                if not self._arrived.wait_for(self._ready, timeout):
                    raise NoCall(f"no model call within {timeout:g} s")
            finally:
                self._thread_readers -= 1
            return self._take()

    async def next_call_async(self, timeout: float | None = None) -> HeldCall | None:
        """`next_call` for a coroutine: it waits on its event loop and holds no thread."""
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                while True:
                    with self._lock:
                        if self._ready():
                            return self._take()
                        waiter = (loop, loop.create_future())
                        self._waiters.append(waiter)
                    try:
                        await waiter[1]
                    finally:
                        with self._lock, contextlib.suppress(ValueError):
                            self._waiters.remove(waiter)
        except TimeoutError:
            raise NoCall(f"no model call within {timeout:g} s") from None

    @property
    def readers(self) -> int:
        """How many readers (threads and coroutines) are waiting for a call now."""
        with self._lock:
            return self._thread_readers + len(self._waiters)

    def _ready(self) -> bool:
        """Whether a reader can return now (under the lock): the policy is closed, or a call
        waits at the queue's head once calls that stopped waiting (expired) are dropped."""
        while self._queue and not self._queue[0].waiting:
            self._queue.popleft()
        return self._closed or bool(self._queue)

    def _take(self) -> HeldCall | None:
        """What a ready reader returns (under the lock): None once closed, else the next call."""
        return None if self._closed else self._queue.popleft()

    def _wake(self) -> None:
        """Tell every reader something changed (under the lock); each looks again."""
        self._arrived.notify_all()
        for loop, future in self._waiters:
            with contextlib.suppress(RuntimeError):  # its loop is gone: nobody is waiting there
                loop.call_soon_threadsafe(_resolve, future)

    def held(self, sequence: int) -> HeldCall | None:
        """The call with this sequence if it is still waiting (for replies over HTTP)."""
        with self._lock:
            return self._held.get(sequence)

    def reply(self, call: HeldCall, action: Action | dict[str, Any] | str) -> None:
        """Release a held call with the policy's action."""
        parsed = Action.parse(action)
        try:
            call._reply.set_result(parsed)
        except concurrent.futures.InvalidStateError:
            raise CallExpired(
                f"model call {call.sequence} is no longer waiting "
                "(it timed out or the episode ended)"
            ) from None

    def close(self) -> None:
        """No more calls will be answered: wake readers, fail held calls."""
        with self._lock:
            self._closed = True
            held = list(self._held.values())
            self._wake()
        for call in held:
            with contextlib.suppress(concurrent.futures.InvalidStateError):  # a reply won the race
                call._reply.set_exception(
                    CallExpired("the policy episode ended before this call was answered")
                )


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
