"""`DockerRuntime`: the Runtime contract over one Docker (or Podman) engine; the package's
docstring (runtimes/docker/__init__.py) says how a sandbox maps onto a container."""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import hashlib
import os
import re
import time
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ParamSpec, TypeVar

from pomona.errors import (
    ImageNotFound,
    InvalidRequest,
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
from pomona.orchestrator.runtimes import execution, hardening
from pomona.orchestrator.runtimes.docker import containers, gvisor
from pomona.orchestrator.runtimes.docker.engine import DockerPty, EngineExec, attach
from pomona.orchestrator.runtimes.docker.files import ContainerFS
from pomona.orchestrator.runtimes.docker.snapshots import Commits
from pomona.orchestrator.sources import ImageSources, registry_host
from pomona.orchestrator.types import (
    SANDBOX_HOME,
    SANDBOX_UID,
    ExecChunk,
    ExecRequest,
    ExecResult,
    FileInfo,
    Limits,
    NetworkMode,
    SandboxInfo,
    SandboxSpec,
    SnapshotInfo,
)

if TYPE_CHECKING:
    from docker.models.containers import Container

P = ParamSpec("P")
R = TypeVar("R")

DEFAULT_SOCKETS = {
    "docker": "unix:///var/run/docker.sock",
    "podman": "unix:///run/podman/podman.sock",
}


def _container_id(container: Container) -> str:
    """The id of a container the engine listed or created. docker-py types it optional (a model
    built from partial attributes may lack one); the engine's answers always carry it."""
    if container.id is None:
        raise SandboxFailed("the engine sent a container without an id")
    return container.id


@dataclass
class _Live:
    """A container this process serves as a sandbox: its record (also in its labels), its
    init's pidfd, its gateway and its files."""

    id: str
    container_id: str
    spec: SandboxSpec
    created_at: float
    pid: int
    shell: str = "/bin/sh"
    snapshot: str | None = None
    gateway: Gateway | None = None
    pidfd: int | None = None  # the container's init, on a host-local engine
    fs: ContainerFS = field(init=False)  # set by DockerRuntime._live

    @property
    def uid(self) -> int:
        return 0 if self.spec.user == "root" else SANDBOX_UID

    @property
    def dead(self) -> bool:
        return self.pidfd is not None and exited(self.pidfd)

    def info(self, runtime: str) -> SandboxInfo:
        dead = self.dead
        return SandboxInfo(
            id=self.id,
            runtime=runtime,
            status="failed" if dead else "ready",
            spec=self.spec,
            created_at=self.created_at,
            snapshot=self.snapshot,
            message="the sandbox's init process died" if dead else None,
        )

    def release(self) -> None:
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None


class DockerRuntime:
    def __init__(
        self,
        state_dir: str | None = None,
        engine: str = "docker",
        base_url: str | None = None,
        owner: str | None = None,
        sources: ImageSources | None = None,
        isolation: str = "default",
        gvisor_runtime: str = "runsc",
    ):
        """`isolation="gvisor"` runs every sandbox under gVisor (gvisor.py), through the OCI
        runtime the engine knows as `gvisor_runtime`."""
        if engine not in DEFAULT_SOCKETS:
            raise InvalidRequest(f"engine must be docker or podman, not {engine!r}")
        try:
            import docker
        except ImportError as e:
            raise RuntimeUnavailable(
                "the docker runtime needs the `docker` package: pip install docker"
            ) from e
        self.name = engine
        self.engine = engine
        self.isolation = gvisor.check_isolation(isolation)
        self.oci_runtime = gvisor_runtime if isolation == "gvisor" else None
        self.sources = sources or ImageSources()
        self.state_dir = os.path.abspath(state_dir or "/var/lib/pomona")
        self.owner = owner or hashlib.sha256(f"pomona:{self.state_dir}".encode()).hexdigest()[:16]
        self.base_url = (
            base_url
            or (os.environ.get("DOCKER_HOST") if engine == "docker" else None)
            or DEFAULT_SOCKETS[engine]
        )
        try:
            self.client = docker.DockerClient(base_url=self.base_url, timeout=120, max_pool_size=32)
            self.api = self.client.api
        except docker.errors.DockerException as e:
            raise RuntimeUnavailable(
                f"cannot reach the {engine} engine at {self.base_url}: {e}"
                + (
                    " (start it with ./dev services)"
                    if engine == "docker"
                    else " (start it with `podman system service --time=0 unix:///run/podman/podman.sock`)"
                )
            ) from e
        self.errors = docker.errors
        self.snapshots = Commits(
            self.name, self.owner, engine, self.client, self.errors, self._call, self._explain
        )
        self.sandboxes: dict[str, _Live] = {}
        self.me = (os.getpid(), start_time(os.getpid()))
        self._disk_quota = False  # known after start(): the storage driver can cap a container

    # -- lifecycle ----------------------------------------------------------------------------

    def _name(self, sandbox_id: str) -> str:
        return f"pomona-{self.owner[:12]}-{sandbox_id}"

    async def start(self) -> None:
        """Adopt this owner's running containers; remove those with a broken record or dead."""
        info = await self._call(self.client.info)
        if self.oci_runtime:
            gvisor.check_registered(info, self.oci_runtime, self.engine)
        self._disk_quota = containers.caps_disks(info)
        found = await self._call(
            self.client.containers.list, all=True, filters={"label": f"pomona.owner={self.owner}"}
        )
        for container in found:
            labels = container.labels or {}
            try:
                sandbox_id = labels["pomona.sandbox"]
                spec = SandboxSpec.model_validate_json(labels["pomona.spec"])
                created_at = float(labels["pomona.created"])
                creator = tuple(int(x) for x in labels.get("pomona.creator", "0:0").split(":"))
            except (KeyError, ValueError, TypeError):
                await self._remove_container(_container_id(container))
                continue
            if sandbox_id in self.sandboxes:
                continue
            if creator != self.me and alive(*creator):
                continue  # another live process with this state dir made it: leave it to that one
            if container.status != "running":
                await self._remove_container(_container_id(container))
                continue
            live = self._live(
                _Live(
                    id=sandbox_id,
                    container_id=_container_id(container),
                    spec=spec,
                    created_at=created_at,
                    pid=int(container.attrs["State"]["Pid"]),
                    snapshot=labels.get("pomona.origin") or None,
                )
            )
            try:
                await self._hold(live)
                await self._prepare(live)
            except Exception:
                await self._remove_container(_container_id(container))
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
            raise SandboxFailed(
                f"sandbox {live.id!r}: its container stopped while it was being started"
            )

    def _live(self, live: _Live) -> _Live:
        live.fs = ContainerFS(
            self.api, live.container_id, live.uid, self.engine, lambda argv: self._run(live, argv)
        )
        return live

    async def _call(self, fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        """A blocking SDK call, off the event loop."""
        return await asyncio.to_thread(fn, *args, **kwargs)

    def _explain(self, error: Exception) -> str:
        text = getattr(error, "explanation", None) or str(error)
        return text.decode() if isinstance(text, bytes) else str(text)

    # -- create and delete --------------------------------------------------------------------

    async def create(
        self, sandbox_id: str, spec: SandboxSpec, snapshot: SnapshotInfo | None = None
    ) -> SandboxInfo:
        if sandbox_id in self.sandboxes:
            raise SandboxConflict(f"sandbox {sandbox_id!r} already exists")
        if snapshot:
            image = self.snapshots.ref(snapshot.id)
            try:
                await self._call(self.client.images.get, image)
            except self.errors.NotFound:
                raise SnapshotNotFound.of(snapshot.id) from None
        else:
            image = await self._image(spec.image)
        created_at = time.time()
        labels = containers.labels(sandbox_id, spec, self.owner, self.me, created_at, snapshot)
        options = containers.create_options(
            self._name(sandbox_id),
            sandbox_id,
            spec,
            image,
            labels,
            self._seccomp(),
            self.oci_runtime,
            gvisor.gate_mounts(self.state_dir) if self.oci_runtime else None,
        )
        container = await self._create_container(sandbox_id, spec, options)
        try:
            live = await self._start(container, sandbox_id, spec, created_at, snapshot)
        except BaseException as e:
            await asyncio.shield(self._remove_container(_container_id(container)))
            if isinstance(e, SandboxFailed | InvalidRequest | asyncio.CancelledError):
                raise
            if isinstance(e, self.errors.APIError):
                raise SandboxFailed(
                    f"could not start sandbox {sandbox_id!r}: {self._explain(e)}"
                ) from None
            raise SandboxFailed(f"could not start sandbox {sandbox_id!r}: {e}") from e
        self.sandboxes[sandbox_id] = live
        return live.info(self.name)

    async def _create_container(
        self, sandbox_id: str, spec: SandboxSpec, options: containers.ContainerOptions
    ) -> Container:
        """The container, created (not started); the engine's refusals in words."""
        try:
            try:
                return await self._call(self._create_from, options)
            except self.errors.APIError as e:
                host_init = next((p for p in containers.HOST_INITS if os.path.exists(p)), None)
                if "init binary not found" not in self._explain(e) or not host_init:
                    raise
                return await self._call(self._create_from, options.with_host_init(host_init))
        except self.errors.APIError as e:
            if e.status_code == 409:
                raise SandboxConflict(
                    f"sandbox {sandbox_id!r} is being created or removed"
                ) from None
            message = self._explain(e)
            if spec.limits.disk and re.search(r"storage.?opt|quota|size", message, re.I):
                info = await self._call(self.client.info)
                raise InvalidRequest(containers.no_disk_quota(self.engine, info, message)) from None
            raise SandboxFailed(
                f"{self.engine} could not create sandbox {sandbox_id!r}: {message}"
            ) from None

    def _create_from(self, options: containers.ContainerOptions) -> Container:
        host_config = self.api.create_host_config(**options.host)
        host_config.update(options.extra_host)
        created = self.api.create_container(host_config=host_config, **options.create)
        return self.client.containers.prepare_model({"Id": created["Id"]})

    async def _start(
        self,
        container: Container,
        sandbox_id: str,
        spec: SandboxSpec,
        created_at: float,
        snapshot: SnapshotInfo | None,
    ) -> _Live:
        """Start the container and hold it: its init's pidfd, its workdir, its gateway."""
        if self.oci_runtime:
            with contextlib.suppress(
                self.errors.APIError
            ):  # an image without /tmp: nothing to keep
                await self._call(
                    self.api.put_archive, _container_id(container), "/tmp", gvisor.tmp_keeper()
                )
        await self._call(container.start)
        await self._call(container.reload)
        state = container.attrs["State"]
        if not state.get("Running"):
            logs = (await self._call(container.logs)).decode(errors="replace").strip()
            raise SandboxFailed(
                f"sandbox {sandbox_id!r} stopped at once (exit {state.get('ExitCode')}): "
                f"{state.get('Error') or logs or 'the image needs a `sleep` command'}"
            )
        live = self._live(
            _Live(
                id=sandbox_id,
                container_id=_container_id(container),
                spec=spec,
                created_at=created_at,
                pid=int(state["Pid"]),
                snapshot=snapshot.id if snapshot else None,
            )
        )
        try:
            await self._hold(live)
            await live.fs.make_dirs(live.spec.workdir)
            await self._prepare(live)
        except BaseException:
            if live.gateway:
                await live.gateway.close()
            live.release()
            raise
        return live

    def limit_defaults(self, defaults: Limits) -> Limits:
        """All of them, but a disk limit only where the storage driver caps containers."""
        return defaults if self._disk_quota else defaults.model_copy(update={"disk": None})

    def _seccomp(self) -> str:
        """Pomona's profile as this engine takes it: Docker reads the JSON itself, Podman's
        compatible API only a path (a file beside the state dir's other state)."""
        if self.engine == "podman":
            return hardening.seccomp_file(self.state_dir)
        return hardening.seccomp_json()

    async def _image(self, ref: str) -> str:
        containers.check_image(self.engine, ref)
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
            raise ImageNotFound(
                f"image {ref!r} is not in the {self.engine} engine's store, and pulls "
                f"from {registry} are not allowed here"
            )
        try:
            await self._call(self.client.images.pull, ref)
        except self.errors.APIError as e:
            raise ImageNotFound(
                f"image {ref!r} is not in the {self.engine} engine's store and "
                f"could not be pulled: {self._explain(e)}"
            ) from None
        return ref

    async def _prepare(self, live: _Live) -> None:
        """What a process learns about a live sandbox: its shell, and its gateway listener."""
        bash = await live.fs.lookup("/bin/bash")
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
            raise SandboxFailed(
                f"could not remove container {container_id[:12]}: {self._explain(e)}"
            ) from None

    async def delete(self, sandbox_id: str) -> bool:
        live = self.sandboxes.pop(sandbox_id, None)
        if live:
            live.release()
        if live and live.gateway:
            await live.gateway.close()
        removed = await self._remove_container(
            live.container_id if live else self._name(sandbox_id)
        )
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
            raise SandboxConflict(
                f"sandbox {sandbox_id!r} has failed (its init process died); delete it"
            )
        return live

    # -- exec ---------------------------------------------------------------------------------

    async def _exec_create(
        self,
        sandbox_id: str,
        request: ExecRequest,
        tty: bool = False,
        rows: int = 24,
        cols: int = 80,
        marker: str | None = None,
    ) -> str:
        """Create (not start) an engine exec for a request; shared by exec and open_pty.
        `marker` tags every process of the exec (gvisor.py)."""
        live = self._get(sandbox_id)
        user = request.user or live.spec.user
        cwd = normalize(request.cwd or live.spec.workdir)
        if isinstance(request.command, str):
            argv = [live.shell, *(["-l"] if request.login_shell else []), "-c", request.command]
        else:
            argv = list(request.command)
        env = {
            "HOME": "/root" if user == "root" else SANDBOX_HOME,
            "USER": user,
            "LOGNAME": user,
            "PWD": cwd,
            "LANG": "C.UTF-8",
            **live.spec.env,
            **request.env,
            **({gvisor.MARKER: marker} if marker else {}),
        }
        if tty:
            # the engine's API (1.41) sets a size only once the process runs: start the command
            # behind `stty` so it sees the right size from its first line
            argv = [
                "/bin/sh",
                "-c",
                'stty rows "$1" cols "$2" 2>/dev/null; shift 2; exec "$@"',
                "pomona-pty",
                str(rows),
                str(cols),
                *argv,
            ]
            env.setdefault("TERM", "xterm-256color")
        if marker:  # gVisor: the gate takes it in as runc would have (gvisor.py)
            argv = gvisor.gated(argv, user)
        try:
            created = await self._call(
                self.api.exec_create,
                live.container_id,
                argv,
                stdout=True,
                stderr=True,
                stdin=tty or request.stdin is not None,
                tty=tty,
                environment=[f"{k}={v}" for k, v in env.items()],
                workdir=cwd,
                user="0:0" if user == "root" or marker else f"{SANDBOX_UID}:{SANDBOX_UID}",
            )
        except self.errors.APIError as e:
            if e.status_code == 404:
                raise SandboxFailed(f"sandbox {sandbox_id!r}: its container is gone") from None
            raise SandboxFailed(f"sandbox {sandbox_id!r}: {self._explain(e)}") from None
        return created["Id"]

    async def exec(
        self, sandbox_id: str, request: ExecRequest
    ) -> AsyncGenerator[ExecChunk | ExecResult, None]:
        marker, signal_inside = self._signalling(sandbox_id)
        exec_id = await self._exec_create(sandbox_id, request, marker=marker)
        command = EngineExec(
            self.api, exec_id, *await self._attach(exec_id), signal_inside=signal_inside
        )
        stdin = request.stdin.encode() if request.stdin is not None else None
        async with contextlib.aclosing(
            execution.stream(command, stdin=stdin, timeout=request.timeout, cap=request.output_cap)
        ) as items:
            async for item in items:
                yield item

    async def open_pty(
        self, sandbox_id: str, request: ExecRequest, rows: int = 24, cols: int = 80
    ) -> DockerPty:
        marker, signal_inside = self._signalling(sandbox_id)
        exec_id = await self._exec_create(
            sandbox_id, request, tty=True, rows=rows, cols=cols, marker=marker
        )
        return DockerPty(self.api, exec_id, *await self._attach(exec_id, tty=True), signal_inside)

    def _signalling(self, sandbox_id: str) -> tuple[str | None, gvisor.Signaller | None]:
        """Under gVisor, an exec's marker and how to signal its processes from inside."""
        if self.oci_runtime is None:
            return None, None
        live, marker = self._get(sandbox_id), gvisor.new_marker()
        return marker, gvisor.signaller(lambda argv: self._run(live, argv, timeout=60), marker)

    async def _attach(
        self, exec_id: str, tty: bool = False
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await attach(self.base_url, self.api.api_version, exec_id, self.engine, tty)

    async def _run(self, live: _Live, argv: builtins.list[str], timeout: float = 120) -> ExecResult:
        """A helper command as root, for the files API (ContainerFS)."""
        return await collect(
            self.exec(live.id, ExecRequest(command=argv, user="root", cwd="/", timeout=timeout))
        )

    # -- files (files.py) -----------------------------------------------------------------------

    async def read_file(self, sandbox_id: str, path: str) -> bytes:
        return await self._get(sandbox_id).fs.read(path)

    async def write_file(self, sandbox_id: str, path: str, data: bytes, mode: int = 0o644) -> None:
        await self._get(sandbox_id).fs.write(path, data, mode)

    async def list_files(self, sandbox_id: str, path: str) -> builtins.list[FileInfo]:
        return await self._get(sandbox_id).fs.list(path)

    async def stat(self, sandbox_id: str, path: str) -> FileInfo:
        return await self._get(sandbox_id).fs.stat(path)

    async def remove(self, sandbox_id: str, path: str, recursive: bool = False) -> None:
        await self._get(sandbox_id).fs.remove(path, recursive)

    async def get_archive(self, sandbox_id: str, path: str) -> bytes:
        return await self._get(sandbox_id).fs.tar_out(path)

    async def put_archive(self, sandbox_id: str, path: str, tar: bytes) -> None:
        await self._get(sandbox_id).fs.tar_in(path, tar)

    # -- snapshot and fork --------------------------------------------------------------------

    async def snapshot(self, sandbox_id: str, snapshot_id: str) -> SnapshotInfo:
        live = self._get(sandbox_id)
        return await self.snapshots.take(sandbox_id, live.container_id, live.spec, snapshot_id)

    async def list_snapshots(self) -> builtins.list[SnapshotInfo]:
        return await self.snapshots.list()

    async def delete_snapshot(self, snapshot_id: str) -> bool:
        return await self.snapshots.delete(snapshot_id)

    # -- network ------------------------------------------------------------------------------

    async def open_connection(
        self, sandbox_id: str, port: int
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        live = self._get(sandbox_id)
        return await open_connection_in(f"/proc/{live.pid}/ns/net", port)
