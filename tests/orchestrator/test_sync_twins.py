"""The sync SDK is the async one, blocking: every public async method has a sync twin with the
same parameters and the sync version of its return type (AsyncSandbox -> Sandbox, AsyncIterator
-> Iterator, Pty -> SyncPty, ...), and a caller interrupted while it waits cancels the work it
was waiting for. Over the memory runtime (runtimes/memory.py, a named test double): no root."""

from __future__ import annotations

import asyncio
import collections.abc
import contextlib
import inspect
import signal
import threading
import types
import typing
from collections.abc import Callable, Iterator
from typing import Any, get_args, get_origin

import pytest

from pomona.orchestrator.runtime import Pty
from pomona.orchestrator.runtimes.memory import Command, MemoryRuntime
from pomona.orchestrator.sdk import client as client_module
from pomona.orchestrator.sdk.client import (
    AsyncSandbox,
    AsyncSandboxClient,
    Sandbox,
    SandboxClient,
    SyncConnection,
    SyncPty,
)
from pomona.orchestrator.types import ExecResult

TWINS: list[tuple[type, type]] = [
    (AsyncSandboxClient, SandboxClient),
    (AsyncSandbox, Sandbox),
    (Pty, SyncPty),
]
SYNC_OF: dict[Any, Any] = dict(TWINS)
STREAMS = tuple[asyncio.StreamReader, asyncio.StreamWriter]


def synced(annotation: Any) -> Any:
    """What the sync twin of a method returning `annotation` must return."""
    if annotation in SYNC_OF:
        return SYNC_OF[annotation]
    if annotation == STREAMS:
        return SyncConnection
    origin, args = get_origin(annotation), get_args(annotation)
    if origin in (collections.abc.AsyncIterator, collections.abc.AsyncGenerator):
        return Iterator[synced(args[0])]
    if origin is list:
        return list[synced(args[0])]  # type: ignore[misc]
    if origin in (typing.Union, types.UnionType):
        return typing.Union[tuple(synced(a) for a in args)]  # noqa: UP007 - built from a tuple
    return annotation


def async_methods(cls: type) -> dict[str, Callable[..., Any]]:
    return {
        name: value
        for name, value in vars(cls).items()
        if not name.startswith("_")
        and (inspect.iscoroutinefunction(value) or inspect.isasyncgenfunction(value))
    }


@pytest.mark.parametrize("async_cls, sync_cls", TWINS, ids=lambda c: c.__name__)
def test_every_async_method_has_a_sync_twin_with_its_signature(async_cls, sync_cls):
    for name, method in async_methods(async_cls).items():
        twin = getattr(sync_cls, name, None)
        assert twin is not None, (
            f"{async_cls.__name__}.{name} has no sync twin on {sync_cls.__name__}"
        )
        assert not inspect.iscoroutinefunction(twin) and not inspect.isasyncgenfunction(twin), name
        expected, actual = inspect.signature(method), inspect.signature(twin)
        assert list(actual.parameters) == list(expected.parameters), name
        hints, twin_hints = typing.get_type_hints(method), typing.get_type_hints(twin)
        for p in expected.parameters.values():
            q = actual.parameters[p.name]
            assert (q.kind, q.default) == (p.kind, p.default), f"{name}({p.name})"
            assert twin_hints.get(p.name) == hints.get(p.name), f"{name}({p.name})"
        assert twin_hints["return"] == synced(hints["return"]), (
            f"{sync_cls.__name__}.{name} returns {twin_hints['return']}, not {synced(hints['return'])}"
        )


def test_the_sync_classes_add_no_public_method_of_their_own():
    for async_cls, sync_cls in TWINS:
        extra = {n for n, v in vars(sync_cls).items() if not n.startswith("_") and callable(v)}
        assert extra <= set(async_methods(async_cls)) | {"close"}, extra  # close: also the portal's


def test_the_client_takes_the_same_arguments():
    sync, asynchronous = inspect.signature(SandboxClient), inspect.signature(AsyncSandboxClient)
    assert list(sync.parameters.values()) == list(asynchronous.parameters.values())


# -- behaviour, over the memory runtime --------------------------------------------------------


class Hang:
    """A command that runs until cancelled, and says when it started and when it was cancelled."""

    def __init__(self) -> None:
        self.started, self.cancelled = threading.Event(), threading.Event()

    async def __call__(self, command: Command) -> int:
        if command.text.startswith("echo "):
            await command.write(command.text.removeprefix("echo ") + "\n")
            return 0
        await command.write("started\n")
        self.started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            self.cancelled.set()
            raise
        return 0


@pytest.fixture
def hang() -> Hang:
    return Hang()


@pytest.fixture
def client(hang: Hang) -> Iterator[SandboxClient]:
    with SandboxClient(MemoryRuntime(hang)) as c:
        yield c


