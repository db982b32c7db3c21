"""Thin ctypes bindings for the Linux calls Python 3.11 lacks: setns, openat2, prctl, mount;
and the loop devices a lazy unmount lets go of later.

Kept in one place so the rest of the runtime reads as ordinary Python.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import select
import time
from pathlib import Path

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)

CLONE_NEWNET = 0x40000000
SYS_OPENAT2 = 437
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_IN_ROOT = 0x10
MNT_DETACH = 2
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND = 1, 2, 4, 32, 4096


def _check(result: int, what: str) -> int:
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return result


def setns(fd: int, nstype: int = 0) -> None:
    """Move the calling *thread* into the namespace behind fd."""
    _check(_libc.setns(fd, nstype), "setns")


def mount_overlay(target: str, lowers: list[str], upper: str, work: str) -> None:
    """mount(2) directly: a `mount` process per sandbox costs more than the mount itself."""
    options = f"lowerdir={':'.join(lowers)},upperdir={upper},workdir={work}".encode()
    _check(
        _libc.mount(b"overlay", os.fsencode(target), b"overlay", 0, options),
        f"mount overlay on {target}",
    )


def bind_readonly(source: str, target: str) -> None:
    """A read-only bind mount made in the caller's (the host's) mount namespace. A sandbox's
    user namespace, created later, receives it with the read-only flag locked by the kernel:
    root inside cannot remount it read-write."""
    _check(
        _libc.mount(os.fsencode(source), os.fsencode(target), None, MS_BIND, None),
        f"bind {source} on {target}",
    )
    flags = MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV
    try:
        _check(
            _libc.mount(None, os.fsencode(target), None, flags, None), f"remount {target} read-only"
        )
    except OSError:
        unmount(target)
        raise


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
    """Processes whose command line names something under `directory`: a sandbox's bubblewrap
    (`--bind DIR/rootfs /`) before it has exec'd the init and joined the sandbox's cgroup."""
    needle = os.fsencode(str(directory)) + b"/"
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            if int(pid) != os.getpid() and needle in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(int(pid))
    return found


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


def exited(pidfd: int) -> bool:
    """Whether the process behind a pidfd has exited (a pidfd polls readable from then on)."""
    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    return bool(poller.poll(0))
