"""`pomona serve`: the REST API over a Coordinator. Routes are thin; every rule lives below them.

Compatible with Orchard Env's documented routes (reference/orchard.md §2), plus listing by label,
streaming exec (NDJSON), snapshot, fork, port tunnels, job cancel, tar transfer and raw files.
Errors are `{"error": <class>, "detail": <what to fix>, "request_id"}` with the class's status:
401/403 auth, 404 unknown, 408 only for an expired server-side wait, 409 conflict, 413 too large,
422 invalid, 503 + Retry-After when overloaded or when the store is unreachable.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import binascii
import contextlib
import errno
import hmac
import ipaddress
import json
import logging
import os
import secrets
import sqlite3
import sys
import tarfile
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import Annotated, Any

from fastapi import Body, FastAPI, Header, Query, Request, Response, Security, WebSocket
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from fastapi.security import APIKeyHeader
from starlette.exceptions import HTTPException

from pomona.orchestrator.api_models import (
    AuthenticationRequired,
    Capacity,
    CreateSandboxRequest,
    Deleted,
    ErrorBody,
    ExecBody,
    FileContent,
    FileList,
    FileRemoved,
    FileUpload,
    FileWritten,
    ForkBody,
    Health,
    HeartbeatAck,
    JobView,
    Node,
    Overloaded,
    PatchBody,
    PatchView,
    PermissionDenied,
    Reaped,
    Resources,
    SandboxUsage,
    SandboxView,
    ServiceInfo,
    SnapshotBody,
    SnapshotDeleted,
)
from pomona.orchestrator.errors import InvalidRequest, PomonaError
from pomona.orchestrator.server.coordinator import Coordinator, Principal, Timing
from pomona.orchestrator.server.metrics import instrument
from pomona.orchestrator.server.policy import FILE_OPS_PER_KEY, TenantPolicy
from pomona.orchestrator.server.relay import pty_session, tcp_tunnel
from pomona.orchestrator.server.store import JobRecord, SandboxRecord, open_store
from pomona.orchestrator.sources import ImageSources
from pomona.orchestrator.types import ExecChunk, FileInfo, SnapshotInfo, check_text

log = logging.getLogger("pomona.service")
VERSION = "0.1.0"
MAX_BODY = 512 * 2**20
WORKERS = 64
TAR = {"application/x-tar": {"schema": {"type": "string", "format": "binary"}}}
OCTETS = {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}
STATUS_ERRORS = {401: "AuthenticationRequired", 403: "PermissionDenied", 404: "NotFound",
                 405: "MethodNotAllowed", 413: "TooLarge"}
OS_ERRORS = {errno.ENAMETOOLONG: (422, "InvalidRequest"), errno.EINVAL: (422, "InvalidRequest"),
             errno.ENOENT: (404, "FileNotFoundInSandbox"), errno.ENOTDIR: (422, "InvalidRequest"),
             errno.EISDIR: (422, "InvalidRequest"), errno.ELOOP: (422, "PathOutsideSandbox"),
             errno.ENOSPC: (413, "TooLarge"), errno.EDQUOT: (413, "TooLarge"), errno.EFBIG: (413, "TooLarge")}
ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorBody, "description": text} for code, text in (
        (401, "no X-API-Key"), (403, "unknown key"), (404, "unknown id (or not yours)"),
        (409, "conflict"), (413, "too large"), (422, "invalid input"),
        (503, "overloaded or store unreachable: retry after Retry-After"))}


# -- API keys ----------------------------------------------------------------------------------


def parse_keys(text: str | None) -> dict[str, str]:
    """POMONA_API_KEYS: "name:key" entries separated by commas, spaces or newlines."""
    keys: dict[str, str] = {}
    for entry in (text or "").replace(",", " ").split():
        name, sep, key = entry.partition(":")
        if not sep or not name or not key:
            raise ValueError(f"POMONA_API_KEYS entry {entry[:4]}... is not name:key")
        keys[name] = key
    return keys


class KeyRing:
    """Checks X-API-Key in constant time against every key; None disables auth (loopback only)."""

    def __init__(self, keys: dict[str, str] | None, admins: set[str] | frozenset[str] = frozenset({"admin"})):
        self.keys = {n: k.encode() for n, k in keys.items()} if keys is not None else None
        self.admins = admins

    def check(self, presented: str | None) -> Principal:
        if self.keys is None:
            return Principal("anonymous", admin=True)
        if not presented:
            raise AuthenticationRequired("send your API key in the X-API-Key header")
        found = None
        for name, key in self.keys.items():  # no early exit: timing says nothing about which key
            if hmac.compare_digest(key, presented.encode()):
                found = name
        if found is None:
            raise PermissionDenied("the X-API-Key is not a key this service knows")
        return Principal(found, found in self.admins)


# -- admission control -------------------------------------------------------------------------


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
            raise Overloaded(f"{self.limit} {self.what}s are running and {self.waiting} are queued: "
                             "retry after the Retry-After delay")
        self.waiting += 1
        try:
            await asyncio.wait_for(self._slots.acquire(), self.max_wait)
        except TimeoutError:
            raise Overloaded(f"waited {self.max_wait:g} s for a free {self.what} slot; retry later") from None
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


# -- request ids and body limits (plain ASGI: no buffering, streams stay streams) ------------


class RequestEnvelope:
    def __init__(self, app: Any, max_body: int):
        self.app, self.max_body = app, max_body

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        request_id = secrets.token_hex(8)
        scope.setdefault("state", {})["request_id"] = request_id
        header = (b"x-request-id", request_id.encode())
        length = dict(scope["headers"]).get(b"content-length")
        too_large = f"the request body is over the {self.max_body} byte limit; send less (tar " \
                    "uploads and raw files are cheaper than base64 JSON)"
        if length and length.isdigit() and int(length) > self.max_body:
            body = ErrorBody(error="TooLarge", detail=too_large, request_id=request_id)
            response = JSONResponse(body.model_dump(exclude_none=True), 413, headers={"X-Request-ID": request_id})
            return await response(scope, receive, send)
        seen = 0

        async def limited() -> dict:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.max_body:
                raise HTTPException(413, too_large)
            return message

        async def stamped(message: dict) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), header]
            await send(message)

        await self.app(scope, limited, stamped)


# -- the app -----------------------------------------------------------------------------------


_header = APIKeyHeader(name="X-API-Key", auto_error=False)


def _principal(request: Request, key: Annotated[str | None, Security(_header)]) -> Principal:
    return request.app.state.keys.check(key)


Who = Annotated[Principal, Security(_principal)]
IdempotencyKey = Annotated[str | None, Header(alias="Idempotency-Key", max_length=200)]
Path_ = Annotated[str, Query(min_length=1, description="absolute, or relative to the workdir")]


def _error(request: Request, status: int, error: str, detail: Any, **extra: Any) -> JSONResponse:
    body = ErrorBody(error=error, detail=detail, request_id=request.state.request_id, **extra)
    headers = {"Retry-After": str(extra.pop("retry_after", 1))} if status == 503 else None
    return JSONResponse(body.model_dump(exclude_none=True), status, headers=headers)


def _store_errors() -> tuple[type[BaseException], ...]:
    errors: list[type[BaseException]] = [sqlite3.OperationalError]
    with contextlib.suppress(ImportError):
        import redis.exceptions

        errors += [redis.exceptions.ConnectionError, redis.exceptions.TimeoutError,
                   redis.exceptions.BusyLoadingError]
    return tuple(errors)


def _labels(label: list[str]) -> dict[str, str]:
    pairs = {}
    check_text(label, "a label filter")
    for item in label:
        k, sep, v = item.partition("=")
        if not sep or not k:
            raise InvalidRequest(f"label filter {item!r} is not key=value")
        pairs[k] = v
    return pairs


def _b64(content: str) -> bytes:
    try:
        return base64.b64decode(content, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidRequest("content is not valid base64") from None


def _machine() -> Capacity:
    pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return Capacity(cpu=float(os.cpu_count() or 1), memory_bytes=pages)


def create_app(coordinator: Coordinator, keys: KeyRing, *, max_creates: int = 32,
               max_execs: int = 512, queue: int = 2000, max_body: int = MAX_BODY,
               policy: TenantPolicy | None = None) -> FastAPI:
    """The service over one coordinator. Lifespan starts and stops it."""
    coord = coordinator
    policy = policy or TenantPolicy()
    creates = Admission("create", max_creates, queue)
    execs = Admission("exec", max_execs, queue)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # blocking work (files, builds) runs on threads: enough of them that one key's bounded
        # share (policy.file_ops_per_key) never takes them all (the default is cores + 4)
        workers = ThreadPoolExecutor(max(WORKERS, 4 * policy.file_ops_per_key), "pomona-worker")
        asyncio.get_running_loop().set_default_executor(workers)
        await coord.start()
        try:
            yield
        finally:
            await coord.close()

    app = FastAPI(title="Pomona sandbox service", version=VERSION, lifespan=lifespan,
                  description=__doc__)
    app.state.keys = keys

    def view(record: SandboxRecord) -> SandboxView:
        return SandboxView(**record.info().model_dump(), owner=record.owner)

    # errors ---------------------------------------------------------------------------------

    @app.exception_handler(PomonaError)
    async def pomona_error(request: Request, e: PomonaError) -> JSONResponse:
        return _error(request, e.status_code, type(e).__name__, str(e),
                      job_id=getattr(e, "job_id", None), retry_after=getattr(e, "retry_after", 1))

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, e: RequestValidationError) -> JSONResponse:
        problems = "; ".join(f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in e.errors())
        return _error(request, 422, "InvalidRequest", f"invalid request: {problems}")

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, e: HTTPException) -> JSONResponse:
        return _error(request, e.status_code, STATUS_ERRORS.get(e.status_code, "HTTPError"), e.detail)

    for store_error in _store_errors():
        @app.exception_handler(store_error)
        async def store_down(request: Request, e: Exception) -> JSONResponse:
            log.warning("store unreachable: %s", e)
            return _error(request, 503, "StoreUnavailable",
                          f"the state store is unreachable ({type(e).__name__}); retry shortly")

    @app.exception_handler(OSError)
    async def os_error(request: Request, e: OSError) -> JSONResponse:
        """What a path or size asked of the filesystem and it refused: the caller's to fix."""
        status, name = OS_ERRORS.get(e.errno or 0, (500, "InternalError"))
        if status == 500:
            log.exception("unhandled OS error in %s %s", request.method, request.url.path)
        return _error(request, status, name, f"{e.strerror or e} ({errno.errorcode.get(e.errno or 0, '?')})")

    @app.exception_handler(Exception)
    async def internal(request: Request, e: Exception) -> JSONResponse:
        log.exception("unhandled error in %s %s", request.method, request.url.path)
        return _error(request, 500, "InternalError", f"{type(e).__name__}: {e}")

    # service --------------------------------------------------------------------------------

    @app.get("/", response_model=ServiceInfo)
    async def root() -> ServiceInfo:
        return ServiceInfo(version=VERSION)

    @app.get("/health", response_model=Health)
    async def health() -> Health:
        return Health()

    @app.get("/resources", response_model=Resources, responses=ERRORS)
    async def resources(who: Who) -> Resources:
        machine = _machine()
        mine = await coord.list(who, {})
        cpu = sum(r.spec.limits.cpu or 0 for r in mine)
        memory = sum(r.spec.limits.memory or 0 for r in mine)
        requested = Capacity(cpu=cpu, memory_bytes=memory)
        return Resources(
            nodes=[Node(name=os.uname().nodename, capacity=machine, allocatable=machine)],
            total_capacity=machine, total_allocatable=machine, total_requested=requested,
            available=Capacity(cpu=max(0.0, machine.cpu - cpu),
                               memory_bytes=max(0, machine.memory_bytes - memory)),
            sandbox_pods=[SandboxUsage(name=r.id, phase=r.status, cpu_request=r.spec.limits.cpu,
                                       memory_request_bytes=r.spec.limits.memory) for r in mine])

    @app.post("/reap", response_model=Reaped, responses=ERRORS)
    async def reap(who: Who) -> Reaped:
        await coord.reap()
        return Reaped(reaped=await coord.store.recently_reaped(None if who.admin else who.name))

    # sandboxes ------------------------------------------------------------------------------

    @app.post("/sandboxes", response_model=SandboxView, responses=ERRORS)
    async def create(body: CreateSandboxRequest, who: Who) -> SandboxView:
        policy.check_spec(who, body.spec())
        async with creates.slot():
            return view(await coord.create(who, body.spec(), body.sandbox_id))

    @app.get("/sandboxes", response_model=list[SandboxView], responses=ERRORS)
    async def list_sandboxes(who: Who, label: Annotated[list[str], Query(
            description="key=value; repeat to require several")] = []) -> list[SandboxView]:  # noqa: B006
        return [view(r) for r in await coord.list(who, _labels(label))]

    @app.get("/sandboxes/{sandbox_id}", response_model=SandboxView, responses=ERRORS)
    async def get_sandbox(sandbox_id: str, who: Who) -> SandboxView:
        return view(await coord.sandbox(who, sandbox_id))

    @app.get("/sandboxes/{sandbox_id}/wait", response_model=SandboxView,
             responses={**ERRORS, 408: {"model": ErrorBody, "description": "still creating"}})
    async def wait_sandbox(sandbox_id: str, who: Who,
                           timeout: Annotated[float, Query(gt=0, le=86400)] = 3600) -> SandboxView:
        return view(await coord.wait_ready(who, sandbox_id, timeout))

    @app.delete("/sandboxes/{sandbox_id}", response_model=Deleted, responses=ERRORS)
    async def delete(sandbox_id: str, who: Who) -> Deleted:
        return Deleted(sandbox_id=sandbox_id, existed=await coord.delete(who, sandbox_id))

    @app.post("/sandboxes/{sandbox_id}/heartbeat", response_model=HeartbeatAck, responses=ERRORS)
    async def heartbeat(sandbox_id: str, who: Who) -> HeartbeatAck:
        record = await coord.heartbeat(who, sandbox_id)
        return HeartbeatAck(sandbox_id=sandbox_id, expires_at=record.expires_at, sandbox=view(record))

    # exec and jobs --------------------------------------------------------------------------

    async def submit(who: Principal, sandbox_id: str, body: ExecBody, key: str | None) -> JobRecord:
        await execs.acquire()
        try:
            job, new = await coord.submit(who, sandbox_id, body.exec_request(),
                                          key or body.idempotency_key, on_finish=execs.release)
        except BaseException:
            execs.release()
            raise
        if not new:
            execs.release()
        return job

    @app.post("/sandboxes/{sandbox_id}/exec", responses={
        **ERRORS, 408: {"model": ErrorBody, "description": "wait=true expired: POST again with the "
                        "same Idempotency-Key to keep waiting"}})
    async def exec_(sandbox_id: str, body: ExecBody, who: Who, idempotency_key: IdempotencyKey = None
                    ) -> JobView:
        job = await submit(who, sandbox_id, body, idempotency_key)
        if body.wait:
            job = await coord.wait(who, job.id, (body.timeout or 3600) + 60)
        return JobView.of(job)

    @app.post("/sandboxes/{sandbox_id}/exec/stream", response_class=StreamingResponse,
              responses={**ERRORS, 200: {"description": "NDJSON: {type: chunk, stream, data} lines, "
                                               "then {type: result, ...ExecResult} or {type: error}",
                                         "content": {"application/x-ndjson": {}}}})
    async def exec_stream(sandbox_id: str, body: ExecBody, who: Who,
                          idempotency_key: IdempotencyKey = None) -> StreamingResponse:
        job = await submit(who, sandbox_id, body, idempotency_key)

        async def lines() -> AsyncIterator[bytes]:
            try:
                async for item in coord.stream(who, job.id):
                    kind = {"type": "chunk"} if isinstance(item, ExecChunk) else {"type": "result"}
                    yield json.dumps({**kind, **item.model_dump()}).encode() + b"\n"
            except PomonaError as e:
                yield json.dumps({"type": "error", "error": type(e).__name__, "detail": str(e)}).encode() + b"\n"

        return StreamingResponse(lines(), media_type="application/x-ndjson", headers={"X-Job-Id": job.id})

    @app.get("/jobs/{job_id}", response_model=JobView, responses=ERRORS)
    async def get_job(job_id: str, who: Who) -> JobView:
        return JobView.of(await coord.job(who, job_id))

    @app.get("/jobs/{job_id}/wait", response_model=JobView,
             responses={**ERRORS, 408: {"model": ErrorBody, "description": "still running: wait again"}})
    async def wait_job(job_id: str, who: Who,
                       timeout: Annotated[float, Query(gt=0, le=86400)] = 300) -> JobView:
        return JobView.of(await coord.wait(who, job_id, timeout))

    @app.post("/jobs/{job_id}/cancel", response_model=JobView, responses=ERRORS)
    async def cancel_job(job_id: str, who: Who) -> JobView:
        return JobView.of(await coord.cancel(who, job_id))

    @app.websocket("/sandboxes/{sandbox_id}/exec/pty")
    async def pty(websocket: WebSocket, sandbox_id: str) -> None:
        await pty_session(websocket, keys.check, coord, sandbox_id)

    @app.websocket("/sandboxes/{sandbox_id}/ports/{port}")
    async def port_tunnel(websocket: WebSocket, sandbox_id: str, port: int) -> None:
        await tcp_tunnel(websocket, keys.check, coord, sandbox_id, port)

    # files ----------------------------------------------------------------------------------

    @app.post("/sandboxes/{sandbox_id}/files", response_model=FileWritten, responses=ERRORS)
    async def upload_file(sandbox_id: str, body: FileUpload, who: Who) -> FileWritten:
        async with policy.file_slot(who):
            await coord.sandbox(who, sandbox_id)
            data = _b64(body.content)
            await coord.service.write_file(sandbox_id, body.path, data, body.mode)
            return FileWritten(path=body.path, size=len(data))

    @app.get("/sandboxes/{sandbox_id}/files", response_model=FileContent, responses=ERRORS)
    async def download_file(sandbox_id: str, path: Path_, who: Who) -> FileContent:
        async with policy.file_slot(who):
            await coord.sandbox(who, sandbox_id)
            data = await coord.service.read_file(sandbox_id, path)
            return FileContent(path=path, content=base64.b64encode(data).decode(), size=len(data))

    @app.delete("/sandboxes/{sandbox_id}/files", response_model=FileRemoved, responses=ERRORS)
    async def remove_file(sandbox_id: str, path: Path_, who: Who, recursive: bool = False) -> FileRemoved:
        async with policy.file_slot(who):
            await coord.sandbox(who, sandbox_id)
            await coord.service.remove(sandbox_id, path, recursive)
            return FileRemoved(path=path)

    @app.get("/sandboxes/{sandbox_id}/files/list", response_model=FileList, responses=ERRORS)
    async def list_files(sandbox_id: str, who: Who, path: Path_ = "/workspace") -> FileList:
        async with policy.file_slot(who):
            await coord.sandbox(who, sandbox_id)
            return FileList(path=path, files=await coord.service.list_files(sandbox_id, path))

    @app.get("/sandboxes/{sandbox_id}/files/stat", response_model=FileInfo, responses=ERRORS)
    async def stat_file(sandbox_id: str, path: Path_, who: Who) -> FileInfo:
        async with policy.file_slot(who):
            await coord.sandbox(who, sandbox_id)
            return await coord.service.stat(sandbox_id, path)

    @app.get("/sandboxes/{sandbox_id}/files/raw", response_class=Response,
             responses={**ERRORS, 200: {"content": OCTETS}})
    async def read_raw(sandbox_id: str, path: Path_, who: Who) -> Response:
        async with policy.file_slot(who):
            await coord.sandbox(who, sandbox_id)
            return Response(await coord.service.read_file(sandbox_id, path), media_type="application/octet-stream")

    @app.put("/sandboxes/{sandbox_id}/files/raw", response_model=FileWritten, responses=ERRORS,
             openapi_extra={"requestBody": {"content": OCTETS, "required": True}})
    async def write_raw(sandbox_id: str, path: Path_, request: Request, who: Who,
                        mode: Annotated[int, Query(ge=0, le=0o7777)] = 0o644) -> FileWritten:
        async with policy.file_slot(who):
            await coord.sandbox(who, sandbox_id)
            data = await request.body()
            await coord.service.write_file(sandbox_id, path, data, mode)
            return FileWritten(path=path, size=len(data))

    @app.get("/sandboxes/{sandbox_id}/archive", response_class=Response,
             responses={**ERRORS, 200: {"content": TAR}})
    async def download_dir(sandbox_id: str, who: Who, path: Path_ = ".") -> Response:
        async with policy.file_slot(who):
            await coord.sandbox(who, sandbox_id)
            return Response(await coord.service.download_dir(sandbox_id, path), media_type="application/x-tar")

    @app.put("/sandboxes/{sandbox_id}/archive", response_model=FileWritten, responses=ERRORS,
             openapi_extra={"requestBody": {"content": TAR, "required": True}})
    async def upload_dir(sandbox_id: str, request: Request, who: Who, path: Path_ = ".") -> FileWritten:
        async with policy.file_slot(who):
            await coord.sandbox(who, sandbox_id)
            tar = await request.body()
            try:
                await coord.service.upload_dir(sandbox_id, path, tar)
            except tarfile.TarError as e:
                raise InvalidRequest(f"the body is not an uncompressed tar archive ({e})") from None
            return FileWritten(path=path, size=len(tar))

    @app.post("/sandboxes/{sandbox_id}/apply_patch", response_model=PatchView, responses=ERRORS)
    async def apply_patch(sandbox_id: str, body: PatchBody, who: Who) -> PatchView:
        async with execs.slot():
            result = await coord.apply_patch(who, sandbox_id, body.patch, body.cwd, body.timeout_seconds)
        return PatchView(**result.model_dump())

    # snapshots and fork ---------------------------------------------------------------------

    @app.post("/sandboxes/{sandbox_id}/snapshot", response_model=SnapshotInfo, responses=ERRORS)
    async def snapshot(sandbox_id: str, who: Who,
                       body: Annotated[SnapshotBody | None, Body()] = None) -> SnapshotInfo:
        return await coord.snapshot(who, sandbox_id, body.snapshot_id if body else None)

    @app.get("/snapshots", response_model=list[SnapshotInfo], responses=ERRORS)
    async def list_snapshots(who: Who) -> list[SnapshotInfo]:
        return await coord.list_snapshots(who)

    @app.delete("/snapshots/{snapshot_id}", response_model=SnapshotDeleted, responses=ERRORS)
    async def delete_snapshot(snapshot_id: str, who: Who) -> SnapshotDeleted:
        return SnapshotDeleted(snapshot_id=snapshot_id, deleted=await coord.delete_snapshot(who, snapshot_id))

    @app.post("/snapshots/{snapshot_id}/fork", response_model=list[SandboxView], responses=ERRORS)
    async def fork(snapshot_id: str, body: ForkBody, who: Who) -> list[SandboxView]:
        async with creates.slot():
            records = await coord.fork(who, snapshot_id, body.k, body.labels, body.sandbox_ids)
        return [view(r) for r in records]

    app.add_middleware(RequestEnvelope, max_body=max_body)
    instrument(app, coord)  # GET /metrics, operation timings, admission rejections
    return app


