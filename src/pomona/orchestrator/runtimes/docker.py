"""The Docker runtime: one container per sandbox over the Docker Engine API (the `docker` SDK),
which also drives Podman's Docker-compatible socket (`engine="podman"`).

A sandbox is a container that idles (`sleep infinity` under the engine's init, `init=True`) and
carries its whole record in labels: `pomona.sandbox` (id), `pomona.owner` (a stable hash of the
state dir, so a new process with the same state dir finds and adopts its containers, and removes
those it cannot adopt), `pomona.spec` (the spec as JSON), plus the user's labels. Nothing else is
kept on disk. Limits map to the engine's: cpu -> NanoCpus, memory -> Memory (= MemorySwap: no
swap), pids -> PidsLimit, disk -> StorageOpt size (only where the storage driver supports it:
overlay2 on xfs with pquota, btrfs, zfs, devicemapper; overlay2 on ext4, as on this project's
machines, does not, and a disk limit is then refused with InvalidRequest instead of ignored).

Exec uses the engine's exec API on a hijacked connection of our own (asyncio, no threads), so
output streams as produced, stdin is written and then half-closed, and the 8-byte-header frames
are demultiplexed here. A timeout kills the exec's whole process group with killpg on the host
pid the engine reports (engine execs are session leaders), which never touches the container.

Files go through the archive API (GET/PUT/HEAD /containers/{id}/archive): the engine resolves
paths inside the container's root, so `..` and planted symlinks stay inside the sandbox.
Listing and removing use a small exec (GNU `find -printf`, `rm`), with an archive fallback for
images whose `find` is not GNU's (busybox).

Snapshots are `docker commit`s into images tagged `pomona-snapshot/<owner>:<snapshot id>`,
labelled with the source sandbox and spec; they outlive the sandbox they came from.

Host-local engine only: the timeout kill (killpg on the exec's host pid), port connect and the
gateway network mode (a listener opened inside the container's network namespace through
/proc/<pid>/ns/net, pomona.orchestrator.linux.netns) need the engine's processes to be on this host,
which is the case for a local dockerd or a rootful `podman system service`. A remote engine
(tcp:// to another machine) runs the rest but not those three.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import io
import json
import os
import posixpath
import re
import signal
import stat as statmod
import tarfile
import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pomona.errors import (
    FileNotFoundInSandbox,
    ImageNotFound,
    InvalidRequest,
    PathOutsideSandbox,
    RuntimeUnavailable,
    SandboxConflict,
    SandboxFailed,
    SandboxNotFound,
    SnapshotNotFound,
)
from pomona.orchestrator.linux.netns import Gateway, open_connection_in
from pomona.orchestrator.linux.safefs import normalize
from pomona.orchestrator.linux.syscalls import alive, exited, start_time
from pomona.orchestrator.runtime import collect
from pomona.orchestrator.runtimes import execution
from pomona.orchestrator.sources import ImageSources, registry_host
from pomona.orchestrator.types import (
    SANDBOX_HOME,
    SANDBOX_UID,
    ExecChunk,
    ExecRequest,
    ExecResult,
    FileInfo,
    NetworkMode,
    SandboxInfo,
    SandboxSpec,
    SnapshotInfo,
)

DEFAULT_SOCKETS = {"docker": "unix:///var/run/docker.sock", "podman": "unix:///run/podman/podman.sock"}
SNAPSHOT_REPO = "pomona-snapshot"
MAX_LINKS = 40
# Static inits (tini or catatonit) a container can borrow when the engine's own is missing
HOST_INITS = ("/usr/bin/catatonit", "/usr/libexec/podman/catatonit", "/usr/bin/tini-static",
              "/usr/bin/docker-init")
INIT_MOUNT = "/dev/.pomona-init"  # in the container's private /dev: never part of a snapshot
# Go's os.FileMode bits, as the engine reports them in the archive stat header
_GO_DIR, _GO_SYMLINK, _GO_SETUID, _GO_SETGID, _GO_STICKY = 1 << 31, 1 << 27, 1 << 23, 1 << 22, 1 << 20
_GO_OTHER = (1 << 26) | (1 << 25) | (1 << 24) | (1 << 21) | (1 << 19)  # device, pipe, socket, char, irregular




@dataclass
class _Live:
    id: str
    container_id: str
    spec: SandboxSpec
    created_at: float
    pid: int
    shell: str = "/bin/sh"
    snapshot: str | None = None
    gnu_find: bool | None = None  # learned on the first listing
    gateway: Gateway | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    pidfd: int | None = None  # the container's init, on a host-local engine

    @property
    def uid(self) -> int:
        return 0 if self.spec.user == "root" else SANDBOX_UID

    @property
    def dead(self) -> bool:
        return self.pidfd is not None and exited(self.pidfd)

    def info(self, runtime: str) -> SandboxInfo:
        if self.dead:
            return SandboxInfo(id=self.id, runtime=runtime, status="failed", spec=self.spec,
                               created_at=self.created_at, snapshot=self.snapshot,
                               message="the sandbox's init process died")
        return SandboxInfo(id=self.id, runtime=runtime, status="ready", spec=self.spec,
                           created_at=self.created_at, snapshot=self.snapshot)

    def release(self) -> None:
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None


@dataclass
class _Stat:
    name: str
    type: str
    size: int
    mode: int
    modified: float
    link_target: str = ""

    def info(self, path: str) -> FileInfo:
        return FileInfo(name=posixpath.basename(path) or "/", path=path, type=self.type,  # type: ignore[arg-type]
                        size=self.size, mode=self.mode, modified=self.modified)


def _parse_time(value: str) -> float:
    """RFC 3339 with nanoseconds ("2024-01-02T03:04:05.123456789Z") to a timestamp."""
    match = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)?$", value or "")
    if not match:
        return 0.0
    stamp = match.group(1) + (match.group(3) or "Z").replace("Z", "+00:00")
    try:
        base = datetime.fromisoformat(stamp).timestamp()
    except ValueError:
        return 0.0
    return base + float("0." + match.group(2)) if match.group(2) else base


def _decode_stat(header: str) -> _Stat:
    raw = json.loads(base64.b64decode(header))
    mode = int(raw.get("mode", 0))
    kind = ("directory" if mode & _GO_DIR else "symlink" if mode & _GO_SYMLINK
            else "other" if mode & _GO_OTHER else "file")
    perms = (mode & 0o777) | (statmod.S_ISUID if mode & _GO_SETUID else 0) \
        | (statmod.S_ISGID if mode & _GO_SETGID else 0) | (statmod.S_ISVTX if mode & _GO_STICKY else 0)
    return _Stat(name=raw.get("name", ""), type=kind, size=int(raw.get("size", 0)), mode=perms,
                 modified=_parse_time(raw.get("mtime", "")), link_target=raw.get("linkTarget", ""))


def _tar_member(name: str, uid: int, mode: int, kind: bytes = tarfile.REGTYPE,
                size: int = 0) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.size = kind, mode, size
    info.uid = info.gid = uid
    info.mtime = int(time.time())
    return info


class _EngineExec:
    """One engine exec on its hijacked connection: demultiplexed output, stdin, exit, kill."""

    def __init__(self, runtime: DockerRuntime, exec_id: str, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter, multiplexed: bool = True):
        self.runtime, self.exec_id = runtime, exec_id
        self.reader, self.writer = reader, writer
        # bounded: a slow consumer stops us reading the socket, so the engine stops too
        self.queue: asyncio.Queue[tuple[str, bytes | None]] = asyncio.Queue(maxsize=execution.QUEUE_LIMIT)
        self.pid = 0
        self.killed = False
        self.demux = asyncio.create_task(self._demux() if multiplexed else asyncio.sleep(0))

    async def _demux(self) -> None:
        """Frames of an 8-byte header (stream, 0, 0, 0, big-endian size) and a payload."""
        names = {1: "stdout", 2: "stderr", 3: "stderr"}
        try:
            with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError, OSError):
                while True:
                    header = await self.reader.readexactly(8)
                    size = int.from_bytes(header[4:8], "big")
                    payload = await self.reader.readexactly(size) if size else b""
                    if payload and header[0] in names:
                        await self.queue.put((names[header[0]], payload))
        finally:
            await self.queue.put(execution.END)

    async def feed_stdin(self, data: bytes) -> None:
        with contextlib.suppress(OSError, RuntimeError):
            if data:
                self.writer.write(data)
                await self.writer.drain()
            if self.writer.can_write_eof():
                self.writer.write_eof()  # half-close: the command reads EOF

    async def _inspect(self) -> dict:
        return await asyncio.to_thread(self.runtime.api.exec_inspect, self.exec_id)

    async def _find_pid(self) -> int | None:
        """The exec's host pid once it runs; None if it already finished."""
        delay = 0.001
        for _ in range(2000):
            info = await self._inspect()
            if info.get("Running") and info.get("Pid"):
                self.pid = int(info["Pid"])
                return self.pid
            if not info.get("Running") and info.get("ExitCode") is not None:
                return None
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.05)
        return None

    async def wait(self) -> int:
        pid = self.pid or await self._find_pid()
        if pid:
            await execution.wait_pid_exit(pid)
        delay = 0.001
        deadline = time.monotonic() + 30
        while True:
            info = await self._inspect()
            if not info.get("Running") and info.get("ExitCode") is not None:
                code = int(info["ExitCode"])
                break
            if time.monotonic() > deadline:
                return -1
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.05)
        if self.killed and 128 < code < 160:
            return -(code - 128)  # killed by our signal: -N, as for a local process
        return code

    async def kill(self) -> None:
        """SIGKILL to the exec's process group (engine execs lead their own session)."""
        self.killed = True
        pid = self.pid or await self._find_pid()
        if pid:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)

    async def close(self) -> None:
        self.demux.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self.demux
        self.writer.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.writer.wait_closed(), 1)


