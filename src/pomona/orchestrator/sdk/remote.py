"""The SDK's HTTP transport: the Service (orchestrator/service.py) over the REST API, so
AsyncSandboxClient and AsyncSandbox work unchanged against a service.

Retries are safe by construction, never by hope:
- a request that never reached the server (connect error, pool timeout) or that the server turned
  away (503 with Retry-After) is retried, whatever it is;
- a request whose answer was lost is retried only when repeating it cannot do anything twice:
  reads, deletes, heartbeats, file writes, and create / snapshot / fork (their ids are chosen
  here, before the first attempt) and exec (it carries an idempotency key, so the service returns
  the first attempt's job instead of running the command again). apply_patch is not repeated.

An exec the caller gives up on (its task cancelled, its stream left early) is cancelled on the
service by the same key, whether its request got there or not, so the command stops as it would
in-process. Requests travel over sdk/transport.py (httpx over aiohttp's pool).
"""

from __future__ import annotations

import asyncio
import base64
import builtins
import contextlib
import json
import random
import secrets
import signal
import socket
import time
from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import httpx

from pomona.errors import (
    ClientClosed,
    InvalidRequest,
    PomonaError,
    SandboxFailed,
    ServiceUnreachable,
    WaitTimedOut,
    error_named,
)
from pomona.orchestrator.api_models import JobView
from pomona.orchestrator.sdk.transport import AiohttpTransport
from pomona.orchestrator.service import new_id
from pomona.orchestrator.types import (
    ExecChunk,
    ExecRequest,
    ExecResult,
    FileInfo,
    PatchResult,
    SandboxInfo,
    SandboxSpec,
    SnapshotInfo,
)

if TYPE_CHECKING:
    from websockets.asyncio.client import ClientConnection

NEVER_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
ANSWER_LOST = (
    httpx.ReadError,
    httpx.WriteError,
    httpx.RemoteProtocolError,
    httpx.ReadTimeout,
    httpx.WriteTimeout,
)
WS_CLOSE_ERRORS = {
    4400: "InvalidRequest",
    4401: "AuthenticationRequired",
    4403: "PermissionDenied",
    4404: "SandboxNotFound",
    4500: "SandboxFailed",
    4502: "SandboxFailed",
}
ABANDON_WAIT = 10.0  # seconds an interrupted exec spends cancelling itself on the service
SIGNAL_NAMES: dict[int, str] = {
    signal.SIGTERM: "TERM",
    signal.SIGKILL: "KILL",
    signal.SIGINT: "INT",
    signal.SIGHUP: "HUP",
    signal.SIGQUIT: "QUIT",
}


def _q(value: str) -> str:
    return quote(value, safe="")


