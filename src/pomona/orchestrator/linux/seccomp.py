"""The seccomp filter every process of a `local` sandbox runs under.

Built once per process with libseccomp (ctypes against the system's libseccomp.so.2, Debian's
`libseccomp2`; the Python bindings are packaged for the system Python only), in the default-deny
spirit of Docker's profile: every syscall libseccomp knows for x86-64 is allowed unless it is on
the deny list below, and any other (newer than libseccomp, or of another ABI) fails with ENOSYS,
which libc treats as "not here" and falls back from. The program is exported as raw BPF, which
pomona-init (init.c) loads for a sandbox's init and pomona-enter (enter.c) for each command it
takes into the sandbox, both from one sealed memfd.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import fcntl
import functools
import os

from pomona.errors import SystemCallFailed

SCMP_ACT_ALLOW = 0x7FFF0000
SCMP_CMP_EQ = 4
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
# What Docker's profile allows only to holders of CAP_SYS_PTRACE, CAP_SYS_NICE or CAP_SYS_ADMIN,
# which no Pomona sandbox holds: cross-process memory and descriptor comparison, NUMA policy,
# and joining or renaming namespaces (pomona-init and pomona-enter do both before they load the
# filter). Refused on every runtime (runtimes/hardening.py for the container engines).
CAPABILITY_GATED = frozenset(
    {
        "kcmp",
        "process_vm_readv",
        "process_vm_writev",
        "get_mempolicy",
        "set_mempolicy",
        "set_mempolicy_home_node",
        "mbind",
        "move_pages",
        "migrate_pages",
        "setns",
        "sethostname",
        "setdomainname",
    }
)
# personality(2) with these only, as in Docker's profile: Linux, its 32-bit uname, address
# space randomization off (for debuggers), and the query; other execution domains are refused
PERSONALITIES = (0x0, 0x8, 0x20000, 0x20008, 0xFFFFFFFF)


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
        raise SystemCallFailed(
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
        raise SystemCallFailed(
            -result, f"seccomp rule for syscall {number}: {os.strerror(-result)}"
        )


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
        raise SystemCallFailed("seccomp_init failed")
    try:
        # a binary tree over syscall numbers: a few comparisons per syscall instead of hundreds
        lib.seccomp_attr_set(ctx, SCMP_FLTATR_CTL_OPTIMIZE, 2)
        for name, number in _known_syscalls(lib).items():
            if name in DENIED or name in CAPABILITY_GATED:
                _rule(lib, ctx, _errno(errno.EPERM), number)
            elif name in ("clone", "unshare"):  # flags are the first argument of both
                _rule(lib, ctx, SCMP_ACT_ALLOW, number, _masked(0, NAMESPACE_FLAGS, 0))
            elif name == "personality":
                for value in PERSONALITIES:
                    _rule(lib, ctx, SCMP_ACT_ALLOW, number, _Cmp(0, SCMP_CMP_EQ, value, 0))
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
                raise SystemCallFailed(-result, f"seccomp_export_bpf: {os.strerror(-result)}")
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
    """A sealed memfd holding the program: nothing can change it once written (no write, grow,
    shrink or unseal, for anyone who reaches it through /proc either), so no sandbox can change
    the filter another gets."""
    fd = os.memfd_create("pomona-seccomp", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    os.write(fd, program())
    fcntl.fcntl(
        fd,
        fcntl.F_ADD_SEALS,
        fcntl.F_SEAL_WRITE | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_SEAL,
    )
    return fd


@functools.cache
def shared_fd() -> int:
    """The program in one sealed memfd this process keeps open, passed to every pomona-init and
    pomona-enter it starts (they read it with pread, so the shared offset never moves)."""
    return memfd()