class DockerPty(_EngineExec):
    """A terminal exec (Tty: true): one raw byte stream, resized through the engine's API."""

    def __init__(self, runtime: DockerRuntime, exec_id: str, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter):
        super().__init__(runtime, exec_id, reader, writer, multiplexed=False)
        self.exit_code: int | None = None

    async def read(self, timeout: float | None = None) -> bytes:
        try:
            return await asyncio.wait_for(self.reader.read(execution.READ_SIZE), timeout)
        except TimeoutError:
            return b""
        except (ConnectionError, OSError):
            return b""

    async def write(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def resize(self, rows: int, cols: int) -> None:
        await asyncio.to_thread(self.runtime.api.exec_resize, self.exec_id, height=rows, width=cols)

    async def signal(self, signum: int) -> None:
        pid = self.pid or await self._find_pid()
        if pid:
            self.killed = True  # an exit of 128+N now means our signal N
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signum)

    async def wait(self, timeout: float | None = None) -> int | None:  # type: ignore[override]
        if self.exit_code is None:
            try:
                self.exit_code = await asyncio.wait_for(super().wait(), timeout)
            except TimeoutError:
                return None
        return self.exit_code

    async def close(self) -> None:
        if self.exit_code is None:
            info = await self._inspect()
            if info.get("Running"):
                await self.signal(signal.SIGKILL)
        await super().close()