class RemoteService:
    """Talks to `pomona serve`. `retry_for` bounds how long one call keeps retrying an unreachable
    service; `overload_wait` more seconds are spent on 503s (queueing behind a burst)."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        timeout: float = 300.0,
        retry_for: float = 60.0,
        overload_wait: float = 1800.0,
        max_connections: int = 1024,
    ):
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.timeout, self.retry_for, self.max_connections = timeout, retry_for, max_connections
        self.overload_wait = overload_wait
        self._client: httpx.AsyncClient | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        if self._client is None:
            headers = {"X-API-Key": self.api_key} if self.api_key else {}
            self._client = httpx.AsyncClient(
                base_url=self.base_url,
                headers=headers,
                timeout=httpx.Timeout(self.timeout, connect=10.0),
                # keep-alive shorter than the server's 120 s: never reuse a connection it closes
                transport=AiohttpTransport(self.max_connections, keepalive=60),
            )

    @property
    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            raise ClientClosed("RemoteService.start() was not called")
        return self._client

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()

    # -- one HTTP call, with the retry rules above --------------------------------------------

    async def _call(
        self, method: str, path: str, *, repeatable: bool, **kwargs: Any
    ) -> httpx.Response:
        await self.start()
        deadline, attempt = time.monotonic() + self.retry_for, 0
        while True:
            attempt += 1
            try:
                response = await self._http.request(method, path, **kwargs)
            except NEVER_SENT as e:
                if time.monotonic() > deadline:
                    raise ServiceUnreachable(f"cannot reach {self.base_url}: {e!r}") from e
                await asyncio.sleep(min(0.1 * 2**attempt, 2.0) * random.uniform(0.5, 1.0))
                continue
            except ANSWER_LOST as e:
                if not repeatable or time.monotonic() > deadline:
                    raise ServiceUnreachable(
                        f"{method} {path}: the connection to {self.base_url} broke before the answer "
                        f"({e!r}); this call is not safely repeatable, so it was not retried"
                    ) from e
                await asyncio.sleep(min(0.1 * 2**attempt, 2.0) * random.uniform(0.5, 1.0))
                continue
            if response.status_code == 503 and time.monotonic() < deadline + self.overload_wait:
                # turned away before anything ran (admission, store away): always safe to repeat;
                # a burst slows down here instead of failing
                delay = float(response.headers.get("Retry-After", "1") or 1)
                await asyncio.sleep(delay + random.uniform(0, 0.5))
                continue
            if response.status_code >= 400:
                raise self._error(response)
            return response

    @staticmethod
    def _error(response: httpx.Response) -> PomonaError:
        try:
            body = response.json()
            name, detail = body.get("error"), body.get("detail")
        except (ValueError, AttributeError):
            name, detail = None, response.text
        if not isinstance(detail, str):
            detail = json.dumps(detail)
        error = error_named(name, detail or f"HTTP {response.status_code}")
        if isinstance(body := _json_or_none(response), dict) and body.get("job_id"):
            error.job_id = body["job_id"]  # type: ignore[attr-defined]
        return error

    async def _json(self, method: str, path: str, *, repeatable: bool = True, **kwargs: Any) -> Any:
        return (await self._call(method, path, repeatable=repeatable, **kwargs)).json()

    # -- sandboxes ----------------------------------------------------------------------------

    async def create(
        self, spec: SandboxSpec, sandbox_id: str | None = None, snapshot: SnapshotInfo | None = None
    ) -> SandboxInfo:
        sandbox_id = sandbox_id or new_id()  # chosen before the first attempt: retries are no-ops
        if snapshot is not None:
            (info,) = await self.fork(snapshot.id, 1, spec.labels, [sandbox_id])
            return info
        body = {**spec.model_dump(mode="json"), "sandbox_id": sandbox_id}
        return SandboxInfo.model_validate(await self._json("POST", "/sandboxes", json=body))

    async def get(self, sandbox_id: str) -> SandboxInfo:
        return SandboxInfo.model_validate(await self._json("GET", f"/sandboxes/{_q(sandbox_id)}"))

    async def list(self, labels: dict[str, str] | None = None) -> builtins.list[SandboxInfo]:
        params = [("label", f"{k}={v}") for k, v in (labels or {}).items()]
        return [
            SandboxInfo.model_validate(i)
            for i in await self._json("GET", "/sandboxes", params=params)
        ]

    async def heartbeat(self, sandbox_id: str) -> SandboxInfo:
        ack = await self._json("POST", f"/sandboxes/{_q(sandbox_id)}/heartbeat")
        return SandboxInfo.model_validate(ack["sandbox"])

    async def delete(self, sandbox_id: str) -> bool:
        return bool((await self._json("DELETE", f"/sandboxes/{_q(sandbox_id)}"))["existed"])

    async def reap(self) -> builtins.list[str]:
        return [str(i) for i in (await self._json("POST", "/reap"))["reaped"]]

    # -- exec ---------------------------------------------------------------------------------

    def _exec_body(self, request: ExecRequest, wait: bool) -> dict[str, Any]:
        return {**request.model_dump(mode="json"), "wait": wait}

    async def exec(self, sandbox_id: str, request: ExecRequest) -> ExecResult:
        """POST with wait=true; a lost answer or an expired server wait re-POSTs with the same
        idempotency key, which returns (and waits for) the same job."""
        key = secrets.token_hex(16)
        try:
            while True:
                try:
                    body = await self._json(
                        "POST",
                        f"/sandboxes/{_q(sandbox_id)}/exec",
                        json=self._exec_body(request, True),
                        headers={"Idempotency-Key": key},
                        timeout=httpx.Timeout(None, connect=10.0),
                    )
                except WaitTimedOut:
                    continue
                return self._result(JobView.model_validate(body))
        except asyncio.CancelledError:
            await self._abandon(sandbox_id, request, key)
            raise

    async def _abandon(self, sandbox_id: str, request: ExecRequest, key: str) -> None:
        """The caller gave up on an exec (cancelled, interrupted): cancel it on the service too,
        by its key, whether its request got there or not, so the command stops (or never starts)
        as it would in-process. Best effort, within ABANDON_WAIT seconds."""
        with contextlib.suppress(Exception):
            async with asyncio.timeout(ABANDON_WAIT):
                await self._call(
                    "POST",
                    f"/sandboxes/{_q(sandbox_id)}/exec/cancel",
                    repeatable=True,
                    json=self._exec_body(request, False),
                    headers={"Idempotency-Key": key},
                )

    @staticmethod
    def _result(job: JobView) -> ExecResult:
        if job.exit_code is None:
            raise error_named(job.error_type, job.error or f"job {job.job_id} ended {job.status}")
        return ExecResult(
            exit_code=job.exit_code,
            stdout=job.stdout,
            stderr=job.stderr,
            duration=job.duration or 0.0,
            timed_out=job.timed_out,
            truncated=job.truncated,
        )

    async def exec_stream(
        self, sandbox_id: str, request: ExecRequest
    ) -> AsyncGenerator[ExecChunk | ExecResult, None]:
        """NDJSON lines as the command writes. Retried (same key) only before the first line."""
        await self.start()
        key, deadline = secrets.token_hex(16), time.monotonic() + self.retry_for
        finished = False
        try:
            async with contextlib.aclosing(
                self._exec_lines(sandbox_id, request, key, deadline)
            ) as lines:
                async for item in lines:
                    finished = isinstance(item, ExecResult)
                    yield item
        except (asyncio.CancelledError, GeneratorExit):
            if not finished:  # the caller stopped listening: the command goes too
                await self._abandon(sandbox_id, request, key)
            raise

    async def _exec_lines(
        self, sandbox_id: str, request: ExecRequest, key: str, deadline: float
    ) -> AsyncGenerator[ExecChunk | ExecResult, None]:
        while True:
            started = False
            try:
                async with self._http.stream(
                    "POST",
                    f"/sandboxes/{_q(sandbox_id)}/exec/stream",
                    json=self._exec_body(request, False),
                    headers={"Idempotency-Key": key},
                    timeout=httpx.Timeout(None, connect=10.0),
                ) as response:
                    if response.status_code >= 400:
                        await response.aread()
                        if (
                            response.status_code == 503
                            and time.monotonic() < deadline + self.overload_wait
                        ):
                            # turned away before anything ran (admission, store away): always safe to repeat;
                            # a burst slows down here instead of failing
                            await asyncio.sleep(float(response.headers.get("Retry-After", "1")))
                            continue
                        raise self._error(response)
                    async for line in response.aiter_lines():
                        if not line:
                            continue
                        started = True
                        item = json.loads(line)
                        kind = item.pop("type")
                        if kind == "chunk":
                            yield ExecChunk.model_validate(item)
                        elif kind == "result":
                            yield ExecResult.model_validate(item)
                            return
                        else:
                            raise error_named(item.get("error"), item.get("detail", "exec failed"))
                    raise ServiceUnreachable("the exec stream ended without a result")
            except (*NEVER_SENT, *ANSWER_LOST) as e:
                if started or time.monotonic() > deadline:
                    raise ServiceUnreachable(
                        f"the exec stream from {self.base_url} broke: {e!r}"
                    ) from e
                await asyncio.sleep(0.2)

    async def open_pty(
        self, sandbox_id: str, request: ExecRequest, rows: int = 24, cols: int = 80
    ) -> RemotePty:
        ws = await self._websocket(f"/sandboxes/{_q(sandbox_id)}/exec/pty")
        await ws.send(
            json.dumps(
                {
                    "type": "init",
                    "cmd": request.command,
                    "env": request.env,
                    "cwd": request.cwd,
                    "rows": rows,
                    "cols": cols,
                    "login_shell": request.login_shell,
                    "user": request.user,
                }
            )
        )
        await _expect(ws, "ready")
        return RemotePty(ws)

    # -- files --------------------------------------------------------------------------------

    async def read_file(self, sandbox_id: str, path: str) -> bytes:
        return (
            await self._call(
                "GET",
                f"/sandboxes/{_q(sandbox_id)}/files/raw",
                repeatable=True,
                params={"path": path},
            )
        ).content

    async def write_file(self, sandbox_id: str, path: str, data: bytes, mode: int = 0o644) -> None:
        await self._call(
            "PUT",
            f"/sandboxes/{_q(sandbox_id)}/files/raw",
            repeatable=True,
            params={"path": path, "mode": mode},
            content=data,
        )

    async def list_files(self, sandbox_id: str, path: str = ".") -> builtins.list[FileInfo]:
        body = await self._json(
            "GET", f"/sandboxes/{_q(sandbox_id)}/files/list", params={"path": path}
        )
        return [FileInfo.model_validate(f) for f in body["files"]]

    async def stat(self, sandbox_id: str, path: str) -> FileInfo:
        return FileInfo.model_validate(
            await self._json(
                "GET", f"/sandboxes/{_q(sandbox_id)}/files/stat", params={"path": path}
            )
        )

    async def remove(self, sandbox_id: str, path: str, recursive: bool = False) -> None:
        await self._call(
            "DELETE",
            f"/sandboxes/{_q(sandbox_id)}/files",
            repeatable=False,
            params={"path": path, "recursive": recursive},
        )

    async def download_dir(self, sandbox_id: str, path: str = ".") -> bytes:
        return (
            await self._call(
                "GET",
                f"/sandboxes/{_q(sandbox_id)}/archive",
                repeatable=True,
                params={"path": path},
            )
        ).content

    async def upload_dir(self, sandbox_id: str, path: str, tar: bytes) -> None:
        await self._call(
            "PUT",
            f"/sandboxes/{_q(sandbox_id)}/archive",
            repeatable=True,
            params={"path": path},
            content=tar,
            headers={"Content-Type": "application/x-tar"},
        )

    async def apply_patch(
        self, sandbox_id: str, patch: str, cwd: str | None = None, timeout: float = 60
    ) -> PatchResult:
        body = await self._json(
            "POST",
            f"/sandboxes/{_q(sandbox_id)}/apply_patch",
            repeatable=False,
            json={"patch": patch, "cwd": cwd, "timeout_seconds": timeout},
        )
        return PatchResult.model_validate(body)

    # -- snapshot and fork --------------------------------------------------------------------

    async def snapshot(self, sandbox_id: str, snapshot_id: str | None = None) -> SnapshotInfo:
        body = {"snapshot_id": snapshot_id or new_id("snap")}
        return SnapshotInfo.model_validate(
            await self._json("POST", f"/sandboxes/{_q(sandbox_id)}/snapshot", json=body)
        )

    async def fork(
        self,
        snapshot_id: str,
        k: int,
        labels: dict[str, str] | None = None,
        ids: builtins.list[str] | None = None,
    ) -> builtins.list[SandboxInfo]:
        if k < 1:
            raise InvalidRequest("fork needs k >= 1")
        body = {"k": k, "labels": labels or {}, "sandbox_ids": ids or [new_id() for _ in range(k)]}
        return [
            SandboxInfo.model_validate(i)
            for i in await self._json("POST", f"/snapshots/{_q(snapshot_id)}/fork", json=body)
        ]

    async def list_snapshots(self) -> builtins.list[SnapshotInfo]:
        return [SnapshotInfo.model_validate(s) for s in await self._json("GET", "/snapshots")]

    async def delete_snapshot(self, snapshot_id: str) -> bool:
        return bool((await self._json("DELETE", f"/snapshots/{_q(snapshot_id)}"))["deleted"])

    # -- WebSockets ---------------------------------------------------------------------------

    async def _websocket(self, path: str) -> ClientConnection:
        from websockets.asyncio.client import connect

        url = "ws" + self.base_url.removeprefix("http") + path
        headers = {"X-API-Key": self.api_key} if self.api_key else {}
        try:
            return await connect(
                url, additional_headers=headers, max_size=4 * 2**20, open_timeout=10
            )
        except OSError as e:
            raise ServiceUnreachable(f"cannot open a WebSocket to {url}: {e!r}") from e

    async def open_connection(
        self, sandbox_id: str, port: int
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A local socket pair bridged to the service's port tunnel: real asyncio streams."""
        if not 0 < port < 65536:
            raise InvalidRequest(f"port {port} is out of range")
        ws = await self._websocket(f"/sandboxes/{_q(sandbox_id)}/ports/{port}")
        await _expect(ws, "connected")
        ours, theirs = socket.socketpair()
        reader, writer = await asyncio.open_connection(sock=ours)

        async def to_sandbox() -> None:
            while data := await reader.read(65536):
                await ws.send(data)
            await ws.send(b"")  # half-close

        async def from_sandbox() -> None:
            with contextlib.suppress(Exception):
                async for message in ws:
                    writer.write(message if isinstance(message, bytes) else message.encode())
                    await writer.drain()
            writer.close()

        for coro in (to_sandbox(), from_sandbox()):
            task = asyncio.create_task(coro)
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return await asyncio.open_connection(sock=theirs)