@contextlib.contextmanager
def interrupted(when: threading.Event, error: Callable[[], BaseException]) -> Iterator[None]:
    """Once `when` is set, raise `error()` in the main thread from a SIGINT handler while the
    sync SDK waits there, as Ctrl-C or a signal-driven deadline would. The signal is sent again
    until the handler has raised: a signal can be lost to a thread that was not waiting for it,
    and one handled elsewhere (in asyncio's wake-up write, whose `except OSError` swallows a
    TimeoutError; in a finalizer) is declined and comes again. Later ones are ignored, and no
    sending thread outlives the block."""
    main = threading.main_thread().ident
    assert main is not None and threading.current_thread() is threading.main_thread()
    received, done = threading.Event(), threading.Event()

    def waiting(frame: types.FrameType | None) -> bool:
        """The main thread is blocked in the portal's wait (threading's frames on top of it)."""
        while frame is not None and frame.f_code.co_filename == threading.__file__:
            frame = frame.f_back
        return frame is not None and frame.f_code is client_module._wait.__code__

    def handler(signum: int, frame: types.FrameType | None) -> None:
        if not received.is_set() and waiting(frame):
            received.set()
            raise error()

    def deliver() -> None:
        when.wait(60)  # and if it never comes, interrupt anyway: the test fails, never hangs
        while not received.is_set() and not done.is_set():
            signal.pthread_kill(main, signal.SIGINT)
            received.wait(0.5)

    previous = signal.signal(signal.SIGINT, handler)
    sender = threading.Thread(target=deliver, daemon=True)
    sender.start()
    try:
        yield
    finally:
        done.set()
        sender.join()
        signal.signal(signal.SIGINT, previous)


def test_results_come_back_as_sync_twins(client):
    sb = client.create_sandbox()
    assert isinstance(sb, Sandbox) and isinstance(client.get_sandbox(sb.id), Sandbox)
    assert isinstance(sb.exec("echo hi"), ExecResult)
    assert [type(item).__name__ for item in sb.exec_stream("echo hi")] == [
        "ExecChunk",
        "ExecResult",
    ]
    snapshot = sb.snapshot()
    forks = client.fork(snapshot, 2)
    assert len(forks) == 2 and all(isinstance(f, Sandbox) for f in forks)
    with sb.pty("echo on a terminal") as terminal:
        assert isinstance(terminal, SyncPty) and terminal.wait(timeout=30) == 0


def test_ctrl_c_cancels_the_exec_before_it_reaches_the_caller(client, hang):
    sb = client.create_sandbox()
    with interrupted(hang.started, KeyboardInterrupt), pytest.raises(KeyboardInterrupt):
        sb.exec("hang")
    # the command was stopped before the interruption came back
    assert hang.started.is_set() and hang.cancelled.is_set()
    assert sb.exec("echo still usable").stdout == "still usable\n"


def test_a_timeout_raised_in_the_calling_thread_cancels_too(client, hang):
    sb = client.create_sandbox()
    deadline = lambda: TimeoutError("the caller's own deadline")  # noqa: E731
    with interrupted(hang.started, deadline), pytest.raises(TimeoutError, match="own deadline"):
        sb.exec("hang", timeout=None)
    assert hang.started.is_set() and hang.cancelled.is_set()


def test_an_interrupted_or_abandoned_stream_stops_its_command(client, hang):
    sb = client.create_sandbox()
    with interrupted(hang.started, KeyboardInterrupt), pytest.raises(KeyboardInterrupt):
        for _ in sb.exec_stream("hang"):
            pass
    assert hang.started.is_set() and hang.cancelled.is_set()
    second = Hang()
    client._async._runtime.handler = second
    for chunk in sb.exec_stream("hang"):
        assert not isinstance(chunk, ExecResult) and chunk.data == "started\n"
        break
    assert second.cancelled.is_set()


def test_a_sync_call_from_the_portal_thread_is_refused(client):
    async def inside() -> None:
        client.create_sandbox()

    with pytest.raises(RuntimeError, match="own event loop thread"):
        client._portal.call(inside())


class WakeUpSocket:
    """The portal loop's wake-up socket, raising the caller's deadline as it is written to: where
    asyncio's `except OSError` around that write would swallow a TimeoutError."""

    def __init__(self, real: Any) -> None:
        self.real, self.armed = real, True

    def send(self, data: bytes) -> int:
        if self.armed and threading.current_thread() is threading.main_thread():
            self.armed = False
            signal.pthread_kill(threading.main_thread().ident, signal.SIGALRM)
            sum(range(1000))  # bytecode, where a signal not held would be handled
        return self.real.send(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


def test_a_deadline_that_fires_while_the_call_is_handed_over_is_not_lost(client):
    sb = client.create_sandbox()

    def deadline(signum: int, frame: object) -> None:
        raise TimeoutError("the caller's own deadline")

    loop = client._portal.loop
    real = loop._csock
    previous = signal.signal(signal.SIGALRM, deadline)
    loop._csock = WakeUpSocket(real)
    try:
        with pytest.raises(TimeoutError, match="own deadline"):
            sb.exec("echo hi")
    finally:
        loop._csock = real
        signal.signal(signal.SIGALRM, previous)
    assert sb.exec("echo still usable").stdout == "still usable\n"