# -- running it -------------------------------------------------------------------------------


def build(runtime: str = "local", state_dir: str = "/var/lib/pomona", redis_url: str | None = None,
          api_keys: dict[str, str] | None = None, admins: set[str] | None = None,
          timing: Timing | None = None, *, mount_sources: list[str] | None = None,
          image_dirs: list[str] | None = None, registries: list[str] | None = None,
          file_ops_per_key: int = FILE_OPS_PER_KEY, **app_options: Any) -> FastAPI:
    """The whole service from settings: runtime, store, coordinator, app. Tenants get host
    mounts under `mount_sources` only, images from `image_dirs` and `registries` only."""
    from pomona.orchestrator.runtimes import make_runtime
    from pomona.orchestrator.service import SandboxService

    sources = ImageSources.restricted(image_dirs, registries)
    service = SandboxService(make_runtime(runtime, state_dir, sources=sources),
                             reap_interval=10**9)  # the coordinator reaps
    coordinator = Coordinator(service, open_store(redis_url, state_dir), timing)
    ring = KeyRing(api_keys, frozenset(admins if admins is not None else {"admin"}))
    policy = TenantPolicy.of(mount_sources, file_ops_per_key)
    return create_app(coordinator, ring, policy=policy, **app_options)


def _loopback(host: str) -> bool:
    with contextlib.suppress(ValueError):
        return ipaddress.ip_address(host).is_loopback
    return host == "localhost"


