"""LocalRuntime: the sandbox contract over the state store, pomona-init and pomona-enter."""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import errno
import hashlib
import os
import shutil
import time
from collections.abc import AsyncGenerator
from pathlib import Path

from pomona.errors import (
    InvalidRequest,
    RuntimeUnavailable,
    SandboxConflict,
    SandboxFailed,
    SandboxNotFound,
)
from pomona.orchestrator.linux import idranges, seccomp
from pomona.orchestrator.linux.cgroups import Cgroup
from pomona.orchestrator.linux.helpers import cache_dir, helper
from pomona.orchestrator.linux.images import Image, ImageStore
from pomona.orchestrator.linux.netns import Gateway, open_connection_in
from pomona.orchestrator.linux.syscalls import alive, open_in_root, start_time
from pomona.orchestrator.runtimes import execution
from pomona.orchestrator.runtimes.local import build, snapshots
from pomona.orchestrator.runtimes.local import rootless as rootless_mode
from pomona.orchestrator.runtimes.local.enter import DEFAULT_PATH, namespaces, spawn
from pomona.orchestrator.runtimes.local.records import Live, Record
from pomona.orchestrator.runtimes.local.store import Store
from pomona.orchestrator.sources import ImageSources
from pomona.orchestrator.types import (
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


class LocalRuntime:
    name = "local"

    def __init__(
        self,
        state_dir: str | os.PathLike = "/var/lib/pomona",
        images: ImageStore | None = None,
        cgroup_group: str = "pomona",
        store_size: int = 256 * 2**30,
        sources: ImageSources | None = None,
    ):
        self.root = Path(state_dir).absolute()
        # an ordinary user's runtime runs as root of a user namespace of its own (rootless.py)
        self.rootless = rootless_mode.in_user_namespace()
        self.store = Store(self.root, store_size, plain=self.rootless)
        self.state = self.store.state
        # as an ordinary user, layers unpacked with owners shifted into the user's ids are the
        # same for every state dir of the user's: one cache for them all
        self.images = images or (
            ImageStore(cache_dir() / "layer-cache", sources=sources, shift=1)
            if self.rootless
            else ImageStore(self.state / "images", sources=sources)
        )
        self.cgroup_group = (
            f"{cgroup_group}-{hashlib.sha256(str(self.root).encode()).hexdigest()[:10]}"
        )
        self.sandboxes: dict[str, Live] = {}
        self.me = (os.getpid(), start_time(os.getpid()))
        self._check_machine()

    def _check_machine(self) -> None:
        if os.geteuid() != 0:
            raise RuntimeUnavailable(
                "LocalRuntime runs as root, or as root of an ordinary user's namespace; as "
                "an ordinary user, SandboxClient('local') starts it there (runtimes/local/"
                "rootless.py)"
            )
        check_machine(self.rootless)

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        await asyncio.to_thread(self.store.open)
        try:
            await self._adopt()
        except BaseException:
            await self.close()
            raise

    async def _adopt(self) -> None:
        """Take over the live sandboxes a previous process left; remove the dead ones."""
        for found in sorted((self.state / "sandboxes").glob("*/record.json")):
            path = found.parent  # a directory without a record is still being created
            try:
                record = Record.load(path)
            except (OSError, ValueError, TypeError):
                await asyncio.to_thread(build.teardown, self._live(None, path), self.root)
                continue
            live = self._live(record, path)
            if record.status == "creating" and alive(record.owner_pid, record.owner_start):
                continue  # another process (or client in this one) is creating it: never delete that
            if record.status == "ready" and live.hold():
                self.sandboxes[record.id] = live
                try:
                    await self._start_gateway(live)
                except OSError as e:
                    if e.errno != errno.EADDRINUSE:
                        raise
                    # another live process sharing this state dir still serves its gateway
            else:
                await asyncio.to_thread(build.teardown, live, self.root)

    def unmount_store(self) -> None:
        """Remove the state's own mount (after every sandbox is gone), e.g. at the end of tests;
        the loop device goes with the last unmount, which this waits for."""
        self.store.unmount(self.cgroup_group)

    async def close(self) -> None:
        """Stop serving gateways and let go of pidfds; sandboxes keep running. When none is left
        and no other process uses the state dir, its mount, loop device and cgroups go too."""
        for live in self.sandboxes.values():
            if live.gateway:
                await live.gateway.close()
                live.gateway = None
            live.release()
        await asyncio.to_thread(self.store.close, self.cgroup_group)

    def _live(self, record: Record | None, directory: Path) -> Live:
        """What this process holds of a sandbox (of a stand-in record, for one unreadable)."""
        record = record or Record(id=directory.name, spec={}, created_at=0, lowers=[], image_env={})
        cgroup = Cgroup(record.id, self.cgroup_group, usable=not self.rootless)
        return Live(record, directory, cgroup)

    def limit_defaults(self, defaults: Limits) -> Limits:
        """As root, every default, the disk capped at what the store holds (a disk limit is an
        ext4 image per sandbox, a reflink of one made once per size: about 4 ms more per create
        and 2 ms per delete here). As an ordinary user only pids: without a cgroup cpu= cannot
        be set, memory= would be RLIMIT_AS, an address space cap that breaks programs reserving
        more than they use (V8, Go, the JVM), and disk= a tmpfs, held in memory."""
        if self.rootless:
            return Limits(pids=defaults.pids)
        if defaults.disk is None:
            return defaults
        return defaults.model_copy(update={"disk": min(defaults.disk, self._store_bytes())})

    def _store_bytes(self) -> int:
        """How much the state store holds: no sandbox's disk can be bigger."""
        store = os.statvfs(self.state)
        return store.f_blocks * store.f_frsize

    # -- create and delete --------------------------------------------------------------------

    async def create(
        self, sandbox_id: str, spec: SandboxSpec, snapshot: SnapshotInfo | None = None
    ) -> SandboxInfo:
        if sandbox_id in self.sandboxes:
            raise SandboxConflict(f"sandbox {sandbox_id!r} already exists")
        if self.rootless and spec.limits.cpu:
            raise InvalidRequest(
                "limits.cpu needs a cgroup, and none is delegated to this user on this machine "
                "(the local runtime as an ordinary user: docs/security.md); create without cpu="
            )
        if spec.limits.disk and spec.limits.disk > (holds := self._store_bytes()):
            raise InvalidRequest(
                f"limits.disk={spec.limits.disk} is more than the state store holds ({holds} bytes)"
            )
        if snapshot:
            lowers, env = snapshots.lowers(self.state, snapshot.id)
        else:
            image = await self._image(spec.image)
            lowers, env = image.layers, image.env
        directory = self.state / "sandboxes" / sandbox_id
        try:
            directory.mkdir(mode=0o700)
        except FileExistsError:
            raise SandboxConflict(f"sandbox {sandbox_id!r} is being created or removed") from None
        record = Record(
            id=sandbox_id,
            spec=spec.model_dump(mode="json"),
            created_at=time.time(),
            lowers=lowers,
            image_env=env,
            owner_pid=self.me[0],
            owner_start=self.me[1],
            snapshot=snapshot.id if snapshot else None,
        )
        live = self._live(record, directory)
        live.save()  # the lease exists before anything that could leak
        self.sandboxes[sandbox_id] = live
        live.building = asyncio.ensure_future(self._build_and_connect(live, spec))
        try:
            await asyncio.shield(live.building)
            if live.deleted:
                raise SandboxFailed(
                    f"sandbox {sandbox_id!r} was deleted while it was being created"
                )
        except BaseException as e:
            if not live.deleted:  # else the delete that raced us removes it
                self.sandboxes.pop(sandbox_id, None)
                await asyncio.to_thread(build.teardown, live, self.root)
            if isinstance(e, SandboxFailed | InvalidRequest):
                raise
            raise SandboxFailed(f"could not start sandbox {sandbox_id!r}: {e}") from e
        finally:
            live.building = None
        record.status = "ready"
        live.save()
        return record.info()

    async def _build_and_connect(self, live: Live, spec: SandboxSpec) -> None:
        await asyncio.to_thread(self._build, live, spec)
        await self._start_gateway(live)

    async def _image(self, ref: str) -> Image:
        if ref == "host":
            if self.rootless:
                raise InvalidRequest(
                    'image="host" needs the local runtime as root: as an ordinary user, '
                    "overlayfs cannot stack the host's root (a user namespace may not reveal "
                    "what its mounts cover); give an OCI image or a SIF file"
                )
            mask = await asyncio.to_thread(self.store.host_mask, self.root)
            return Image(ref="host", layers=[str(mask), "/"], env={"PATH": DEFAULT_PATH})
        return await self.images.resolve(ref)

    def _build(self, live: Live, spec: SandboxSpec) -> None:
        """Everything a create does that blocks: the id range, the writable layer, the cgroup,
        the init."""
        record = live.record
        # as an ordinary user, every sandbox has the user's subordinate ids (the namespace's
        # 1-65536); as root, a host range of its own
        record.ids = 1 if self.rootless else idranges.claim(self.root, record.id, self.me)
        live.save()
        build.prepare(live, spec, self.rootless)
        live.cgroup.create(spec.limits)
        build.start_init(live, spec, self.root, self.rootless)
        record.shell = "/bin/bash" if self._exists(live, "/bin/bash") else "/bin/sh"

    @staticmethod
    def _exists(live: Live, path: str) -> bool:
        root = live.open_root_view()
        try:
            os.close(open_in_root(root, path, os.O_PATH))
            return True
        except OSError:
            return False
        finally:
            os.close(root)

    async def _start_gateway(self, live: Live) -> None:
        spec = live.record.sandbox_spec
        if spec.network == NetworkMode.gateway and live.gateway is None:
            with namespaces(live, ("net",)) as fds:
                live.gateway = Gateway(f"/proc/self/fd/{fds['net']}", spec.gateway_address)
                await live.gateway.start()

    async def delete(self, sandbox_id: str) -> bool:
        live = self.sandboxes.pop(sandbox_id, None)
        directory = self.state / "sandboxes" / sandbox_id
        if live is None and not directory.exists():
            return False
        if live and live.building is not None:
            live.deleted = True  # the create in flight fails; teardown happens once, here
            with contextlib.suppress(BaseException):
                await asyncio.shield(live.building)
        if live and live.gateway:
            await live.gateway.close()
        if live is None:
            try:
                live = self._live(Record.load(directory), directory)
            except (OSError, ValueError, TypeError):
                live = self._live(None, directory)
        await asyncio.to_thread(build.teardown, live, self.root)
        return True

    async def list(self) -> list[SandboxInfo]:
        return [self._info(live) for live in self.sandboxes.values()]

    async def get(self, sandbox_id: str) -> SandboxInfo | None:
        live = self.sandboxes.get(sandbox_id)
        return None if live is None else self._info(live)

    @staticmethod
    def _info(live: Live) -> SandboxInfo:
        info = live.record.info()
        if reason := live.dead():
            info.status, info.message = "failed", f"the sandbox {reason}"
        return info

    async def refresh(self, sandbox_id: str) -> bool:
        """Re-read one sandbox from disk: how service replicas sharing this state dir see what
        another replica created (or deleted). Never touches a sandbox, only this process's view."""
        known = self.sandboxes.get(sandbox_id)
        if known and known.record.status == "creating":
            return True  # this process is creating it
        directory = self.state / "sandboxes" / sandbox_id
        try:
            record: Record | None = Record.load(directory)
        except (OSError, ValueError, TypeError):
            record = None
        if record is None or record.status != "ready":
            if known:
                known.release()
            self.sandboxes.pop(sandbox_id, None)
            return False
        if known is None or known.record.init_pid != record.init_pid:
            live = self._live(record, directory)  # its gateway stays with its creator
            live.hold()  # a dead one stays listed, as failed, until it is deleted
            if known:
                known.release()
            self.sandboxes[sandbox_id] = live
        return True

    def _get(self, sandbox_id: str) -> Live:
        live = self.sandboxes.get(sandbox_id)
        if live is None or live.record.status != "ready":
            raise SandboxNotFound.of(sandbox_id)
        if reason := live.dead():
            raise SandboxConflict(f"sandbox {sandbox_id!r} has failed ({reason}); delete it")
        return live

    # -- exec ---------------------------------------------------------------------------------

    async def exec(
        self, sandbox_id: str, request: ExecRequest
    ) -> AsyncGenerator[ExecChunk | ExecResult, None]:
        proc = spawn(self._get(sandbox_id), request)
        stdin = request.stdin.encode() if request.stdin is not None else None
        command = await execution.LocalCommand.start(proc)
        async with contextlib.aclosing(
            execution.stream(command, stdin=stdin, timeout=request.timeout, cap=request.output_cap)
        ) as items:
            async for item in items:
                yield item

    async def open_pty(
        self, sandbox_id: str, request: ExecRequest, rows: int = 24, cols: int = 80
    ) -> execution.ProcessPty:
        master, slave = execution.open_terminal(rows, cols)
        try:
            live = self._get(sandbox_id)
            proc = spawn(live, request, {"TERM": "xterm-256color"}, terminal=slave)
        except BaseException:
            os.close(master)
            raise
        finally:
            os.close(slave)
        return execution.ProcessPty(proc, master)

    # -- files --------------------------------------------------------------------------------

    async def read_file(self, sandbox_id: str, path: str) -> bytes:
        return await asyncio.to_thread(self._get(sandbox_id).fs.read, path)

    async def write_file(self, sandbox_id: str, path: str, data: bytes, mode: int = 0o644) -> None:
        await asyncio.to_thread(self._get(sandbox_id).fs.write, path, data, mode)

    async def list_files(self, sandbox_id: str, path: str) -> builtins.list[FileInfo]:
        return await asyncio.to_thread(self._get(sandbox_id).fs.list, path)

    async def stat(self, sandbox_id: str, path: str) -> FileInfo:
        return await asyncio.to_thread(self._get(sandbox_id).fs.stat, path)

    async def remove(self, sandbox_id: str, path: str, recursive: bool = False) -> None:
        await asyncio.to_thread(self._get(sandbox_id).fs.remove, path, recursive)

    async def get_archive(self, sandbox_id: str, path: str) -> bytes:
        return await asyncio.to_thread(self._get(sandbox_id).fs.tar_out, path)

    async def put_archive(self, sandbox_id: str, path: str, tar: bytes) -> None:
        await asyncio.to_thread(self._get(sandbox_id).fs.tar_in, path, tar)

    # -- snapshot and fork --------------------------------------------------------------------

    async def snapshot(self, sandbox_id: str, snapshot_id: str) -> SnapshotInfo:
        return await snapshots.take(self.state, self._get(sandbox_id), snapshot_id)

    async def list_snapshots(self) -> builtins.list[SnapshotInfo]:
        return snapshots.listed(self.state)

    async def delete_snapshot(self, snapshot_id: str) -> bool:
        in_use = await asyncio.to_thread(self._layers_in_use)
        return await snapshots.delete(self.state, snapshot_id, in_use)

    def _layers_in_use(self) -> dict[str, builtins.list[str]]:
        """Every sandbox's layers, from the records in the state dir (each is saved before its
        sandbox is built): other processes sharing it (`pomona serve --workers`, replicas) fork
        from snapshots and delete forks too, so this process's own view is stale both ways."""
        in_use = {}
        for found in (self.state / "sandboxes").glob("*/record.json"):
            with contextlib.suppress(OSError, ValueError, TypeError):
                record = Record.load(found.parent)
                in_use[record.id] = record.lowers
        return in_use

    # -- network ------------------------------------------------------------------------------

    async def open_connection(
        self, sandbox_id: str, port: int
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        live = self._get(sandbox_id)
        with namespaces(live, ("net",)) as fds:
            return await open_connection_in(f"/proc/self/fd/{fds['net']}", port)


def check_machine(rootless: bool) -> None:
    """What the local runtime needs of this machine, as root or (`rootless`) as an ordinary
    user; raises RuntimeUnavailable naming what is missing and what installs it."""
    tools: tuple[str, ...] = ("cp",) if rootless else ("mkfs.ext4", "mkfs.xfs", "cp")
    the_user = rootless and not rootless_mode.in_user_namespace()  # before its namespace exists
    if the_user:
        tools += ("newuidmap", "newgidmap")
    missing = [b for b in tools if not shutil.which(b)]
    if missing:
        raise RuntimeUnavailable(f"the local runtime needs {', '.join(missing)}; run ./dev setup")
    if the_user:
        rootless_mode.subordinate("uid"), rootless_mode.subordinate("gid")
    for name in ("pomona-init", "pomona-enter"):
        helper(name)  # built once per machine; says what is missing if it cannot be
    seccomp.shared_fd()
