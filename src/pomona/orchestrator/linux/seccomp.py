"""The seccomp filter every process of a `local` sandbox runs under.

Built once per process with libseccomp (ctypes against the system's libseccomp.so.2, Debian's
`libseccomp2`; the Python bindings are packaged for the system Python only), in the default-deny
spirit of Docker's profile: every syscall libseccomp knows for x86-64 is allowed unless it is on
the deny list below, and any other (newer than libseccomp, or of another ABI) fails with ENOSYS,
which libc treats as "not here" and falls back from. The program is exported as raw BPF, which
bubblewrap loads for a sandbox's init (`--seccomp FD`) and pomona-enter (seccomp_exec.c) loads for
each command it takes into the sandbox.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import fcntl
import functools
import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from pomona.errors import RuntimeUnavailable

SCMP_ACT_ALLOW = 0x7FFF0000
SCMP_CMP_MASKED_EQ = 7
SCMP_ARCH_NATIVE = 0
SCMP_FLTATR_CTL_OPTIMIZE = 8
SYSCALL_RANGE = 512  # x86-64 syscall numbers stay below this (the kernel is near 470)

# Namespace flags: a clone or unshare carrying any of them is refused (no nested namespaces,
# above all no new user namespace, whose root would regain capabilities over fresh mounts).
NAMESPACE_FLAGS = (
    0x00020000
    | 0x02000000
    | 0x04000000
    | 0x08000000
    | 0x10000000
    | 0x20000000
    | 0x40000000
    | 0x00000080
)  # NEWNS CGROUP UTS IPC USER PID NET TIME

DENIED = frozenset(
    {
        # mounts and the root: read-only must stay read-only for root inside
        "mount",
        "umount",
        "umount2",
        "pivot_root",
        "fsopen",
        "fsconfig",
        "fsmount",
        "fspick",
        "move_mount",
        "open_tree",
        "mount_setattr",
        # kernel-global state: keyrings, BPF, perf, modules, kexec, clocks, swap, reboot
        "keyctl",
        "add_key",
        "request_key",
        "bpf",
        "perf_event_open",
        "kexec_load",
        "kexec_file_load",
        "init_module",
        "finit_module",
        "delete_module",
        "create_module",
        "get_kernel_syms",
        "query_module",
        "settimeofday",
        "clock_settime",
        "clock_adjtime",
        "adjtimex",
        "stime",
        "swapon",
        "swapoff",
        "reboot",
        "acct",
        "quotactl",
        "quotactl_fd",
        "nfsservctl",
        "syslog",
        "vhangup",
        "iopl",
        "ioperm",
        "lookup_dcookie",
        "_sysctl",
        "uselib",
        "ustat",
        "sysfs",
        "vm86",
        "vm86old",
        # file handles bypass path checks ("shocker"); userfaultfd and io_uring widen kernel races
        "open_by_handle_at",
        "name_to_handle_at",
        "userfaultfd",
        "io_uring_setup",
        "io_uring_enter",
        "io_uring_register",
        "fanotify_init",
    }
)


class _Cmp(ctypes.Structure):
    _fields_ = [
        ("arg", ctypes.c_uint),
        ("op", ctypes.c_int),
        ("a", ctypes.c_uint64),
        ("b", ctypes.c_uint64),
    ]


def _errno(code: int) -> int:
    return 0x00050000 | code  # SCMP_ACT_ERRNO


def _library() -> ctypes.CDLL:
    name = ctypes.util.find_library("seccomp") or "libseccomp.so.2"
    try:
        lib = ctypes.CDLL(name, use_errno=True)
    except OSError as e:
        raise OSError(
            f"libseccomp is missing ({e}): apt-get install libseccomp2 (./dev setup)"
        ) from e
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_rule_add_array.argtypes = [
        ctypes.c_void_p,
        ctypes.c_uint32,
        ctypes.c_int,
        ctypes.c_uint,
        ctypes.POINTER(_Cmp),
    ]
    lib.seccomp_syscall_resolve_num_arch.restype = ctypes.c_void_p
    lib.seccomp_syscall_resolve_num_arch.argtypes = [ctypes.c_uint32, ctypes.c_int]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_export_bpf.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    lib.seccomp_attr_set.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32]
    return lib


def _rule(lib: ctypes.CDLL, ctx: int, action: int, number: int, *cmps: _Cmp) -> None:
    array = (_Cmp * len(cmps))(*cmps) if cmps else None
    result = lib.seccomp_rule_add_array(ctx, action, number, len(cmps), array)
    if result < 0:
        raise OSError(-result, f"seccomp rule for syscall {number}: {os.strerror(-result)}")


def _masked(arg: int, mask: int, value: int) -> _Cmp:
    return _Cmp(arg, SCMP_CMP_MASKED_EQ, mask, value)


def _known_syscalls(lib: ctypes.CDLL) -> dict[str, int]:
    libc = ctypes.CDLL(None)
    names = {}
    for number in range(SYSCALL_RANGE):
        pointer = lib.seccomp_syscall_resolve_num_arch(SCMP_ARCH_NATIVE, number)
        if pointer:
            names[ctypes.string_at(pointer).decode()] = number
            libc.free(ctypes.c_void_p(pointer))
    return names


@functools.cache
def program() -> bytes:
    """The filter as raw BPF (struct sock_filter[]), built once per process."""
    lib = _library()
    ctx = lib.seccomp_init(_errno(errno.ENOSYS))
    if not ctx:
        raise OSError("seccomp_init failed")
    try:
        # a binary tree over syscall numbers: a few comparisons per syscall instead of hundreds
        lib.seccomp_attr_set(ctx, SCMP_FLTATR_CTL_OPTIMIZE, 2)
        for name, number in _known_syscalls(lib).items():
            if name in DENIED:
                _rule(lib, ctx, _errno(errno.EPERM), number)
            elif name in ("clone", "unshare"):  # flags are the first argument of both
                _rule(lib, ctx, SCMP_ACT_ALLOW, number, _masked(0, NAMESPACE_FLAGS, 0))
            elif name == "clone3":  # its flags sit in a struct seccomp cannot read: the default
                continue  # action (ENOSYS) makes libc fall back to clone, whose flags it reads
            else:
                _rule(lib, ctx, SCMP_ACT_ALLOW, number)
        read, write = os.pipe()
        try:
            result = lib.seccomp_export_bpf(ctx, write)
            os.close(write)
            write = -1
            if result < 0:
                raise OSError(-result, f"seccomp_export_bpf: {os.strerror(-result)}")
            chunks = []
            while chunk := os.read(read, 65536):
                chunks.append(chunk)
        finally:
            os.close(read)
            if write >= 0:
                os.close(write)
        return b"".join(chunks)
    finally:
        lib.seccomp_release(ctx)


def memfd() -> int:
    """A file descriptor holding the program, for bubblewrap's `--seccomp FD` (it reads it once)."""
    fd = os.memfd_create("pomona-seccomp", 0)
    os.write(fd, program())
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


