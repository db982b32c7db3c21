"""Thin ctypes bindings for the Linux calls Python 3.11 lacks: setns, openat2, umount2, setfsuid
and capset; and the loop devices a lazy unmount lets go of later.

Kept in one place so the rest of the runtime reads as ordinary Python.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import os
import select
import time
from collections.abc import Iterator
from pathlib import Path

from pomona.errors import SystemCallFailed

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)

CLONE_NEWNET = 0x40000000
SYS_OPENAT2 = 437
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_IN_ROOT = 0x10
MNT_DETACH = 2
SYS_CAPGET, SYS_CAPSET = 125, 126
CAPABILITY_VERSION_3 = 0x20080522


def _check(result: int, what: str) -> int:
    if result < 0:
        err = ctypes.get_errno()
        raise SystemCallFailed(err, f"{what}: {os.strerror(err)}")
    return result


def setns(fd: int, nstype: int = 0) -> None:
    """Move the calling *thread* into the namespace behind fd."""
    _check(_libc.setns(fd, nstype), "setns")


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


def _raise_effective() -> None:
    """Every permitted capability made effective again, for this thread (a change of fsuid
    away from 0 drops the file capabilities from the effective set)."""
    header, data = _CapHeader(CAPABILITY_VERSION_3, 0), (_CapData * 2)()
    _check(_syscall(SYS_CAPGET, ctypes.byref(header), data), "capget")
    for half in data:
        half.effective = half.permitted
    _check(_syscall(SYS_CAPSET, ctypes.byref(header), data), "capset")


@contextlib.contextmanager
def creating_as(uid: int, gid: int) -> Iterator[None]:
    """What this thread creates meanwhile is owned by uid:gid (host ids), with root's
    capabilities kept: how the host writes into a sandbox whose layers are idmapped, where an
    owner outside the sandbox's range cannot be stored at all (EOVERFLOW). Only the calling
    thread changes (setfsuid is per thread, and glibc does not broadcast it)."""
    _libc.setfsgid(gid)
    _libc.setfsuid(uid)
    try:
        if _libc.setfsuid(-1) != uid:
            raise SystemCallFailed(errno.EPERM, f"setfsuid({uid}) did not take")
        _raise_effective()
        yield
    finally:
        _libc.setfsuid(0)
        _libc.setfsgid(0)


def unmount(target: str) -> None:
    """Lazy unmount: detached at once, released when the last user goes."""
    _check(_libc.umount2(os.fsencode(target), MNT_DETACH), f"umount {target}")


def loop_devices(backing: str) -> list[str]:
    """The loop devices ("/dev/loopN") whose backing file is `backing` or under it."""
    found = []
    for entry in Path("/sys/block").glob("loop*/loop/backing_file"):
        with contextlib.suppress(OSError):  # a device going away as we look
            if entry.read_text().strip().removesuffix(" (deleted)").startswith(backing):
                found.append("/dev/" + entry.parts[3])
    return found


def wait_loops_released(backing: str, limit: float = 10.0) -> list[str]:
    """After a lazy unmount the kernel lets a loop device go when the filesystem's last user
    goes, through deferred work that runs late on a loaded machine: wait for that, up to
    `limit` seconds. The devices still there then (pinned by something alive)."""
    deadline = time.monotonic() + limit
    while (left := loop_devices(backing)) and time.monotonic() < deadline:
        time.sleep(0.02)
    return left


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


_syscall = _libc.syscall
_syscall.restype = ctypes.c_long


def open_in_root(root_fd: int, path: str, flags: int, mode: int = 0o644) -> int:
    """openat2(RESOLVE_IN_ROOT): resolve path, symlinks included, as if root_fd were "/".

    A symlink planted inside a sandbox that points at /etc/shadow resolves to the sandbox's own
    /etc/shadow, never the host's, and `..` cannot climb above the root.
    """
    how = _OpenHow(
        flags | os.O_CLOEXEC,
        mode if flags & os.O_CREAT else 0,
        RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS,
    )
    encoded = os.fsencode(path.lstrip("/") or ".")
    fd = _syscall(SYS_OPENAT2, root_fd, encoded, ctypes.byref(how), ctypes.sizeof(how))
    return _check(fd, f"open {path!r}")


def processes_naming(directory: Path) -> list[int]:
    """Processes whose command line names something under `directory`: what `pomona gc` ends
    besides the state directory's cgroups (a tool an operator ran on the store, say)."""
    needle = os.fsencode(str(directory)) + b"/"
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            if int(pid) != os.getpid() and needle in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(int(pid))
    return found


def in_user_namespace() -> bool:
    """Whether this process runs in a user namespace other than the host's (an ordinary user's
    local runtime does: runtimes/local/rootless.py)."""
    with open("/proc/self/uid_map") as f:
        return f.read().split() != ["0", "0", "4294967295"]


def start_time(pid: int) -> int:
    """A process's start time in clock ticks: with the pid, it names one process for sure."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return 0


def alive(pid: int, start: int) -> bool:
    """Whether that very process still runs (a recycled pid has another start time)."""
    return pid > 0 and start_time(pid) == start


def readable(fd: int, timeout: float = 0) -> bool:
    """Whether fd is readable within timeout seconds. poll, not select: a service holding a
    thousand sandboxes has descriptors above select's limit of 1024."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(max(timeout, 0) * 1000))


def exited(pidfd: int, timeout: float = 0) -> bool:
    """Whether the process behind a pidfd has exited, waiting up to timeout seconds (a pidfd
    polls readable from then on)."""
    return readable(pidfd, timeout)
