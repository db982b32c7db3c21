"""The embedded runtime: bubblewrap namespaces over overlayfs layers, cgroup limits, no daemon.

A sandbox is a directory under the state dir: its overlay upper layer, the overlay mount that
is its root filesystem, a record.json, and one long-lived init process (bubblewrap, as pid 1 of
new user/pid/mount/ipc/uts(/net) namespaces, reaping orphans). Exec enters those namespaces with
nsenter and joins the sandbox's cgroup before it can fork; files are read and written from the
host through the overlay mount with in-root path resolution. Snapshot copies the upper layer
into an immutable layer; fork stacks that layer under a fresh upper: O(1), nothing is copied.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import errno
import fcntl
import functools
import hashlib
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import AsyncGenerator, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from pomona import progress
from pomona.errors import (
    InvalidRequest,
    PomonaError,
    RuntimeUnavailable,
    SandboxConflict,
    SandboxFailed,
    SandboxNotFound,
    SnapshotNotFound,
)
from pomona.orchestrator.linux import seccomp
from pomona.orchestrator.linux.cgroups import Cgroup, preexec_joiner, remove_group
from pomona.orchestrator.linux.images import Image, ImageStore
from pomona.orchestrator.linux.netns import Gateway, open_connection_in
from pomona.orchestrator.linux.safefs import SandboxFS, normalize, remove_tree
from pomona.orchestrator.linux.statedirs import REGISTRY, hidden_places, register
from pomona.orchestrator.linux.syscalls import (
    alive,
    bind_readonly,
    exited,
    mount_overlay,
    open_in_root,
    processes_naming,
    start_time,
    unmount,
    wait_loops_released,
)
from pomona.orchestrator.runtimes import execution
from pomona.orchestrator.sources import ImageSources
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
    SandboxStatus,
    SnapshotInfo,
)

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# static (Debian's busybox-static): runs in any image as the idle pid 2
INIT_BINARY = "/bin/busybox"
INIT_PATH = "/dev/.pomona/busybox"  # where it appears inside (bwrap's private /dev, not the image)
# exits, running nothing, if the orchestrator died
GATE = 'read -r _ <&{fd} && exec {fd}<&- "$0" "$@"'
NAMESPACES = ("user", "mnt", "uts", "ipc", "net", "pid")  # in the order pomona-enter takes them
# What the "host" image hides: private and mutable places of the host. Opaque directories in a
# shared mask layer; whiteouts for single files.
HOST_MASK_DIRS = (
    "root",
    "home",
    "tmp",
    "var/tmp",
    "run",
    "mnt",
    "media",
    "srv",
    "var/lib/docker",
    "var/lib/containers",
    "var/log",
    "var/mail",
    "var/spool",
    "work",
    "opt/pomona",
    "var/cache/pomona",
    "var/lib/pomona",
)
HOST_MASK_FILES = ("etc/shadow", "etc/gshadow", "etc/shadow-", "etc/gshadow-", "etc/sudoers")


@dataclass
class _Record:
    """What survives the orchestrator: enough to adopt or remove the sandbox later."""

    id: str
    spec: dict
    created_at: float
    lowers: list[str]
    image_env: dict[str, str]
    status: SandboxStatus = "creating"
    owner_pid: int = 0
    owner_start: int = 0
    init_pid: int = 0
    init_start: int = 0
    idle_pid: int = 0  # pid 2, the idle process: execs enter through it (its cwd is the workdir)
    idle_start: int = 0
    shell: str = "/bin/sh"
    disk_image: str | None = None
    snapshot: str | None = None
    message: str | None = None

    @functools.cached_property
    def sandbox_spec(self) -> SandboxSpec:
        """The spec, parsed once: every exec and every listing reads it."""
        return SandboxSpec.model_validate(self.spec)

    def info(self) -> SandboxInfo:
        spec = self.sandbox_spec
        return SandboxInfo(
            id=self.id,
            runtime="local",
            status=self.status,
            spec=spec,
            created_at=self.created_at,
            snapshot=self.snapshot,
            message=self.message,
        )


@dataclass
class _Live:
    record: _Record
    dir: Path
    cgroup: Cgroup
    fs: SandboxFS
    process: subprocess.Popen | None = None
    gateway: Gateway | None = None
    building: asyncio.Future | None = None  # while create runs: a delete waits for it
    deleted: bool = False
    pidfd: int | None = None  # the idle process, held for the sandbox's life: never a bare pid

    def dead(self) -> str | None:
        """Why the sandbox cannot run commands any more, or None while it can."""
        if self.record.status != "ready":
            return None
        if self.pidfd is None or exited(self.pidfd):
            return "its init process died"
        return None

    def release(self) -> None:
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None


def _parent(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def remove_directory(directory: Path) -> None:
    """Delete a sandbox's directory however deep its tree (never across a mount still there)."""
    with contextlib.suppress(OSError, PomonaError):
        parent = os.open(directory.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            remove_tree(parent, directory.name)
        finally:
            os.close(parent)


def _run(*argv: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode:
        raise SandboxFailed(
            f"{' '.join(argv[:3])}...: {done.stderr.strip() or done.stdout.strip()}"
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
        self.state = self.root / "store"
        self.gate = self.state / "gate" / "busybox"  # the exec gate, read-only with a locked flag
        self.store_size = store_size
        self.images = images or ImageStore(self.state / "images", sources=sources)
        self.cgroup_group = (
            f"{cgroup_group}-{hashlib.sha256(str(self.root).encode()).hexdigest()[:10]}"
        )
        self.sandboxes: dict[str, _Live] = {}
        self.me = (os.getpid(), start_time(os.getpid()))
        self._lock: int | None = None  # a shared flock on the state dir while this runtime uses it
        self._check_machine()

    def _check_machine(self) -> None:
        missing = [
            b for b in ("bwrap", "nsenter", "mkfs.ext4", "mkfs.xfs", "cp") if not shutil.which(b)
        ]
        if not os.path.exists(INIT_BINARY):
            missing.append(INIT_BINARY + " (Debian package busybox-static)")
        if missing:
            raise RuntimeUnavailable(
                f"the local runtime needs {', '.join(missing)}; run ./dev setup"
            )
        if os.geteuid() != 0:
            raise RuntimeUnavailable(
                "the local runtime needs root (it mounts overlays and cgroups)"
            )
        seccomp.loader()  # built once per machine; says what is missing if it cannot be

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        await asyncio.to_thread(self._mount_store)
        for sub in ("sandboxes", "snapshots", "masks", "gate"):
            (self.state / sub).mkdir(parents=True, exist_ok=True)
        await asyncio.to_thread(self._mount_gate)
        await asyncio.to_thread(self._host_mask)
        for path in sorted((self.state / "sandboxes").glob("*/record.json")):
            try:
                record = _Record(**json.loads(path.read_text()))
            except (ValueError, TypeError):
                await asyncio.to_thread(self._teardown, path.parent, None, None)
                continue
            live = self._live(record, path.parent)
            if record.status == "creating" and alive(record.owner_pid, record.owner_start):
                continue  # another process (or client in this one) is creating it: never delete that
            if record.status == "ready" and self._hold(live):
                self.sandboxes[record.id] = live
                try:
                    await self._start_gateway(live)
                except OSError as e:
                    if e.errno != errno.EADDRINUSE:
                        raise
                    # another live process sharing this state dir still serves its gateway

            else:
                await asyncio.to_thread(self._teardown, live.dir, live, None)

    def _mount_store(self) -> None:
        """Layers live on their own XFS filesystem (a sparse loop file): overlayfs refuses an upper
        layer on the same filesystem as the host-root lower layer, and XFS reflinks make a
        snapshot's copy of the upper layer a metadata-only operation."""
        self.root.mkdir(parents=True, exist_ok=True)
        self.root.chmod(0o700)  # other sandboxes' data: readable by nobody but the host's root
        register(self.root)
        if self._lock is None:
            self._lock = os.open(self.root / "lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            fcntl.flock(self._lock, fcntl.LOCK_SH)  # waits while `pomona gc` or a close releases it
        self.state.mkdir(exist_ok=True)
        if os.path.ismount(self.state):
            return
        image = self.root / "store.xfs"
        if not image.exists():
            fd = os.open(image, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            try:
                os.ftruncate(fd, self.store_size)
            finally:
                os.close(fd)
            _run("mkfs.xfs", "-q", "-m", "reflink=1", str(image))
        image.chmod(0o600)
        _run("mount", "-o", "loop", str(image), str(self.state))
        self.state.chmod(0o700)

    def _mount_gate(self) -> None:
        """The static busybox every exec enters through, bound read-only from the host's mount
        namespace so that root in a sandbox cannot remount it writable (it is the host's file)."""
        if os.path.ismount(self.gate):
            return
        self.gate.touch(exist_ok=True)
        bind_readonly(INIT_BINARY, str(self.gate))

    def unmount_store(self) -> None:
        """Remove the state's own mounts (after every sandbox is gone), e.g. at the end of tests;
        the loop device goes with the last unmount, which this waits for."""
        if os.path.ismount(self.gate):
            unmount(str(self.gate))
        if os.path.ismount(self.state):
            unmount(str(self.state))
            wait_loops_released(os.path.realpath(self.root / "store.xfs"))
        remove_group(self.cgroup_group)

    async def close(self) -> None:
        """Stop serving gateways and let go of pidfds; sandboxes keep running. When none is left
        and no other process uses the state dir, its mounts, loop device and cgroups go too."""
        for live in self.sandboxes.values():
            if live.gateway:
                await live.gateway.close()
                live.gateway = None
            live.release()
        if self._lock is not None:
            await asyncio.to_thread(self._release_state)

    def _release_state(self) -> None:
        assert self._lock is not None
        try:
            sandboxes = self.state / "sandboxes"
            if not (sandboxes.is_dir() and any(sandboxes.iterdir())):
                with contextlib.suppress(BlockingIOError):
                    fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # no one else uses it
                    self.unmount_store()
        finally:
            os.close(self._lock)
            self._lock = None

    def _live(self, record: _Record, directory: Path) -> _Live:
        uid = 0 if record.spec.get("user") == "root" else SANDBOX_UID
        return _Live(
            record,
            directory,
            Cgroup(record.id, self.cgroup_group),
            SandboxFS(str(directory / "rootfs"), uid, uid),
        )

    def _host_mask(self) -> Path:
        """The layer that hides the host's private places, every registered state directory
        included; one per distinct set of hidden places, so a state dir made later is hidden too."""
        hidden = hidden_places(HOST_MASK_DIRS, self.root)
        key = "\n".join([*hidden, "", *HOST_MASK_FILES, str(REGISTRY)])
        mask = self.state / "masks" / ("host-" + hashlib.sha256(key.encode()).hexdigest()[:16])
        if (mask / ".complete").exists():
            return mask
        shutil.rmtree(mask, ignore_errors=True)
        mask.mkdir(parents=True)
        for rel in hidden:
            d = mask / rel
            d.mkdir(parents=True, exist_ok=True)
            os.setxattr(d, "trusted.overlay.opaque", b"y")
        # the registry names them all
        for rel in (*HOST_MASK_FILES, str(REGISTRY.relative_to("/"))):
            (mask / rel).parent.mkdir(parents=True, exist_ok=True)
            os.mknod(mask / rel, 0o600 | 0o020000, os.makedev(0, 0))
        (mask / "tmp").chmod(0o1777)
        (mask / ".complete").touch()
        return mask

    # -- create and delete --------------------------------------------------------------------

    async def create(
        self, sandbox_id: str, spec: SandboxSpec, snapshot: SnapshotInfo | None = None
    ) -> SandboxInfo:
        if sandbox_id in self.sandboxes:
            raise SandboxConflict(f"sandbox {sandbox_id!r} already exists")
        store = os.statvfs(self.state)
        if spec.limits.disk and spec.limits.disk > store.f_blocks * store.f_frsize:
            raise InvalidRequest(
                f"limits.disk={spec.limits.disk} is more than the state store holds "
                f"({store.f_blocks * store.f_frsize} bytes)"
            )
        if snapshot:
            lowers, env = self._snapshot_lowers(snapshot.id)
        else:
            image = await self._image(spec.image)
            lowers, env = image.layers, image.env
        directory = self.state / "sandboxes" / sandbox_id
        try:
            directory.mkdir()
        except FileExistsError:
            raise SandboxConflict(f"sandbox {sandbox_id!r} is being created or removed") from None
        record = _Record(
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
        self._save(live)  # the lease exists before anything that could leak
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
                await asyncio.to_thread(self._teardown, directory, live, live.process)
            if isinstance(e, SandboxFailed | InvalidRequest):
                raise
            raise SandboxFailed(f"could not start sandbox {sandbox_id!r}: {e}") from e
        finally:
            live.building = None
        record.status = "ready"
        self._save(live)
        return record.info()

    async def _build_and_connect(self, live: _Live, spec: SandboxSpec) -> None:
        await asyncio.to_thread(self._build, live, spec)
        await self._start_gateway(live)

    async def _image(self, ref: str) -> Image:
        if ref == "host":
            mask = await asyncio.to_thread(self._host_mask)
            return Image(ref="host", layers=[str(mask), "/"], env={"PATH": DEFAULT_PATH})
        return await self.images.resolve(ref)

    def _snapshot_lowers(self, snapshot_id: str) -> tuple[list[str], dict[str, str]]:
        path = self.state / "snapshots" / snapshot_id / "snapshot.json"
        try:
            data = json.loads(path.read_text())
        except OSError:
            raise SnapshotNotFound.of(snapshot_id) from None
        return data["lowers"], data["image_env"]

    def _build(self, live: _Live, spec: SandboxSpec) -> None:
        """Root filesystem, cgroup, init process: everything a create does that blocks."""
        d, record = live.dir, live.record
        writable = d
        if spec.limits.disk:
            image = d / "disk.img"
            with open(image, "wb") as f:
                f.truncate(spec.limits.disk)
            _run("mkfs.ext4", "-q", "-F", "-O", "^has_journal", "-m", "0", str(image))
            (d / "disk").mkdir()
            _run("mount", "-o", "loop", str(image), str(d / "disk"))
            record.disk_image = str(image)
            self._save(live)
            writable = d / "disk"
        for sub in ("upper", "work"):
            (writable / sub).mkdir()
        (d / "rootfs").mkdir()
        try:
            mount_overlay(
                str(d / "rootfs"), record.lowers, str(writable / "upper"), str(writable / "work")
            )
        except OSError as e:
            raise SandboxFailed(f"cannot mount the sandbox's root filesystem: {e}") from None
        uid = live.fs.uid
        # mount targets too: bubblewrap would create missing ones 0700, closed to the sandbox user
        root = os.open(d / "rootfs", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            for path, mode in (
                ("/tmp", 0o1777),
                (spec.workdir, 0o755),
                (SANDBOX_HOME, 0o755),
                *((m.target, 0o755) for m in spec.mounts),
            ):
                live.fs.mkdir(path)
                with contextlib.suppress(OSError):
                    fd = open_in_root(root, path, os.O_RDONLY | os.O_DIRECTORY)
                    try:
                        os.fchmod(fd, mode)
                        if path != "/tmp":
                            os.fchown(fd, uid, uid)
                    finally:
                        os.close(fd)
        finally:
            os.close(root)
        record.shell = "/bin/bash" if self._exists(live, "/bin/bash") else "/bin/sh"
        binds = self._bind_mounts(live, spec)
        live.cgroup.create(spec.limits)
        self._spawn_init(live, spec, binds)

    def _bind_mounts(self, live: _Live, spec: SandboxSpec) -> list[str]:
        """bubblewrap arguments for the spec's mounts. A read-only one is first bound read-only
        here, in the host's mount namespace, so the sandbox's namespace gets it locked."""
        args: list[str] = []
        for i, m in enumerate(spec.mounts):
            source = m.host_path()
            if not os.path.exists(source):
                raise InvalidRequest(f"mount source {m.source} does not exist on the host")
            if not m.read_only:
                args += ["--bind", source, m.target]
                continue
            staged = live.dir / "mounts" / str(i)
            staged.parent.mkdir(exist_ok=True)
            if os.path.isdir(source):
                staged.mkdir()
            else:
                staged.touch()
            bind_readonly(source, str(staged))
            args += ["--ro-bind", str(staged), m.target]
        return args

    def _exists(self, live: _Live, path: str) -> bool:
        root = os.open(live.dir / "rootfs", os.O_PATH | os.O_DIRECTORY)
        try:
            os.close(open_in_root(root, path, os.O_PATH))
            return True
        except OSError:
            return False
        finally:
            os.close(root)

    def _spawn_init(self, live: _Live, spec: SandboxSpec, binds: list[str]) -> None:
        """Start bubblewrap and finish its user namespace from outside. Three pipes: bwrap reports
        its pid 1 (info), waits while we write the uid maps and join the cgroup (ready), and the
        idle process says it runs (idle) — no polling anywhere."""
        info_r, info_w = os.pipe()
        ready_r, ready_w = os.pipe()
        idle_r, idle_w = os.pipe()
        filter_fd = seccomp.memfd()
        args = [
            "bwrap",
            "--unshare-user",
            "--userns-block-fd",
            str(ready_r),
            "--info-fd",
            str(info_w),
            "--uid",
            "0",
            "--gid",
            "0",
            "--bind",
            str(live.dir / "rootfs"),
            "/",
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            "--perms",
            "0755",
            "--dir",
            os.path.dirname(INIT_PATH),
            "--ro-bind",
            str(self.gate),
            INIT_PATH,
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
            "--hostname",
            live.record.id[:63],
            "--chdir",
            spec.workdir,
            "--new-session",
            "--seccomp",
            str(filter_fd),
        ]
        if spec.network != NetworkMode.full:
            args.append("--unshare-net")
        args += binds
        args += [
            "--",
            INIT_PATH,
            "sh",
            "-c",
            f'echo >&{idle_w}; exec {idle_w}>&-; exec "$0" sleep 2147483647',
            INIT_PATH,
        ]
        with (
            open(live.dir / "init.log", "wb") as log,
            os.fdopen(info_r, "rb") as info,
            os.fdopen(ready_w, "wb", buffering=0) as ready,
            os.fdopen(idle_r, "rb") as idle,
        ):
            try:
                # a clean environment: the orchestrator's (API keys, tokens) must not reach the
                # sandbox, whose root can read its init's /proc/1/environ
                live.process = subprocess.Popen(
                    args,
                    pass_fds=(info_w, ready_r, idle_w, filter_fd),
                    stdout=log,
                    stderr=log,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                    env={"PATH": DEFAULT_PATH},
                )
            finally:
                for fd in (info_w, ready_r, idle_w, filter_fd):
                    os.close(fd)
            try:
                raw = b""
                while b"}" not in raw and (chunk := info.read1(4096)):
                    raw += chunk
                if not raw:
                    raise SandboxFailed(f"bubblewrap failed: {self._init_log(live)}")
                child = json.loads(raw)["child-pid"]
                # identity-mapped user namespace: uid 0 inside has capabilities only over its own namespaces
                Path(f"/proc/{child}/uid_map").write_text("0 0 4294967295\n")
                Path(f"/proc/{child}/gid_map").write_text("0 0 4294967295\n")
                live.cgroup.join(child)  # before it runs a thing: limits hold for all it starts
                live.record.init_pid, live.record.init_start = child, start_time(child)
            finally:
                ready.write(b"1")
            started = idle.read(1)  # b"" if bubblewrap died instead
        pid = live.record.init_pid
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split() if started else []
        if not children:
            raise SandboxFailed(f"the sandbox's idle process did not start: {self._init_log(live)}")
        live.record.idle_pid = int(children[0])
        live.record.idle_start = start_time(live.record.idle_pid)
        if not self._hold(live):
            raise SandboxFailed(
                f"the sandbox's idle process exited at once: {self._init_log(live)}"
            )

    @staticmethod
    def _hold(live: _Live) -> bool:
        """Take a pidfd on the idle process, if that very process (pid and start time) runs."""
        record = live.record
        try:
            pidfd = os.pidfd_open(record.idle_pid)
        except OSError:
            return False
        if not record.idle_start and _parent(record.idle_pid) == record.init_pid:
            # a record from before idle_start existed
            record.idle_start = start_time(record.idle_pid)
        if not alive(record.idle_pid, record.idle_start) or not alive(
            record.init_pid, record.init_start
        ):
            os.close(pidfd)  # the pid was recycled before we held it: not our process
            return False
        live.release()
        live.pidfd = pidfd
        return True

    @staticmethod
    def _init_log(live: _Live) -> str:
        if live.process:
            with contextlib.suppress(subprocess.TimeoutExpired):
                live.process.wait(5)
        return (live.dir / "init.log").read_text().strip()

    async def _start_gateway(self, live: _Live) -> None:
        spec = live.record.sandbox_spec
        if spec.network == NetworkMode.gateway and live.gateway is None:
            with self._namespaces(live, ("net",)) as fds:
                live.gateway = Gateway(f"/proc/self/fd/{fds['net']}", spec.gateway_address)
                await live.gateway.start()

    def _save(self, live: _Live) -> None:
        tmp = live.dir / "record.json.tmp"
        tmp.write_text(json.dumps(asdict(live.record)))
        tmp.replace(live.dir / "record.json")

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
        live = live or self._live(
            _Record(id=sandbox_id, spec={}, created_at=0, lowers=[], image_env={}), directory
        )
        await asyncio.to_thread(self._teardown, directory, live, live.process)
        return True

    def _teardown(
        self, directory: Path, live: _Live | None, process: subprocess.Popen | None
    ) -> None:
        """Kill, unmount, remove the cgroup and the files. Safe to repeat after a crash."""
        record_path = directory / "record.json"
        with contextlib.suppress(OSError, ValueError, TypeError):
            rec = _Record(**json.loads(record_path.read_text()))
            if live is None or not live.record.init_pid:
                live = self._live(rec, directory)
        if live:
            pid, start = live.record.init_pid, live.record.init_start
            if alive(pid, start):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)  # pid 1 of the namespace: everything in it dies
            live.cgroup.destroy()
            live.release()
        if process:
            with contextlib.suppress(Exception):
                process.kill()
                process.wait(5)
        if live is None or live.record.status != "ready":
            # a bubblewrap whose creator died (or failed) before it let the init run is stranded,
            # in no cgroup, holding a copy of the host's mounts (loop devices stay): by its name.
            # A ready sandbox's init was confirmed: killing it ended everything of it.
            for pid in processes_naming(directory):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        staged = sorted(directory.glob("mounts/*"))
        for mount in (directory / "rootfs", *staged, directory / "disk"):
            if os.path.ismount(mount):
                with contextlib.suppress(OSError):
                    unmount(str(mount))
        remove_directory(directory)

    async def list(self) -> list[SandboxInfo]:
        return [self._info(live) for live in self.sandboxes.values()]

    async def get(self, sandbox_id: str) -> SandboxInfo | None:
        live = self.sandboxes.get(sandbox_id)
        return None if live is None else self._info(live)

    @staticmethod
    def _info(live: _Live) -> SandboxInfo:
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
            record = _Record(**json.loads((directory / "record.json").read_text()))
        except (OSError, ValueError, TypeError):
            record = None
        if record is None or record.status != "ready":
            if known:
                known.release()
            self.sandboxes.pop(sandbox_id, None)
            return False
        if known is None or known.record.init_pid != record.init_pid:
            live = self._live(record, directory)  # its gateway stays with its creator
            self._hold(live)  # a dead one stays listed, as failed, until it is deleted
            if known:
                known.release()
            self.sandboxes[sandbox_id] = live
        return True

    def _get(self, sandbox_id: str) -> _Live:
        live = self.sandboxes.get(sandbox_id)
        if live is None or live.record.status != "ready":
            raise SandboxNotFound.of(sandbox_id)
        if reason := live.dead():
            raise SandboxConflict(f"sandbox {sandbox_id!r} has failed ({reason}); delete it")
        return live

    @contextlib.contextmanager
    def _namespaces(self, live: _Live, names: tuple[str, ...]) -> Iterator[dict[str, int]]:
        """Open the idle process's namespace files (and root, cwd), then check through the pidfd
        that it has not exited: a recycled pid can never lead into another sandbox."""
        fds: dict[str, int] = {}
        try:
            for name in names:
                source = f"/proc/{live.record.idle_pid}/" + (
                    name if name in ("root", "cwd") else f"ns/{name}"
                )
                fds[name] = os.open(source, os.O_RDONLY | os.O_CLOEXEC)
            if live.pidfd is None or exited(live.pidfd):
                raise SandboxConflict(
                    f"sandbox {live.record.id!r} has failed (its init process died); delete it"
                )
            yield fds
        except FileNotFoundError:
            raise SandboxConflict(
                f"sandbox {live.record.id!r} has failed (its init process died); delete it"
            ) from None
        finally:
            for fd in fds.values():
                os.close(fd)

    # -- exec ---------------------------------------------------------------------------------

    def _spawn(
        self,
        sandbox_id: str,
        request: ExecRequest,
        extra_env: dict[str, str] | None = None,
        terminal: int | None = None,
    ) -> subprocess.Popen:
        """Start a command inside the sandbox: its namespaces (entered through files opened and
        checked against the held pidfd), its cgroup, its seccomp filter, its own process group.
        Everything on the way in is static (busybox, pomona-enter): cheap to exec, any host."""
        live = self._get(sandbox_id)
        spec = live.record.sandbox_spec
        user = request.user or spec.user
        cwd = normalize(request.cwd or spec.workdir)
        # in `full` mode the sandbox shares the host's network namespace: nothing to enter there
        names = tuple(ns for ns in NAMESPACES if ns != "net" or spec.network != NetworkMode.full)
        if isinstance(request.command, str):
            command = [
                live.record.shell,
                *(["-l"] if request.login_shell else []),
                "-c",
                request.command,
            ]
        else:
            command = request.command
        home = "/root" if user == "root" else SANDBOX_HOME
        env = {
            "PATH": DEFAULT_PATH,
            **live.record.image_env,
            "HOME": home,
            "USER": user,
            "LOGNAME": user,
            "PWD": cwd,
            "LANG": "C.UTF-8",
            **spec.env,
            **(extra_env or {}),
            **request.env,
        }
        ids = ["-", "-"] if user == "root" else [str(SANDBOX_UID), str(SANDBOX_UID)]
        with self._namespaces(live, (*names, "root")) as fds:
            # pomona-enter (linux/seccomp_exec.c): the namespaces, the root, no_new_privs (setuid
            # binaries in the image grant nothing), the filter, the user, the directory, the command
            argv = [
                seccomp.loader(),
                str(seccomp.shared_fd()),
                *(str(fds.get(ns, "-")) for ns in NAMESPACES),
                str(fds["root"]),
                *ids,
                cwd,
                *command,
            ]
            try:
                return self._start(
                    live, argv, env, tuple(fds.values()), request.stdin is not None, terminal
                )
            except (subprocess.SubprocessError, OSError) as e:
                raise SandboxFailed(
                    f"sandbox {sandbox_id!r} cannot run commands (its cgroup is gone?): {e}"
                ) from e

    @staticmethod
    def _start(
        live: _Live,
        argv: builtins.list[str],
        env: dict[str, str],
        fds: tuple[int, ...],
        stdin: bool,
        terminal: int | None,
    ) -> subprocess.Popen:
        fds = (*fds, seccomp.shared_fd())
        if terminal is not None:
            join = preexec_joiner(live.cgroup.procs_files)
            return subprocess.Popen(
                argv,
                env=env,
                start_new_session=True,
                stdin=terminal,
                stdout=terminal,
                stderr=terminal,
                pass_fds=fds,
                preexec_fn=execution.pty_preexec(join),
            )
        # The gate: a static shell that waits on a pipe while we move it into the cgroup, so the
        # command cannot fork outside the limits; no preexec_fn, so Python can use vfork.
        gate_r, gate_w = os.pipe()
        try:
            proc = subprocess.Popen(
                [INIT_BINARY, "sh", "-c", GATE.format(fd=gate_r), *argv],
                env=env,
                start_new_session=True,
                pass_fds=(gate_r, *fds),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            )
            os.close(gate_r)
            gate_r = -1
            live.cgroup.join(proc.pid)
            os.write(gate_w, b"\n")
            return proc
        finally:
            os.close(gate_w)
            if gate_r >= 0:
                os.close(gate_r)

    async def exec(
        self, sandbox_id: str, request: ExecRequest
    ) -> AsyncGenerator[ExecChunk | ExecResult, None]:
        proc = self._spawn(sandbox_id, request)
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
            proc = self._spawn(sandbox_id, request, {"TERM": "xterm-256color"}, terminal=slave)
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
        live = self._get(sandbox_id)
        target = self.state / "snapshots" / snapshot_id
        try:
            target.mkdir()
        except FileExistsError:
            raise SandboxConflict(f"snapshot {snapshot_id!r} already exists") from None
        upper = (live.dir / "disk" / "upper") if live.record.disk_image else (live.dir / "upper")
        try:
            # reflinks where the filesystem has them (xfs, btrfs); a plain copy otherwise
            proc = await asyncio.create_subprocess_exec(
                "cp",
                "-a",
                "--reflink=auto",
                str(upper),
                str(target / "layer"),
                stderr=asyncio.subprocess.PIPE,
            )
            _, err = await progress.copying(
                proc, upper, target / "layer", f"snapshot {snapshot_id}"
            )
            if proc.returncode:
                raise SandboxFailed(f"snapshot copy failed: {err.decode().strip()}")
        except BaseException:
            shutil.rmtree(target, ignore_errors=True)
            raise
        info = SnapshotInfo(
            id=snapshot_id,
            sandbox_id=sandbox_id,
            runtime=self.name,
            spec=SandboxSpec.model_validate(live.record.spec),
            created_at=time.time(),
        )
        data = {
            **info.model_dump(mode="json"),
            "lowers": [str(target / "layer"), *live.record.lowers],
            "image_env": live.record.image_env,
        }
        (target / "snapshot.json").write_text(json.dumps(data))
        return info

    async def list_snapshots(self) -> builtins.list[SnapshotInfo]:
        found = []
        for path in (self.state / "snapshots").glob("*/snapshot.json"):
            with contextlib.suppress(OSError, ValueError):
                found.append(
                    SnapshotInfo.model_validate(
                        {
                            k: v
                            for k, v in json.loads(path.read_text()).items()
                            if k not in ("lowers", "image_env")
                        }
                    )
                )
        return found

    async def delete_snapshot(self, snapshot_id: str) -> bool:
        target = self.state / "snapshots" / snapshot_id
        if not target.exists():
            return False
        layer = str(target / "layer")
        users = [s for s, live in self.sandboxes.items() if layer in live.record.lowers]
        for path in (self.state / "snapshots").glob("*/snapshot.json"):
            with contextlib.suppress(OSError, ValueError):
                if path.parent != target and layer in json.loads(path.read_text())["lowers"]:
                    users.append(path.parent.name)
        if users:
            raise SandboxConflict(
                f"snapshot {snapshot_id!r} is a layer of {', '.join(sorted(users))}; delete those first"
            )
        await asyncio.to_thread(shutil.rmtree, target, True)
        return True

    # -- network ------------------------------------------------------------------------------

    async def open_connection(
        self, sandbox_id: str, port: int
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        live = self._get(sandbox_id)
        with self._namespaces(live, ("net",)) as fds:
            return await open_connection_in(f"/proc/self/fd/{fds['net']}", port)