def _json_or_none(response: httpx.Response) -> Any:
    with contextlib.suppress(ValueError):
        return response.json()
    return None


async def _expect(ws: ClientConnection, kind: str) -> dict[str, Any]:
    """The first frame of a session: `kind`, or an error frame and a close code to raise."""
    from websockets.exceptions import ConnectionClosed

    try:
        frame: dict[str, Any] = json.loads(await ws.recv())
        if frame.get("type") == kind:
            return frame
        message = frame.get("message", str(frame))
        with contextlib.suppress(ConnectionClosed):
            await ws.recv()  # let the close frame arrive
    except ConnectionClosed:
        message = ""
    code = ws.close_code or 0
    await ws.close()
    raise error_named(
        WS_CLOSE_ERRORS.get(code, "SandboxFailed"),
        message or ws.close_reason or f"the service closed the session ({code})",
    )


class RemotePty:
    """Pty over the service's WebSocket (Orchard's frames): read/write/resize/signal/wait/close."""

    def __init__(self, ws: ClientConnection):
        self.ws = ws
        self._output: asyncio.Queue[bytes] = asyncio.Queue()
        self._exit_code: int | None = None
        self._ended = asyncio.Event()
        self._eof = False
        self._pump = asyncio.create_task(self._receive())

    async def _receive(self) -> None:
        try:
            async for message in self.ws:
                frame = json.loads(message)
                if frame.get("type") == "stdout":
                    self._output.put_nowait(base64.b64decode(frame["data"]))
                elif frame.get("type") == "exit":
                    self._exit_code = frame["code"]
        except Exception:  # the connection ended: what was read stays readable
            pass
        finally:
            self._output.put_nowait(b"")
            self._ended.set()

    async def read(self, timeout: float | None = None) -> bytes:
        if self._eof:
            return b""
        try:
            data = await asyncio.wait_for(self._output.get(), timeout)
        except TimeoutError:
            return b""
        while data and not self._output.empty() and len(data) < 65536:
            more = self._output.get_nowait()
            if not more:
                self._output.put_nowait(more)
                break
            data += more
        self._eof = not data
        return data

    async def _send(self, frame: dict[str, Any]) -> None:
        try:
            await self.ws.send(json.dumps(frame))
        except Exception as e:
            raise SandboxFailed(f"the terminal session is closed: {e}") from e

    async def write(self, data: bytes) -> None:
        await self._send({"type": "stdin", "data": base64.b64encode(data).decode()})

    async def resize(self, rows: int, cols: int) -> None:
        await self._send({"type": "resize", "rows": rows, "cols": cols})

    async def signal(self, signum: int) -> None:
        await self._send({"type": "signal", "sig": SIGNAL_NAMES.get(signum, signum)})

    async def wait(self, timeout: float | None = None) -> int | None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._ended.wait(), timeout)
        return self._exit_code

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self.ws.close()
        self._pump.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._pump
