"""The SDK: `AsyncSandboxClient` and its sync twin `SandboxClient`, one API over every transport.

In-process (the default) the client owns a SandboxService over a runtime: no server at all.
The sync classes are generated from the async ones and run them on a private event loop thread,
so the two can never drift apart.
"""

from __future__ import annotations

import asyncio
import concurrent.futures.thread  # noqa: F401 - its exit hook must be registered before ours
import contextlib
import functools
import inspect
import logging
import os
import signal
import sys
import threading
import typing
import weakref
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Coroutine, Iterator
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, overload

from pomona.errors import ClientClosed, InvalidRequest, SandboxFailed
from pomona.orchestrator.runtime import Pty, Runtime
from pomona.orchestrator.runtimes import make_runtime
from pomona.orchestrator.service import SandboxService, Service
from pomona.orchestrator.types import (
    DEFAULT_LIMITS,
    DEFAULT_OUTPUT_CAP,
    ExecChunk,
    ExecRequest,
    ExecResult,
    FileInfo,
    Limits,
    Mount,
    NetworkMode,
    PatchResult,
    SandboxInfo,
    SandboxSpec,
    SnapshotInfo,
    validated,
)

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")
log = logging.getLogger("pomona.sdk")


class AsyncSandbox:
    """A handle on one sandbox. `async with` deletes it on exit."""

    def __init__(self, client: AsyncSandboxClient, info: SandboxInfo):
        self._client, self.info = client, info

    @property
    def id(self) -> str:
        return self.info.id

    @property
    def _service(self) -> Service:
        return self._client._service

    async def __aenter__(self) -> AsyncSandbox:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.delete()

    def __repr__(self) -> str:
        return f"<Sandbox {self.id} image={self.info.spec.image!r} runtime={self.info.runtime}>"

    async def exec(
        self,
        command: str | list[str],
        *,
        timeout: float | None = 300,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        stdin: str | None = None,
        login_shell: bool = False,
        user: str | None = None,
        output_cap: int = DEFAULT_OUTPUT_CAP,
    ) -> ExecResult:
        """Run a shell string (bash -c) or an argv list; a timeout kills the command, never the sandbox."""
        request = validated(
            ExecRequest,
            command=command,
            timeout=timeout,
            cwd=cwd,
            env=env or {},
            stdin=stdin,
            login_shell=login_shell,
            user=user,
            output_cap=output_cap,
        )
        return await self._service.exec(self.id, request)

    async def exec_stream(
        self,
        command: str | list[str],
        *,
        timeout: float | None = 300,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        stdin: str | None = None,
        login_shell: bool = False,
        user: str | None = None,
        output_cap: int = DEFAULT_OUTPUT_CAP,
    ) -> AsyncGenerator[ExecChunk | ExecResult, None]:
        """Output as it is produced: ExecChunk items, then the ExecResult."""
        request = validated(
            ExecRequest,
            command=command,
            timeout=timeout,
            cwd=cwd,
            env=env or {},
            stdin=stdin,
            login_shell=login_shell,
            user=user,
            output_cap=output_cap,
        )
        async with contextlib.aclosing(self._service.exec_stream(self.id, request)) as items:
            async for item in items:  # closed with this stream: a caller that stops kills it
                yield item

    async def pty(
        self,
        command: str | list[str] = "bash",
        *,
        rows: int = 24,
        cols: int = 80,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        login_shell: bool = False,
        user: str | None = None,
    ) -> Pty:
        """An interactive terminal: read(), write(), resize(), signal(), wait(), close()."""
        request = validated(
            ExecRequest,
            command=command,
            timeout=None,
            cwd=cwd,
            env=env or {},
            login_shell=login_shell,
            user=user,
        )
        return await self._service.open_pty(self.id, request, rows, cols)

    async def read_file(self, path: str) -> bytes:
        return await self._service.read_file(self.id, path)

    async def write_file(self, path: str, data: bytes | str, mode: int = 0o644) -> None:
        await self._service.write_file(
            self.id, path, data.encode() if isinstance(data, str) else data, mode
        )

    async def list_files(self, path: str = ".") -> list[FileInfo]:
        return await self._service.list_files(self.id, path)

    async def stat(self, path: str) -> FileInfo:
        return await self._service.stat(self.id, path)

    async def remove(self, path: str, recursive: bool = False) -> None:
        await self._service.remove(self.id, path, recursive)

    async def download_dir(self, path: str = ".") -> bytes:
        """The directory as an uncompressed tar."""
        return await self._service.download_dir(self.id, path)

    async def upload_dir(self, path: str, tar: bytes) -> None:
        await self._service.upload_dir(self.id, path, tar)

    async def apply_patch(self, patch: str, cwd: str | None = None) -> PatchResult:
        return await self._service.apply_patch(self.id, patch, cwd)

    async def snapshot(self, snapshot_id: str | None = None) -> SnapshotInfo:
        return await self._service.snapshot(self.id, snapshot_id)

    async def heartbeat(self) -> SandboxInfo:
        self.info = await self._service.heartbeat(self.id)
        return self.info

    async def refresh(self) -> SandboxInfo:
        self.info = await self._service.get(self.id)
        return self.info

    async def connect(self, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A TCP connection to a server listening on 127.0.0.1:port inside the sandbox."""
        return await self._service.open_connection(self.id, port)

    async def delete(self) -> bool:
        self._client._owned.discard(self.id)
        return await self._service.delete(self.id)


class AsyncSandboxClient:
    """Creates and finds sandboxes. `async with` deletes, on exit, every sandbox it created."""

    def __init__(
        self,
        runtime: str | Runtime | None = None,
        *,
        state_dir: str | None = None,
        auto_cleanup: bool = True,
        base_url: str | None = None,
        api_key: str | None = None,
        default_limits: Limits = DEFAULT_LIMITS,
        **runtime_options: Any,
    ):
        """In-process over `runtime` ("local" by default); over HTTP when `base_url` (or, with no
        runtime named, POMONA_URL) is given, with `api_key` or POMONA_API_KEY. In-process, every
        sandbox gets `default_limits` for the limits it does not set (Limits(): none); over
        HTTP the service's apply."""
        url = base_url or (os.environ.get("POMONA_URL") if runtime is None else None)
        self._service: Service
        if url and runtime is None:
            from pomona.orchestrator.sdk.remote import RemoteService

            self._service = RemoteService(url, api_key or os.environ.get("POMONA_API_KEY"))
        else:
            if base_url:  # a runtime was named: base_url is its engine's (docker, podman)
                runtime_options["base_url"] = base_url
            runtime = runtime or "local"
            if runtime == "local" and os.geteuid() != 0:  # in a worker, in the user's namespace
                from pomona.orchestrator.sdk.rootless import RootlessService

                if runtime_options:
                    raise InvalidRequest(
                        f"the local runtime as an ordinary user takes no options (given: "
                        f"{', '.join(sorted(runtime_options))}); only state_dir"
                    )
                self._service = RootlessService(state_dir)
            else:
                self._runtime = (
                    make_runtime(runtime, state_dir, **runtime_options)
                    if isinstance(runtime, str)
                    else runtime
                )
                self._service = SandboxService(self._runtime, default_limits=default_limits)
        self._owned: set[str] = set()
        self._started = False
        self.auto_cleanup = auto_cleanup

    async def __aenter__(self) -> AsyncSandboxClient:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start(self) -> None:
        if not self._started:
            await self._service.start()
            self._started = True

    async def close(self) -> None:
        """Delete the sandboxes this client created (with auto_cleanup) and release the runtime.
        Every step runs; what failed is raised at the end, never swallowed."""
        failures: list[str] = []
        if self.auto_cleanup:
            owned = list(self._owned)
            results = await asyncio.gather(
                *(self._service.delete(i) for i in owned), return_exceptions=True
            )
            failures += [
                f"delete {i}: {r!r}"
                for i, r in zip(owned, results, strict=True)
                if isinstance(r, BaseException)
            ]
            self._owned.clear()
        if self._started:
            self._started = False
            try:
                await self._service.close()
            except Exception as e:  # noqa: BLE001 - reported below with the rest
                failures.append(f"close: {e!r}")
        if failures:
            raise SandboxFailed("closing the sandbox client failed: " + "; ".join(failures))

    async def create_sandbox(
        self,
        image: str = "host",
        *,
        network: NetworkMode | str = "none",
        gateway: str | None = None,
        timeout: float | None = 3600,
        cpu: float | None = None,
        memory: int | str | None = None,
        pids: int | None = None,
        disk: int | str | None = None,
        labels: dict[str, str] | None = None,
        user: str = "pomona",
        env: dict[str, str] | None = None,
        workdir: str = "/workspace",
        mounts: list[Mount] | None = None,
        sandbox_id: str | None = None,
    ) -> AsyncSandbox:
        """Start a sandbox and wait until it is ready. Same id + same spec returns the existing one."""
        await self.start()
        spec = validated(
            SandboxSpec,
            image=image,
            network=network,
            gateway=gateway,
            timeout=timeout,
            limits=validated(Limits, cpu=cpu, memory=memory, pids=pids, disk=disk),
            labels=labels or {},
            user=user,
            env=env or {},
            workdir=workdir,
            mounts=mounts or [],
        )
        info = await self._service.create(spec, sandbox_id)
        self._owned.add(info.id)
        return AsyncSandbox(self, info)

    async def get_sandbox(self, sandbox_id: str) -> AsyncSandbox:
        await self.start()
        return AsyncSandbox(self, await self._service.get(sandbox_id))

    async def list_sandboxes(self, labels: dict[str, str] | None = None) -> list[SandboxInfo]:
        await self.start()
        return await self._service.list(labels)

    async def fork(
        self, snapshot: SnapshotInfo | str, k: int, labels: dict[str, str] | None = None
    ) -> list[AsyncSandbox]:
        """k new sandboxes, each starting from the snapshot's state; they never see each other."""
        await self.start()
        snapshot_id = snapshot if isinstance(snapshot, str) else snapshot.id
        infos = await self._service.fork(snapshot_id, k, labels)
        self._owned.update(i.id for i in infos)
        return [AsyncSandbox(self, i) for i in infos]

    async def list_snapshots(self) -> list[SnapshotInfo]:
        await self.start()
        return await self._service.list_snapshots()

    async def delete_snapshot(self, snapshot: SnapshotInfo | str) -> bool:
        await self.start()
        return await self._service.delete_snapshot(
            snapshot if isinstance(snapshot, str) else snapshot.id
        )

    async def delete_sandbox(self, sandbox_id: str) -> bool:
        await self.start()
        self._owned.discard(sandbox_id)
        return await self._service.delete(sandbox_id)

    async def reap(self) -> list[str]:
        """Delete expired sandboxes now (a background task also does it every second)."""
        return await self._service.reap()


# -- the sync twins ---------------------------------------------------------------------------


class _Portal:
    """An event loop on a daemon thread that runs the async implementation for sync callers
    (anyio's blocking portal, in small). A caller interrupted while it waits (Ctrl-C, a timeout
    raised by a signal handler) cancels the work and gets its interruption once the work has
    stopped: an interrupted in-process exec has killed its command, an interrupted HTTP call
    is aborted. A second interruption stops waiting for that."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="pomona-sdk", daemon=True)
        self.thread.start()

    def call(self, work: Awaitable[T]) -> T:
        if threading.current_thread() is self.thread or self.loop.is_closed():
            if inspect.iscoroutine(work):
                work.close()
            raise ClientClosed(
                "this SandboxClient is closed"
                if self.loop.is_closed()
                else "a sync SDK method was called on the SDK's own event loop thread; "
                "use AsyncSandboxClient in async code"
            )
        finished = threading.Event()
        tasks: list[asyncio.Future[T]] = []

        def start() -> None:
            tasks.append(asyncio.ensure_future(work, loop=self.loop))
            tasks[0].add_done_callback(lambda _: finished.set())

        def cancel() -> None:  # runs after start() if start() was scheduled at all (FIFO)
            if tasks:
                tasks[0].cancel()
            else:
                if inspect.iscoroutine(work):
                    work.close()
                finished.set()

        try:
            self._submit(start)
            _wait(finished)
        except BaseException:
            self._submit(cancel)
            _wait(finished)
            raise
        return tasks[0].result()

    def _submit(self, callback: Callable[[], None]) -> None:
        """call_soon_threadsafe with the main thread's signals held: a handler raising an OSError
        (a deadline's TimeoutError is one) inside asyncio's wake-up write would be swallowed by
        its `except OSError`; held, it runs just after, where the caller's wait handles it."""
        if threading.current_thread() is not threading.main_thread():
            self.loop.call_soon_threadsafe(callback)  # Python runs signal handlers there only
            return
        held = signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
        try:
            self.loop.call_soon_threadsafe(callback)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)

    def iterate(self, stream: AsyncIterator[T]) -> Iterator[T]:
        """The stream's items as they come; leaving the loop early closes it (an exec stream
        then kills its command)."""

        async def step() -> T:
            return await anext(stream)

        try:
            while True:
                try:
                    yield self.call(step())
                except StopAsyncIteration:
                    return
        finally:
            if isinstance(stream, AsyncGenerator):
                self.call(stream.aclose())

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


def _wait(event: threading.Event) -> None:
    """Wait in short slices: a signal that lands on another thread (a process-directed one may)
    does not wake a thread blocked on a lock, but its handler runs at this thread's next slice."""
    while not event.wait(0.25):
        pass


class _Twin(Generic[P, T]):
    """A sync method made from an async one: the same parameters (so type checkers, help() and
    IDEs show them), run through the owner's portal on the owner's async handle, its result
    converted (an AsyncSandbox comes back as a Sandbox). Make one with `_twin`, `_twin_as` or
    `_twin_iter`; tests/orchestrator/test_sync_twins.py checks every async method has one."""

    def __init__(
        self, method: Callable[..., Any], run: Callable[[_SyncHandle, Any], T], returns: object
    ) -> None:
        name = method.__name__

        def twin(handle: _SyncHandle, /, *args: Any, **kwargs: Any) -> T:
            return run(handle, getattr(handle._async, name)(*args, **kwargs))

        functools.update_wrapper(twin, method)
        del twin.__wrapped__  # type: ignore[attr-defined]  # its signature is the one below
        twin.__signature__ = inspect.signature(method).replace(  # type: ignore[attr-defined]
            return_annotation=returns
        )
        twin.__annotations__ = {**typing.get_type_hints(method), "return": returns}
        self.function = twin

    @overload
    def __get__(self, handle: None, owner: type) -> Callable[Concatenate[Any, P], T]: ...

    @overload
    def __get__(self, handle: _SyncHandle, owner: type) -> Callable[P, T]: ...

    def __get__(self, handle: _SyncHandle | None, owner: type) -> Callable[..., T]:
        return self.function if handle is None else self.function.__get__(handle, owner)


def _twin(method: Callable[Concatenate[Any, P], Coroutine[Any, Any, R]]) -> _Twin[P, R]:
    """The twin of a coroutine method, returning what it returns."""
    return _Twin(
        method,
        lambda handle, work: handle._portal.call(work),
        typing.get_type_hints(method)["return"],
    )


def _twin_as(
    method: Callable[Concatenate[Any, P], Coroutine[Any, Any, R]],
    convert: Callable[[SandboxClient, R], T],
) -> _Twin[P, T]:
    """The twin of a coroutine method whose result has a sync twin of its own: `convert(client,
    result)` makes it."""
    returns = convert if isinstance(convert, type) else convert.__annotations__["return"]
    return _Twin(
        method, lambda handle, work: convert(handle._root, handle._portal.call(work)), returns
    )


def _twin_iter(method: Callable[Concatenate[Any, P], AsyncIterator[R]]) -> _Twin[P, Iterator[R]]:
    """The twin of an async generator method: a blocking iterator over the same items."""
    item = typing.get_args(typing.get_type_hints(method)["return"])[0]
    returns = Iterator[item]  # type: ignore[valid-type]
    return _Twin(method, lambda handle, stream: handle._portal.iterate(stream), returns)


class _SyncHandle:
    """What a sync twin stands on: the async object it drives, the portal that runs it, and the
    SandboxClient it belongs to."""

    _async: Any
    _portal: _Portal
    _root: SandboxClient


class SyncConnection(_SyncHandle):
    """A blocking view of a TCP connection into the sandbox."""

    def __init__(
        self, client: SandboxClient, stream: tuple[asyncio.StreamReader, asyncio.StreamWriter]
    ):
        self._root, self._portal = client, client._portal
        self._reader, self._writer = stream

    def sendall(self, data: bytes) -> None:
        self._writer.write(data)
        self._portal.call(self._writer.drain())

    def recv(self, n: int = 65536) -> bytes:
        return self._portal.call(self._reader.read(n))

    def close(self) -> None:
        self._writer.close()

    def __enter__(self) -> SyncConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class SyncPty(_SyncHandle):
    """Sync twin of a terminal session (the Pty contract): the same methods, blocking."""

    def __init__(self, client: SandboxClient, pty: Pty):
        self._root, self._portal, self._async = client, client._portal, pty

    read = _twin(Pty.read)
    write = _twin(Pty.write)
    resize = _twin(Pty.resize)
    signal = _twin(Pty.signal)
    wait = _twin(Pty.wait)
    close = _twin(Pty.close)

    def __enter__(self) -> SyncPty:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Sandbox(_SyncHandle):
    """Sync twin of AsyncSandbox: the same methods, blocking. `with` deletes it on exit."""

    _async: AsyncSandbox

    def __init__(self, client: SandboxClient, handle: AsyncSandbox):
        self._root, self._async, self._portal = client, handle, client._portal

    @property
    def id(self) -> str:
        return self._async.id

    @property
    def info(self) -> SandboxInfo:
        return self._async.info

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.delete()

    def __repr__(self) -> str:
        return repr(self._async)

    exec = _twin(AsyncSandbox.exec)
    exec_stream = _twin_iter(AsyncSandbox.exec_stream)
    pty = _twin_as(AsyncSandbox.pty, SyncPty)
    read_file = _twin(AsyncSandbox.read_file)
    write_file = _twin(AsyncSandbox.write_file)
    list_files = _twin(AsyncSandbox.list_files)
    stat = _twin(AsyncSandbox.stat)
    remove = _twin(AsyncSandbox.remove)
    download_dir = _twin(AsyncSandbox.download_dir)
    upload_dir = _twin(AsyncSandbox.upload_dir)
    apply_patch = _twin(AsyncSandbox.apply_patch)
    snapshot = _twin(AsyncSandbox.snapshot)
    heartbeat = _twin(AsyncSandbox.heartbeat)
    refresh = _twin(AsyncSandbox.refresh)
    connect = _twin_as(AsyncSandbox.connect, SyncConnection)
    delete = _twin(AsyncSandbox.delete)


def _sandboxes(client: SandboxClient, handles: list[AsyncSandbox]) -> list[Sandbox]:
    return [Sandbox(client, h) for h in handles]


class SandboxClient(_SyncHandle):
    """Sync twin of AsyncSandboxClient. `with SandboxClient() as client:` cleans up on exit; a
    client never closed (an exception, sys.exit) is closed when the interpreter exits."""

    _async: AsyncSandboxClient

    def __init__(
        self,
        runtime: str | Runtime | None = None,
        *,
        state_dir: str | None = None,
        auto_cleanup: bool = True,
        base_url: str | None = None,
        api_key: str | None = None,
        default_limits: Limits = DEFAULT_LIMITS,
        **runtime_options: Any,
    ):
        """In-process over `runtime` ("local" by default); over HTTP when `base_url` (or, with no
        runtime named, POMONA_URL) is given, with `api_key` or POMONA_API_KEY. In-process, every
        sandbox gets `default_limits` for the limits it does not set (Limits(): none)."""
        self._async = AsyncSandboxClient(
            runtime,
            state_dir=state_dir,
            auto_cleanup=auto_cleanup,
            base_url=base_url,
            api_key=api_key,
            default_limits=default_limits,
            **runtime_options,
        )
        self._portal = _Portal()
        self._root = self
        _open_clients.add(self)

    @property
    def auto_cleanup(self) -> bool:
        return self._async.auto_cleanup

    def __enter__(self) -> SandboxClient:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        try:
            self.close()
        except SandboxFailed as e:
            if exc_type is None:
                raise
            log.error("%s (while handling another error)", e)

    def close(self) -> None:
        """Delete the sandboxes this client created (with auto_cleanup) and release the runtime
        and the portal's thread. Every step runs; what failed is raised at the end."""
        _open_clients.discard(self)
        if self._portal.thread.is_alive():
            try:
                self._portal.call(self._async.close())
            finally:
                self._portal.stop()

    start = _twin(AsyncSandboxClient.start)
    create_sandbox = _twin_as(AsyncSandboxClient.create_sandbox, Sandbox)
    get_sandbox = _twin_as(AsyncSandboxClient.get_sandbox, Sandbox)
    list_sandboxes = _twin(AsyncSandboxClient.list_sandboxes)
    fork = _twin_as(AsyncSandboxClient.fork, _sandboxes)
    list_snapshots = _twin(AsyncSandboxClient.list_snapshots)
    delete_snapshot = _twin(AsyncSandboxClient.delete_snapshot)
    delete_sandbox = _twin(AsyncSandboxClient.delete_sandbox)
    reap = _twin(AsyncSandboxClient.reap)


_open_clients: weakref.WeakSet[SandboxClient] = weakref.WeakSet()


def _close_open_clients() -> None:
    """At interpreter exit, before concurrent.futures stops taking work (after which every
    to_thread in a delete fails with "cannot schedule new futures after shutdown")."""
    for client in list(_open_clients):
        try:
            client.close()
        except Exception as e:  # noqa: BLE001 - one client's failure must not stop the others
            log.error("closing a SandboxClient at exit failed: %s", e)
            print(f"pomona: closing a SandboxClient at exit failed: {e}", file=sys.stderr)


threading._register_atexit(_close_open_clients)  # type: ignore[attr-defined]