class DockerRuntime:
    def __init__(self, state_dir: str | None = None, engine: str = "docker", base_url: str | None = None,
                 owner: str | None = None, sources: ImageSources | None = None):
        if engine not in DEFAULT_SOCKETS:
            raise InvalidRequest(f"engine must be docker or podman, not {engine!r}")
        try:
            import docker
        except ImportError as e:
            raise RuntimeUnavailable("the docker runtime needs the `docker` package: pip install docker") from e
        self.name = engine
        self.engine = engine
        self.sources = sources or ImageSources()
        self.state_dir = os.path.abspath(state_dir or "/var/lib/pomona")
        self.owner = owner or hashlib.sha256(f"pomona:{self.state_dir}".encode()).hexdigest()[:16]
        self.base_url = base_url or (os.environ.get("DOCKER_HOST") if engine == "docker" else None) \
            or DEFAULT_SOCKETS[engine]
        try:
            self.client = docker.DockerClient(base_url=self.base_url, timeout=120, max_pool_size=32)
            self.api = self.client.api
        except docker.errors.DockerException as e:
            raise RuntimeUnavailable(
                f"cannot reach the {engine} engine at {self.base_url}: {e}"
                + (" (start it with ./dev services)" if engine == "docker" else
                   " (start it with `podman system service --time=0 unix:///run/podman/podman.sock`)")
            ) from e
        self.errors = docker.errors
        self.sandboxes: dict[str, _Live] = {}
        self.me = (os.getpid(), start_time(os.getpid()))
        self._driver: str | None = None

    # -- lifecycle ----------------------------------------------------------------------------

    def _name(self, sandbox_id: str) -> str:
        return f"pomona-{self.owner[:12]}-{sandbox_id}"

    def _snapshot_ref(self, snapshot_id: str) -> str:
        return f"{SNAPSHOT_REPO}/{self.owner}:{snapshot_id}"

    async def start(self) -> None:
        """Adopt this owner's running containers; remove those with a broken record or dead."""
        containers = await self._call(self.client.containers.list, all=True,
                                      filters={"label": f"pomona.owner={self.owner}"})
        for container in containers:
            labels = container.labels or {}
            try:
                sandbox_id = labels["pomona.sandbox"]
                spec = SandboxSpec.model_validate_json(labels["pomona.spec"])
                created_at = float(labels["pomona.created"])
                creator = tuple(int(x) for x in labels.get("pomona.creator", "0:0").split(":"))
            except (KeyError, ValueError, TypeError):
                await self._remove_container(container.id)
                continue
            if sandbox_id in self.sandboxes:
                continue
            if creator != self.me and alive(*creator):
                continue  # another live process with this state dir made it: leave it to that one
            if container.status != "running":
                await self._remove_container(container.id)
                continue
            live = _Live(id=sandbox_id, container_id=container.id, spec=spec, created_at=created_at,
                         pid=int(container.attrs["State"]["Pid"]),
                         snapshot=labels.get("pomona.origin") or None)
            try:
                await self._hold(live)
                await self._prepare(live)
            except Exception:
                await self._remove_container(container.id)
                continue
            self.sandboxes[sandbox_id] = live

    async def close(self) -> None:
        for live in self.sandboxes.values():
            if live.gateway:
                await live.gateway.close()
                live.gateway = None
            live.release()
        with contextlib.suppress(Exception):
            self.client.close()

    async def _hold(self, live: _Live) -> None:
        """A pidfd on the container's init while the engine says that very pid runs it: from then
        on a dead init shows as `failed`, never `ready`. (A remote engine's pids are not ours.)"""
        try:
            pidfd = os.pidfd_open(live.pid)
        except OSError:
            return
        state = (await self._call(self.api.inspect_container, live.container_id)).get("State") or {}
        if state.get("Running") and int(state.get("Pid") or 0) == live.pid:
            live.pidfd = pidfd
        else:
            os.close(pidfd)
            raise SandboxFailed(f"sandbox {live.id!r}: its container stopped while it was being started")

    async def _call(self, fn, *args, **kwargs):
        """A blocking SDK call, off the event loop."""
        return await asyncio.to_thread(fn, *args, **kwargs)

    def _explain(self, error: Exception) -> str:
        text = getattr(error, "explanation", None) or str(error)
        return text.decode() if isinstance(text, bytes) else str(text)

    # -- create and delete --------------------------------------------------------------------

    async def create(self, sandbox_id: str, spec: SandboxSpec,
                     snapshot: SnapshotInfo | None = None) -> SandboxInfo:
        if sandbox_id in self.sandboxes:
            raise SandboxConflict(f"sandbox {sandbox_id!r} already exists")
        if snapshot:
            image = self._snapshot_ref(snapshot.id)
            try:
                await self._call(self.client.images.get, image)
            except self.errors.NotFound:
                raise SnapshotNotFound.of(snapshot.id) from None
        else:
            image = await self._image(spec.image)
        created_at = time.time()
        labels = {**spec.labels, "pomona.sandbox": sandbox_id, "pomona.owner": self.owner,
                  "pomona.spec": spec.model_dump_json(), "pomona.created": repr(created_at),
                  "pomona.creator": f"{self.me[0]}:{self.me[1]}",
                  "pomona.origin": snapshot.id if snapshot else ""}
        options: dict[str, Any] = dict(
            image=image, command=["sleep", "infinity"], name=self._name(sandbox_id), labels=labels,
            init=True, detach=True, hostname=sandbox_id[:63], environment=dict(spec.env),
            user="0:0", security_opt=["no-new-privileges"],
            network_mode="bridge" if spec.network == NetworkMode.full else "none")
        for m in spec.mounts:  # the engine would create a missing source, as root, on the host
            if not os.path.exists(m.host_path()):
                raise InvalidRequest(f"mount source {m.source} does not exist on the host")
        if spec.mounts:
            options["volumes"] = {m.host_path(): {"bind": m.target, "mode": "ro" if m.read_only else "rw"}
                                  for m in spec.mounts}
        limits = spec.limits
        if limits.cpu:
            options["nano_cpus"] = int(limits.cpu * 1e9)
        if limits.memory:
            options["mem_limit"] = options["memswap_limit"] = limits.memory
        if limits.pids:
            options["pids_limit"] = limits.pids
        if limits.disk:
            options["storage_opt"] = {"size": str(limits.disk)}
        try:
            try:
                container = await self._call(self.client.containers.create, **options)
            except self.errors.APIError as e:
                host_init = next((p for p in HOST_INITS if os.path.exists(p)), None)
                if "init binary not found" not in self._explain(e) or not host_init:
                    raise
                # Podman's Docker-compatible API looks for catatonit only (it ignores
                # containers.conf init_path): bring a static init from the host instead.
                options.update(init=False, command=[INIT_MOUNT, "--", "sleep", "infinity"],
                               volumes={**options.get("volumes", {}),
                                        os.path.realpath(host_init): {"bind": INIT_MOUNT, "mode": "ro"}})
                container = await self._call(self.client.containers.create, **options)
        except self.errors.APIError as e:
            if e.status_code == 409:
                raise SandboxConflict(f"sandbox {sandbox_id!r} is being created or removed") from None
            message = self._explain(e)
            if limits.disk and re.search(r"storage.?opt|quota|size", message, re.I):
                raise InvalidRequest(await self._no_disk_quota(message)) from None
            raise SandboxFailed(f"{self.engine} could not create sandbox {sandbox_id!r}: {message}") from None
        live: _Live | None = None
        try:
            await self._call(container.start)
            await self._call(container.reload)
            state = container.attrs["State"]
            if not state.get("Running"):
                logs = (await self._call(container.logs)).decode(errors="replace").strip()
                raise SandboxFailed(f"sandbox {sandbox_id!r} stopped at once (exit {state.get('ExitCode')}): "
                                    f"{state.get('Error') or logs or 'the image needs a `sleep` command'}")
            live = _Live(id=sandbox_id, container_id=container.id, spec=spec, created_at=created_at,
                         pid=int(state["Pid"]), snapshot=snapshot.id if snapshot else None)
            await self._hold(live)
            await self._setup_dirs(live)
            await self._prepare(live)
        except BaseException as e:
            if live and live.gateway:
                await live.gateway.close()
            if live:
                live.release()
            await asyncio.shield(self._remove_container(container.id))
            if isinstance(e, SandboxFailed | InvalidRequest | asyncio.CancelledError):
                raise
            if isinstance(e, self.errors.APIError):
                raise SandboxFailed(f"could not start sandbox {sandbox_id!r}: {self._explain(e)}") from None
            raise SandboxFailed(f"could not start sandbox {sandbox_id!r}: {e}") from e
        self.sandboxes[sandbox_id] = live
        return live.info(self.name)

    async def _no_disk_quota(self, message: str) -> str:
        info = await self._call(self.client.info)
        backing = dict(info.get("DriverStatus") or []).get("Backing Filesystem", "?")
        return (f"limits.disk is not supported by this {self.engine} engine: its storage driver "
                f"({info.get('Driver')} on {backing}) has no per-container size quota "
                f"(overlay2 needs xfs mounted with pquota). Engine said: {message}. "
                "Drop limits.disk, or use the local runtime, which has disk quotas everywhere.")

    async def _image(self, ref: str) -> str:
        if ref == "host":
            raise InvalidRequest(f"the {self.engine} runtime cannot use image='host' (the host's root "
                                 "filesystem); give an OCI image, or use the local runtime")
        self.sources.check(ref)
        try:
            await self._call(self.client.images.get, ref)
            return ref
        except self.errors.NotFound:
            pass
        except self.errors.APIError as e:
            raise ImageNotFound(f"image {ref!r}: {self._explain(e)}") from None
        registry = registry_host(ref) or "docker.io"  # where the engine would pull a bare name from
        if not self.sources.registry_allowed(registry):
            raise ImageNotFound(f"image {ref!r} is not in the {self.engine} engine's store, and pulls "
                                f"from {registry} are not allowed here")
        try:
            await self._call(self.client.images.pull, ref)
        except self.errors.APIError as e:
            raise ImageNotFound(f"image {ref!r} is not in the {self.engine} engine's store and "
                                f"could not be pulled: {self._explain(e)}") from None
        return ref

    async def _setup_dirs(self, live: _Live) -> None:
        """/tmp (1777), the workdir and $HOME owned by the sandbox user: one archive upload at /
        (the engine creates missing parents; existing directories get this owner and mode)."""
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
            tar.addfile(_tar_member("tmp", 0, 0o1777, tarfile.DIRTYPE))
            for path in (normalize(live.spec.workdir), SANDBOX_HOME):
                if path != "/":
                    tar.addfile(_tar_member(path.lstrip("/"), live.uid, 0o755, tarfile.DIRTYPE))
        await self._put(live, "/", buf.getvalue())

    async def _prepare(self, live: _Live) -> None:
        """What a process learns about a live sandbox: its shell, and its gateway listener."""
        bash = await self._stat_raw(live, "/bin/bash")
        live.shell = "/bin/bash" if bash and bash.type in ("file", "symlink") else "/bin/sh"
        if live.spec.network == NetworkMode.gateway and live.gateway is None:
            live.gateway = Gateway(f"/proc/{live.pid}/ns/net", live.spec.gateway_address)
            await live.gateway.start()

    async def _remove_container(self, container_id: str) -> bool:
        try:
            await self._call(self.api.remove_container, container_id, force=True, v=True)
            return True
        except self.errors.NotFound:
            return False
        except self.errors.APIError as e:
            if e.status_code == 409 and "in progress" in self._explain(e):
                return True  # another caller is removing it
            raise SandboxFailed(f"could not remove container {container_id[:12]}: {self._explain(e)}") from None

    async def delete(self, sandbox_id: str) -> bool:
        live = self.sandboxes.pop(sandbox_id, None)
        if live:
            live.release()
        if live and live.gateway:
            await live.gateway.close()
        removed = await self._remove_container(live.container_id if live else self._name(sandbox_id))
        return removed or live is not None

    async def list(self) -> list[SandboxInfo]:
        return [live.info(self.name) for live in self.sandboxes.values()]

    async def get(self, sandbox_id: str) -> SandboxInfo | None:
        live = self.sandboxes.get(sandbox_id)
        return None if live is None else live.info(self.name)

    def _get(self, sandbox_id: str) -> _Live:
        live = self.sandboxes.get(sandbox_id)
        if live is None:
            raise SandboxNotFound.of(sandbox_id)
        if live.dead:
            raise SandboxConflict(f"sandbox {sandbox_id!r} has failed (its init process died); delete it")
        return live

    # -- exec ---------------------------------------------------------------------------------

    async def _exec_create(self, sandbox_id: str, request: ExecRequest, tty: bool = False,
                           rows: int = 24, cols: int = 80) -> str:
        """Create (not start) an engine exec for a request; shared by exec and open_pty."""
        live = self._get(sandbox_id)
        user = request.user or live.spec.user
        cwd = normalize(request.cwd or live.spec.workdir)
        if isinstance(request.command, str):
            argv = [live.shell, *(["-l"] if request.login_shell else []), "-c", request.command]
        else:
            argv = list(request.command)
        env = {"HOME": "/root" if user == "root" else SANDBOX_HOME, "USER": user, "LOGNAME": user,
               "PWD": cwd, "LANG": "C.UTF-8", **live.spec.env, **request.env}
        if tty:
            # the engine's API (1.41) sets a size only once the process runs: start the command
            # behind `stty` so it sees the right size from its first line
            argv = ["/bin/sh", "-c", 'stty rows "$1" cols "$2" 2>/dev/null; shift 2; exec "$@"',
                    "pomona-pty", str(rows), str(cols), *argv]
            env.setdefault("TERM", "xterm-256color")
        try:
            created = await self._call(
                self.api.exec_create, live.container_id, argv, stdout=True, stderr=True,
                stdin=tty or request.stdin is not None, tty=tty,
                environment=[f"{k}={v}" for k, v in env.items()], workdir=cwd,
                user="0:0" if user == "root" else f"{SANDBOX_UID}:{SANDBOX_UID}")
        except self.errors.APIError as e:
            if e.status_code == 404:
                raise SandboxFailed(f"sandbox {sandbox_id!r}: its container is gone") from None
            raise SandboxFailed(f"sandbox {sandbox_id!r}: {self._explain(e)}") from None
        return created["Id"]

    async def exec(self, sandbox_id: str, request: ExecRequest) -> AsyncGenerator[ExecChunk | ExecResult, None]:
        command = await self._exec_start(await self._exec_create(sandbox_id, request))
        stdin = request.stdin.encode() if request.stdin is not None else None
        async with contextlib.aclosing(execution.stream(
                command, stdin=stdin, timeout=request.timeout, cap=request.output_cap)) as items:
            async for item in items:
                yield item

    async def open_pty(self, sandbox_id: str, request: ExecRequest, rows: int = 24,
                       cols: int = 80) -> DockerPty:
        exec_id = await self._exec_create(sandbox_id, request, tty=True, rows=rows, cols=cols)
        reader, writer = await self._start_stream(exec_id, tty=True)
        return DockerPty(self, exec_id, reader, writer)

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        url = self.base_url
        if url.startswith("unix://"):
            return await asyncio.open_unix_connection(url[len("unix://"):])
        match = re.match(r"(?:tcp|http)://([^:/]+)(?::(\d+))?", url)
        if not match:
            raise RuntimeUnavailable(f"exec streaming supports unix:// and tcp:// engines, not {url}")
        return await asyncio.open_connection(match.group(1), int(match.group(2) or 2375))

    async def _exec_start(self, exec_id: str) -> _EngineExec:
        reader, writer = await self._start_stream(exec_id)
        return _EngineExec(self, exec_id, reader, writer)

    async def _start_stream(self, exec_id: str, tty: bool = False
                            ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """POST /exec/{id}/start with Upgrade: tcp, read the HTTP head, keep the raw stream."""
        reader, writer = await self._connect()
        body = b'{"Detach":false,"Tty":%s}' % (b"true" if tty else b"false")
        writer.write(
            f"POST /v{self.api.api_version}/exec/{exec_id}/start HTTP/1.1\r\nHost: docker\r\n"
            f"Content-Type: application/json\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n"
            f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        try:
            await writer.drain()
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head.split(b" ", 2)[1])
            if status >= 400:
                length = re.search(rb"(?i)content-length:\s*(\d+)", head)
                text = await (reader.readexactly(int(length.group(1))) if length else reader.read(65536))
                raise SandboxFailed(f"{self.engine} exec start failed ({status}): {text.decode(errors='replace')}")
        except BaseException:
            writer.close()
            raise
        return reader, writer

    async def _run(self, live: _Live, argv: list[str], timeout: float = 120) -> ExecResult:
        """A helper command as root, for the files API."""
        return await collect(self.exec(live.id, ExecRequest(command=argv, user="root", cwd="/",
                                                            timeout=timeout)))

    # -- files --------------------------------------------------------------------------------

    def _archive_url(self, live: _Live) -> str:
        return self.api._url("/containers/{0}/archive", live.container_id)

    def _file_error(self, response: Any, path: str) -> Exception:
        try:
            message = response.json().get("message", response.text)
        except ValueError:
            message = response.text
        if response.status_code == 404 and re.search(r"no such container", message, re.I):
            return SandboxFailed(f"the sandbox's container is gone: {message}")
        if response.status_code == 404:
            return FileNotFoundInSandbox(f"{path}: no such file or directory in the sandbox")
        if response.status_code == 400 and "not a directory" in message.lower():
            return InvalidRequest(f"a component of {path} is not a directory")
        if response.status_code in (400, 403):
            return InvalidRequest(f"{path}: {message}")
        return SandboxFailed(f"{path}: {self.engine} said ({response.status_code}) {message}")

    async def _stat_raw(self, live: _Live, path: str) -> _Stat | None:
        def head() -> _Stat | None:
            response = self.api.head(self._archive_url(live), params={"path": path})
            if response.status_code == 404:
                return None
            if response.status_code >= 300:
                raise self._file_error(response, path)
            header = response.headers.get("X-Docker-Container-Path-Stat")
            if not header:
                raise SandboxFailed(f"{path}: the {self.engine} engine sent no stat header")
            return _decode_stat(header)

        return await self._call(head)

    async def _resolve(self, live: _Live, path: str) -> tuple[str, _Stat]:
        """Follow a final symlink (the engine resolves it inside the container's root)."""
        for _ in range(MAX_LINKS):
            info = await self._stat_raw(live, path)
            if info is None:
                raise FileNotFoundInSandbox(f"{path}: no such file or directory in the sandbox")
            if info.type != "symlink":
                return path, info
            target = info.link_target or ""
            if not target.startswith("/"):
                target = posixpath.join(posixpath.dirname(path), target)
            path = normalize(target)
        raise PathOutsideSandbox(f"{path}: too many levels of symbolic links")

    async def _get_tar(self, live: _Live, path: str) -> bytes:
        def get() -> bytes:
            response = self.api.get(self._archive_url(live), params={"path": path}, stream=True)
            try:
                if response.status_code >= 300:
                    raise self._file_error(response, path)
                return b"".join(response.iter_content(1 << 20))
            finally:
                response.close()

        return await self._call(get)

    async def _put(self, live: _Live, directory: str, data: bytes) -> None:
        def put() -> None:
            response = self.api.put(self._archive_url(live), params={"path": directory}, data=data)
            if response.status_code >= 300:
                raise self._file_error(response, directory)

        await self._call(put)

    async def _ensure_dir(self, live: _Live, path: str, depth: int = 0) -> None:
        """mkdir -p through the archive API: missing components owned by the sandbox user."""
        if depth > MAX_LINKS:
            raise PathOutsideSandbox(f"{path}: too many levels of symbolic links")
        info = await self._stat_raw(live, path)
        if info is None:
            parent, name = posixpath.split(path)
            await self._ensure_dir(live, parent, depth + 1)
            buf = io.BytesIO()
            with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
                tar.addfile(_tar_member(name, live.uid, 0o755, tarfile.DIRTYPE))
            await self._put(live, parent, buf.getvalue())
        elif info.type == "symlink":
            resolved, _ = await self._resolve(live, path) if info.link_target else (path, info)
            await self._ensure_dir(live, resolved, depth + 1)
        elif info.type != "directory":
            raise InvalidRequest(f"a component of {path} is not a directory")

    async def read_file(self, sandbox_id: str, path: str) -> bytes:
        live = self._get(sandbox_id)
        path, info = await self._resolve(live, normalize(path))
        if info.type != "file":
            if info.type == "directory":
                raise InvalidRequest(f"{path} is a directory")
            raise InvalidRequest(f"{path} is not a regular file")
        data = await self._get_tar(live, path)
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
            for member in tar:
                if member.isfile():
                    f = tar.extractfile(member)
                    return f.read() if f else b""
        raise InvalidRequest(f"{path} is not a regular file")

    async def write_file(self, sandbox_id: str, path: str, data: bytes, mode: int = 0o644) -> None:
        live = self._get(sandbox_id)
        path = normalize(path)
        if posixpath.basename(path) == "":
            raise InvalidRequest(f"{path!r} names a directory, not a file")
        existing = await self._stat_raw(live, path)
        if existing and existing.type == "symlink":
            with contextlib.suppress(FileNotFoundInSandbox):
                path, existing = await self._resolve(live, path)
        if existing and existing.type == "directory":
            raise InvalidRequest(f"{path} is a directory")
        if existing and existing.type == "other":
            raise InvalidRequest(f"{path} is not a regular file (a FIFO, socket or device)")
        parent, name = posixpath.split(path)
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
            tar.addfile(_tar_member(name, live.uid, mode & 0o7777, size=len(data)), io.BytesIO(data))
        try:
            await self._put(live, parent, buf.getvalue())
        except FileNotFoundInSandbox:
            await self._ensure_dir(live, parent)
            await self._put(live, parent, buf.getvalue())

    async def stat(self, sandbox_id: str, path: str) -> FileInfo:
        live = self._get(sandbox_id)
        path = normalize(path)
        info = await self._stat_raw(live, path)
        if info is None:
            raise FileNotFoundInSandbox(f"{path}: no such file or directory in the sandbox")
        return info.info(path)

    async def list_files(self, sandbox_id: str, path: str) -> list[FileInfo]:
        live = self._get(sandbox_id)
        path = normalize(path)
        if live.gnu_find is not False:
            result = await self._run(live, [
                "find", path.rstrip("/") + "/", "-mindepth", "1", "-maxdepth", "1",
                "-printf", r"%f\0%y\0%s\0%m\0%T@\0"])
            if result.exit_code == 0:
                live.gnu_find = True
                return self._parse_find(path, result.stdout)
            if result.exit_code in (126, 127) or "printf" in result.stderr or "unknown" in result.stderr:
                live.gnu_find = False
        return await self._list_by_archive(live, path)

    @staticmethod
    def _parse_find(path: str, output: str) -> list[FileInfo]:
        fields = output.split("\0")
        kinds = {"f": "file", "d": "directory", "l": "symlink"}
        entries = []
        for i in range(0, len(fields) - 4, 5):
            name, kind, size, mode, mtime = fields[i:i + 5]
            entries.append(FileInfo(name=name, path=posixpath.join(path, name),
                                    type=kinds.get(kind, "other"),  # type: ignore[arg-type]
                                    size=int(size), mode=int(mode, 8), modified=float(mtime)))
        return sorted(entries, key=lambda e: e.name)

    async def _list_by_archive(self, live: _Live, path: str) -> list[FileInfo]:
        path, info = await self._resolve(live, path)
        if info.type != "directory":
            raise InvalidRequest(f"a component of {path} is not a directory")
        data = await self._get_tar(live, path)
        entries: dict[str, FileInfo] = {}
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
            for member in tar:
                parts = [p for p in member.name.split("/") if p not in ("", ".")]
                if path != "/":
                    parts = parts[1:]  # the archive's top entry is the directory itself
                if len(parts) != 1:
                    continue
                kind = ("directory" if member.isdir() else "symlink" if member.issym()
                        else "file" if member.isreg() or member.islnk() else "other")
                entries[parts[0]] = FileInfo(
                    name=parts[0], path=posixpath.join(path, parts[0]), type=kind,  # type: ignore[arg-type]
                    size=member.size if kind == "file" else 0, mode=member.mode & 0o7777,
                    modified=float(member.mtime))
        return sorted(entries.values(), key=lambda e: e.name)

    async def remove(self, sandbox_id: str, path: str, recursive: bool = False) -> None:
        live = self._get(sandbox_id)
        path = normalize(path)
        if path == "/":
            raise InvalidRequest("refusing to remove the sandbox's root")
        info = await self._stat_raw(live, path)
        if info is None:
            raise FileNotFoundInSandbox(f"{path}: no such file or directory in the sandbox")
        if info.type == "directory":
            argv = ["rm", "-rf", "--", path] if recursive else ["rmdir", "--", path]
        else:
            argv = ["rm", "-f", "--", path]
        result = await self._run(live, argv)
        if result.exit_code:
            message = (result.stderr or result.stdout).strip()
            if "not empty" in message.lower():
                raise InvalidRequest(f"{path} is a non-empty directory; pass recursive=True")
            raise SandboxFailed(f"could not remove {path}: {message}")

    async def get_archive(self, sandbox_id: str, path: str) -> bytes:
        """The engine's archive, re-rooted like the local runtime's: a directory's entries under
        "./", a file under its base name."""
        live = self._get(sandbox_id)
        path, info = await self._resolve(live, normalize(path))
        if info.type == "other":
            raise InvalidRequest(f"{path} is not a regular file (a FIFO, socket or device); the files "
                                 "API serves regular files, directories and symlinks only")
        data = await self._get_tar(live, path)
        out = io.BytesIO()
        base = posixpath.basename(path)
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as src, \
                tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as dst:
            for member in src:
                if info.type == "directory":
                    parts = [p for p in member.name.split("/") if p not in ("", ".")]
                    if path != "/" and parts and parts[0] == base:
                        parts = parts[1:]
                    member.name = "/".join([".", *parts])
                    if member.islnk():
                        link = [p for p in member.linkname.split("/") if p not in ("", ".")]
                        if path != "/" and link and link[0] == base:
                            link = link[1:]
                        member.linkname = "/".join([".", *link])
                dst.addfile(member, src.extractfile(member) if member.isreg() else None)
        return out.getvalue()

    async def put_archive(self, sandbox_id: str, path: str, tar: bytes) -> None:
        """Unpack a tar at path: members may not leave it (absolute names, `..`), devices and
        fifos are skipped, hard links become copies, and everything belongs to the sandbox user."""
        live = self._get(sandbox_id)
        path = normalize(path)
        out = io.BytesIO()
        try:
            src = tarfile.open(fileobj=io.BytesIO(tar), mode="r:*")
        except tarfile.TarError as e:
            raise InvalidRequest(f"not a tar archive: {e}") from None
        declared: dict[str, str] = {}  # what the archive itself made so far: path -> "dir"/"link"/...
        check: set[str] = set()  # existing directories members go through: must not be symlinks
        with src, tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as dst:
            for member in src:
                parts = [p for p in member.name.split("/") if p not in ("", ".")]
                if member.name.startswith("/") or ".." in parts:
                    raise PathOutsideSandbox(f"archive member {member.name!r} points outside the target")
                if not parts:
                    continue
                for i in range(1, len(parts)):
                    prefix = "/".join(parts[:i])
                    kind = declared.get(prefix)
                    if kind is None:
                        check.add(prefix)
                    elif kind != "dir":
                        raise PathOutsideSandbox(
                            f"archive member {member.name!r} goes through {prefix!r}, which is not a directory")
                declared["/".join(parts)] = ("dir" if member.isdir() else "link" if member.issym()
                                             else "file")
                data = None
                if member.isdir():
                    clean = _tar_member("/".join(parts), live.uid, member.mode & 0o777, tarfile.DIRTYPE)
                elif member.issym():
                    clean = _tar_member("/".join(parts), live.uid, 0o777, tarfile.SYMTYPE)
                    clean.linkname = member.linkname
                elif member.isfile() or member.islnk():
                    data = src.extractfile(member)
                    content = data.read() if data else b""
                    clean = _tar_member("/".join(parts), live.uid, member.mode & 0o777, size=len(content))
                    data = io.BytesIO(content)
                else:
                    continue
                clean.mtime = member.mtime
                dst.addfile(clean, data)
        await self._ensure_dir(live, path)
        resolved, _ = await self._resolve(live, path)
        await self._check_no_links(live, resolved, check)
        await self._put(live, resolved, out.getvalue())

    async def _check_no_links(self, live: _Live, base: str, prefixes: set[str]) -> None:
        """Refuse an upload whose members would pass through a symlink already in the sandbox
        (the engine would follow it, inside the container; the contract is to never follow)."""
        missing: list[str] = []
        for prefix in sorted(prefixes, key=lambda p: p.count("/")):
            if any(prefix.startswith(m + "/") for m in missing):
                continue  # under a directory that does not exist yet: nothing to follow
            info = await self._stat_raw(live, posixpath.join(base, prefix))
            if info is None:
                missing.append(prefix)
            elif info.type == "symlink":
                raise PathOutsideSandbox(f"{posixpath.join(base, prefix)} is a symlink; an upload "
                                         "never writes through links")
            elif info.type != "directory":
                raise InvalidRequest(f"{posixpath.join(base, prefix)} is not a directory")

    # -- snapshot and fork --------------------------------------------------------------------

    async def snapshot(self, sandbox_id: str, snapshot_id: str) -> SnapshotInfo:
        live = self._get(sandbox_id)
        ref = self._snapshot_ref(snapshot_id)
        with contextlib.suppress(self.errors.NotFound):
            await self._call(self.client.images.get, ref)
            raise SandboxConflict(f"snapshot {snapshot_id!r} already exists")
        info = SnapshotInfo(id=snapshot_id, sandbox_id=sandbox_id, runtime=self.name, spec=live.spec,
                            created_at=time.time())
        # LABEL changes rather than conf={"Labels": ...}: Podman's compat commit ignores conf.
        # The record is base64 so no quoting in it can break the instruction.
        labels = {"pomona.snapshot": snapshot_id, "pomona.snapshot.owner": self.owner,
                  "pomona.snapshot.info": base64.b64encode(info.model_dump_json().encode()).decode()}
        repository, tag = ref.rsplit(":", 1)
        try:
            await self._call(self.api.commit, live.container_id, repository=repository, tag=tag,
                             changes=[f"LABEL {k}={v}" for k, v in labels.items()], pause=True)
        except self.errors.APIError as e:
            raise SandboxFailed(f"snapshot of {sandbox_id!r} failed: {self._explain(e)}") from None
        return info

    async def list_snapshots(self) -> list[SnapshotInfo]:
        images = await self._call(self.api.images, filters={"label": f"pomona.snapshot.owner={self.owner}"})
        found = []
        for image in images:
            labels = image.get("Labels") or {}
            with contextlib.suppress(KeyError, ValueError):
                info = SnapshotInfo.model_validate_json(base64.b64decode(labels["pomona.snapshot.info"]))
                ref = self._snapshot_ref(info.id)
                # Podman names it docker.io/<ref> or localhost/<ref>
                if any(tag == ref or tag.endswith("/" + ref) for tag in image.get("RepoTags") or []):
                    found.append(info)
        return found

    async def delete_snapshot(self, snapshot_id: str) -> bool:
        ref = self._snapshot_ref(snapshot_id)
        try:
            await self._call(self.api.remove_image, ref, force=False, noprune=False)
            return True
        except self.errors.NotFound:
            return False
        except self.errors.APIError as e:
            if e.status_code == 409:
                raise SandboxConflict(
                    f"snapshot {snapshot_id!r} is in use (a sandbox or another snapshot is built on it); "
                    f"delete those first. {self.engine} said: {self._explain(e)}") from None
            raise SandboxFailed(f"could not delete snapshot {snapshot_id!r}: {self._explain(e)}") from None

    # -- network ------------------------------------------------------------------------------

    async def open_connection(self, sandbox_id: str, port: int):
        live = self._get(sandbox_id)
        return await open_connection_in(f"/proc/{live.pid}/ns/net", port)
