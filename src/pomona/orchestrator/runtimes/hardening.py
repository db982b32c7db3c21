"""The security floor Pomona sets itself on container runtimes (docker, podman, kubernetes),
rather than inheriting whatever the engine defaults to: Docker's defaults are the floor, and an
engine whose defaults are weaker (Podman's profile lets user namespaces and keyrings through)
or configured otherwise still gets it.

- A seccomp profile in the engines' JSON format with allow-list semantics: the syscalls
  libseccomp knows for x86-64 are listed as allowed except those the `local` runtime denies
  (linux/seccomp.py: mounts, keyrings, BPF, perf, modules, clocks, io_uring, ...) and those
  Docker's profile grants only with a capability no Pomona sandbox holds; anything not listed
  (newer than libseccomp, or of another ABI) fails with ENOSYS. Namespace flags on clone and
  unshare are refused as on `local` (ENOSYS, the default action, as there), clone3 is ENOSYS
  (so libc falls back to clone, whose flags the filter reads), personality may only take the
  values Docker allows, and AF_VSOCK sockets (the hypervisor's, where the machine is a VM) are
  refused.
- The capabilities root keeps inside: Docker's default set without NET_RAW (raw and packet
  sockets), MKNOD (device nodes), AUDIT_WRITE and SETFCAP, which no sandbox workload needs.
- Masked and read-only /proc and /sys paths: Docker's lists, plus the RAPL power counters (a
  known side channel) masked.
"""

from __future__ import annotations

import errno
import functools
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from pomona.orchestrator.linux import seccomp

ROOT_CAPABILITIES = (
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "SETGID",
    "SETUID",
    "SETPCAP",
    "NET_BIND_SERVICE",
    "SYS_CHROOT",
)
MASKED_PATHS = (
    "/proc/asound",
    "/proc/acpi",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
)
READ_ONLY_PATHS = ("/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger")

CAPABILITY_GATED, PERSONALITIES = seccomp.CAPABILITY_GATED, seccomp.PERSONALITIES
AF_VSOCK = 40
_RULED = {"clone", "unshare", "clone3", "personality", "socket"}


def _arg(index: int, value: int, op: str, value_two: int | None = None) -> dict[str, Any]:
    arg: dict[str, Any] = {"index": index, "value": value, "op": op}
    if value_two is not None:
        arg["valueTwo"] = value_two
    return arg


@functools.cache
def seccomp_profile() -> dict[str, Any]:
    """The profile as the engines read it (`--security-opt seccomp=...`, a kubelet's Localhost
    profile); built once per process from this machine's libseccomp."""
    known = seccomp._known_syscalls(seccomp._library())
    refused = seccomp.DENIED | CAPABILITY_GATED
    allowed = sorted(name for name in known if name not in refused and name not in _RULED)
    no_namespaces = [_arg(0, seccomp.NAMESPACE_FLAGS, "SCMP_CMP_MASKED_EQ", 0)]
    return {
        "defaultAction": "SCMP_ACT_ERRNO",
        "defaultErrnoRet": errno.ENOSYS,
        "architectures": ["SCMP_ARCH_X86_64"],
        "syscalls": [
            {"names": allowed, "action": "SCMP_ACT_ALLOW"},
            {"names": ["clone", "unshare"], "action": "SCMP_ACT_ALLOW", "args": no_namespaces},
            # ENOSYS said here, not left to the default: libc falls back to clone only on
            # ENOSYS, and an engine that ignores defaultErrnoRet would say EPERM (no threads)
            {"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": errno.ENOSYS},
            {
                "names": ["socket"],
                "action": "SCMP_ACT_ALLOW",
                "args": [_arg(0, AF_VSOCK, "SCMP_CMP_NE")],
            },
            *(
                {
                    "names": ["personality"],
                    "action": "SCMP_ACT_ALLOW",
                    "args": [_arg(0, p, "SCMP_CMP_EQ")],
                }
                for p in PERSONALITIES
            ),
            {
                "names": sorted(refused & known.keys()),
                "action": "SCMP_ACT_ERRNO",
                "errnoRet": errno.EPERM,
            },
        ],
    }


def seccomp_json() -> str:
    return json.dumps(seccomp_profile(), separators=(",", ":"))


def seccomp_file(directory: str) -> str:
    """The profile in a file under `directory` (named by its content), for engines that take a
    path rather than the profile itself (Podman's Docker-compatible API)."""
    text = seccomp_json()
    path = Path(directory) / f"seccomp-{hashlib.sha256(text.encode()).hexdigest()[:12]}.json"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        staging = path.with_suffix(f".{os.getpid()}.tmp")
        staging.write_text(text)
        staging.replace(path)
    return str(path)