LOADER_SOURCE = Path(__file__).with_name("seccomp_exec.c")
LOADER_DIR = Path(os.environ.get("POMONA_CACHE", "/var/cache/pomona")) / "bin"


@functools.cache
def loader() -> str:
    """pomona-enter, the static helper that takes a command into a sandbox under the filter,
    built once per machine (and again when its source changes) with the system's C compiler."""
    source = LOADER_SOURCE.read_bytes()
    binary = LOADER_DIR / f"pomona-enter-{hashlib.sha256(source).hexdigest()[:12]}"
    if binary.exists():
        return str(binary)
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise RuntimeUnavailable(
            "the local runtime builds a small seccomp loader at first use and "
            "needs a C compiler for it: apt-get install gcc libc6-dev (./dev setup)"
        )
    LOADER_DIR.mkdir(parents=True, exist_ok=True)
    with open(LOADER_DIR / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not binary.exists():
            staging = binary.with_suffix(".tmp")
            built = subprocess.run(
                [compiler, "-static", "-O2", "-o", str(staging), str(LOADER_SOURCE)],
                capture_output=True,
                text=True,
            )
            if built.returncode:
                raise RuntimeUnavailable(
                    f"building the seccomp loader failed: {built.stderr.strip()[-500:]}"
                )
            staging.replace(binary)
    return str(binary)


@functools.cache
def shared_fd() -> int:
    """The program in a memfd this process keeps open, passed to every loader it starts (the
    loader reads it with pread, so the shared offset never moves)."""
    return memfd()
