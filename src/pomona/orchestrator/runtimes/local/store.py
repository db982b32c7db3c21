"""The state directory of a local runtime: one XFS store on a loop file, shared by every
process that uses the directory.

Layers, sandboxes and snapshots live on their own XFS filesystem (a sparse file under the state
directory, as big as the disk can hold at most): overlayfs refuses an upper layer on the
filesystem of the host-root lower layer, and XFS reflinks make a snapshot's copy of an upper
layer share its data. Any number of processes may open one state directory at once (vector
environments, `pytest -n`, several `pomona run`s): each holds a shared flock on `lock` while it
uses the directory; the store is made and mounted under an exclusive flock on `mount.lock`, so
it is made once and mounted once while the others wait; the last user to close it unmounts it.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from pomona.errors import RuntimeUnavailable, SandboxFailed
from pomona.orchestrator.linux.cgroups import remove_group
from pomona.orchestrator.linux.idranges import OUTSIDE
from pomona.orchestrator.linux.statedirs import REGISTRY, hidden_places, register
from pomona.orchestrator.linux.syscalls import unmount, wait_loops_released

MIN_STORE = 2**30  # below this the disk is too full to hold a store worth having
SUBDIRS = ("sandboxes", "snapshots", "masks", "disks")
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
    "etc/ssl/private",
)
HOST_MASK_FILES = ("etc/shadow", "etc/gshadow", "etc/shadow-", "etc/gshadow-", "etc/sudoers")
HOST_MASK_GLOBS = ("etc/ssh/ssh_host_*_key",)  # private keys, which exist on some hosts only


@functools.cache
def _masked_files() -> tuple[str, ...]:
    found = (str(p.relative_to("/")) for g in HOST_MASK_GLOBS for p in Path("/").glob(g))
    return (*HOST_MASK_FILES, *sorted(found))


def run(*argv: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode:
        raise SandboxFailed(
            f"{' '.join(argv[:3])}...: {done.stderr.strip() or done.stdout.strip()}"
        )


def private_dir(path: Path, plain: bool = False) -> None:
    """A directory only the host's root may enter: 0700 and owned by an id no sandbox maps,
    so root inside a sandbox that can see it (the `host` image) cannot open it either. In an
    ordinary user's namespace (`plain`), the user's own 0700 directory: no sandbox id is the
    user's."""
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o700)
    if not plain:
        os.chown(path, OUTSIDE, 0)


class Store:
    """The state store; `plain`: a directory of the user's, in an ordinary user's namespace,
    where no filesystem can be mounted from a loop file (runtimes/local/rootless.py)."""

    def __init__(self, root: Path, size: int, plain: bool = False):
        self.root = root
        self.state = root / "store"
        self.image = root / "store.xfs"
        self.size = size
        self.plain = plain
        self._lock: int | None = None  # the shared flock on `lock` while this process uses it

    def open(self) -> None:
        """Make and mount the store if no process has, and hold it for as long as this one
        uses it. A failure leaves nothing mounted that was not mounted before."""
        private_dir(self.root, self.plain)
        if not self.plain:
            register(self.root)
        if self._lock is None:
            lock = os.open(self.root / "lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            fcntl.flock(lock, fcntl.LOCK_SH)  # waits while `pomona gc` or a close releases it
            self._lock = lock
        try:
            with self._exclusive("mount.lock"):
                self.state.mkdir(exist_ok=True)
                if not self.plain and not os.path.ismount(self.state):
                    if not self.image.exists():
                        self._make_image()
                    run("mount", "-o", "loop,nosuid,nodev", str(self.image), str(self.state))
                private_dir(self.state, self.plain)
                for sub in SUBDIRS:
                    private_dir(self.state / sub, self.plain)
        except BaseException:
            self.close()
            raise

    @contextlib.contextmanager
    def _exclusive(self, name: str) -> Iterator[None]:
        fd = os.open(self.root / name, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _make_image(self) -> None:
        """A sparse file no bigger than what the disk under it has free, made under a
        temporary name so that no process ever mounts one half made."""
        disk = os.statvfs(self.root)
        size = min(self.size, disk.f_bavail * disk.f_frsize)
        if size < MIN_STORE:
            raise RuntimeUnavailable(
                f"the disk under {self.root} has {disk.f_bavail * disk.f_frsize} bytes free; "
                f"the local runtime's store needs at least {MIN_STORE}"
            )
        staged = self.image.with_name(f".store.xfs.{os.getpid()}")
        fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            os.ftruncate(fd, size)
        finally:
            os.close(fd)
        try:
            run("mkfs.xfs", "-q", "-m", "reflink=1", str(staged))
            os.chown(staged, OUTSIDE, 0)
            staged.replace(self.image)
        except BaseException:
            staged.unlink(missing_ok=True)
            raise

    def close(self, cgroup_group: str | None = None) -> None:
        """Let go of the store; when no sandbox is left in it and no other process uses the
        directory, its mount, loop device and cgroups go too."""
        if self._lock is None:
            return
        try:
            sandboxes = self.state / "sandboxes"
            if not (sandboxes.is_dir() and any(sandboxes.iterdir())):
                with contextlib.suppress(BlockingIOError):
                    fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # no one else uses it
                    self.unmount(cgroup_group)  # (rootless: the client ends the namespace)
        finally:
            os.close(self._lock)
            self._lock = None

    def unmount(self, cgroup_group: str | None = None) -> None:
        """Remove the state's own mount (after every sandbox is gone), e.g. at the end of
        tests; the loop device goes with the last unmount, which this waits for."""
        if self.plain or not self.root.is_dir():
            return
        with self._exclusive("mount.lock"):
            if os.path.ismount(self.state):
                unmount(str(self.state))
                wait_loops_released(os.path.realpath(self.image))
        if cgroup_group:
            remove_group(cgroup_group)

    def host_mask(self, own: Path) -> Path:
        """The layer that hides the host's private places, every registered state directory
        included; one per distinct set of hidden places, so a state dir made later is hidden
        too. Built under a temporary name: processes sharing the store may build it at once."""
        hidden = hidden_places(HOST_MASK_DIRS, own)
        files = [*_masked_files(), str(REGISTRY.relative_to("/"))]  # it names every state dir
        key = "\n".join([*hidden, "", *files])
        masks = self.state / "masks"
        mask = masks / ("host-" + hashlib.sha256(key.encode()).hexdigest()[:16])
        if mask.is_dir():
            return mask
        staged = Path(tempfile.mkdtemp(prefix=".mask-", dir=masks))
        try:
            for rel in hidden:
                d = staged / rel
                d.mkdir(parents=True, exist_ok=True)
                os.setxattr(d, "trusted.overlay.opaque", b"y")
            for rel in files:
                (staged / rel).parent.mkdir(parents=True, exist_ok=True)
                os.mknod(staged / rel, 0o600 | 0o020000, os.makedev(0, 0))
            (staged / "tmp").chmod(0o1777)
            staged.chmod(0o755)
            staged.rename(mask)
        except OSError:
            if not mask.is_dir():  # not another process's, made meanwhile
                raise
        finally:
            shutil.rmtree(staged, ignore_errors=True)
        return mask