def serve(host: str = "127.0.0.1", port: int = 8000, runtime: str = "local",
          state_dir: str = "/var/lib/pomona", redis_url: str | None = None, **options: Any) -> None:
    """Run until stopped. Keys come from POMONA_API_KEYS; without keys only loopback is served."""
    import uvicorn

    keys = parse_keys(os.environ.get("POMONA_API_KEYS")) or None
    if keys is None and not _loopback(host):
        raise SystemExit(f"refusing to serve {host} without API keys: set POMONA_API_KEYS=name:key,...")
    if keys is None:
        log.warning("no POMONA_API_KEYS: authentication is off (loopback only)")
    admins = set(os.environ.get("POMONA_ADMIN_KEYS", "admin").replace(",", " ").split())
    app = build(runtime, state_dir, redis_url, keys, admins, **options)
    uvicorn.run(app, host=host, port=port, backlog=2048, timeout_keep_alive=120, log_level="warning",
                ws_max_size=4 * 2**20)


def add_serve_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """`pomona serve`; its parser sets `func`, as cli.py expects."""
    p = subparsers.add_parser("serve", help="run the sandbox service (REST API)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--runtime", default="local", choices=["local", "docker", "podman", "kubernetes"])
    p.add_argument("--state-dir", default="/var/lib/pomona", help="sandboxes and the SQLite store")
    p.add_argument("--redis", metavar="URL", help="share state with other replicas through Redis")
    p.add_argument("--max-creates", type=int, default=32, help="concurrent creates before queueing")
    p.add_argument("--max-execs", type=int, default=512, help="concurrent execs before queueing")
    p.add_argument("--mount-source", action="append", default=[], metavar="DIR",
                   help="a host directory tenants may mount from (repeatable; admins may mount any)")
    p.add_argument("--image-dir", action="append", default=[], metavar="DIR",
                   help="a directory image archives may be read from (repeatable)")
    p.add_argument("--registry", action="append", default=[], metavar="HOST[:PORT]",
                   help="a registry images may be pulled from (repeatable)")
    p.add_argument("--max-file-ops-per-key", type=int, default=FILE_OPS_PER_KEY,
                   help="concurrent file operations of one API key before 503")
    p.set_defaults(func=serve_command)
    return p


def serve_command(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    serve(args.host, args.port, args.runtime, args.state_dir, args.redis,
          max_creates=args.max_creates, max_execs=args.max_execs, mount_sources=args.mount_source,
          image_dirs=args.image_dir, registries=args.registry,
          file_ops_per_key=args.max_file_ops_per_key)
    return 0


def main() -> int:
    """`python -m pomona.orchestrator.server.app ...`: the same as `pomona serve ...`."""
    parser = argparse.ArgumentParser(prog="pomona")
    add_serve_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["serve", *sys.argv[1:]])
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
