"""`isolation="gvisor"` on the docker runtime: each sandbox's container runs under gVisor's
runsc, an OCI runtime registered with the engine (`./dev services` registers Debian's runsc with
dockerd as `runsc`, ptrace platform: KVM hangs on this machine), so the sandbox's syscalls reach
gVisor's own kernel (the Sentry) instead of the host's.

What changes under it. runsc applies the container's seccomp profile to its init only, and an
exec as the sandbox user keeps the container's capabilities: every exec therefore starts as root
through a small static gate (gvisor_gate.c, bind-mounted read-only at /dev/.pomona-gate) that
drops to the user, sets no_new_privs and loads Pomona's filter (linux/seccomp.py's program, in
/dev/.pomona-filter) before the command runs, as runc would have. And an engine exec's host pid is `runsc exec`'s, not the command's, and
SIGKILL to it leaves the command running inside. Every exec therefore carries a marker in its
environment, and a signal (a timeout's kill, a terminal's signal) is sent from inside the
sandbox, by a helper command as root, to every process that carries the exec's marker: the
command and all it started, as killpg does for a runc container.

And runsc mounts a tmpfs of its own over an empty /tmp, which the engine's archive API (the
files API) cannot see: a file written to /tmp would not be there inside. A sandbox's /tmp is
therefore given one empty file (`/tmp/.pomona-gvisor`) before it starts, so it stays the
container's own directory.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import io
import os
import secrets
import shutil
import signal
import subprocess
import tarfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from pomona.errors import InvalidRequest, RuntimeUnavailable
from pomona.orchestrator.linux import seccomp
from pomona.orchestrator.types import SANDBOX_UID, ExecResult

ISOLATIONS = ("default", "gvisor")
GATE, FILTER = "/dev/.pomona-gate", "/dev/.pomona-filter"  # in the sandbox, read-only
GATE_SOURCE = Path(__file__).with_name("gvisor_gate.c")
GATE_DIR = Path(os.environ.get("POMONA_CACHE", "/var/cache/pomona")) / "bin"
MARKER = "POMONA_EXEC"
# $1: the marker's value, $2: the signal; twice over, for what forked during the first pass
_SIGNAL_MARKED = (
    'for pass in 1 2; do for d in /proc/[0-9]*; do case "$(tr "\\000" "\\n" <"$d/environ" '
    '2>/dev/null)" in *"' + MARKER + '=$1"*) kill -s "$2" "${d#/proc/}" 2>/dev/null;; esac; '
    "done; done; true"
)
Signaller = Callable[[int], Awaitable[None]]


def check_isolation(isolation: str) -> str:
    if isolation not in ISOLATIONS:
        raise InvalidRequest(f"isolation must be one of {ISOLATIONS}, not {isolation!r}")
    return isolation


def check_registered(info: dict[str, Any], runtime: str, engine: str) -> None:
    """The engine knows the OCI runtime, or the error says how to register it."""
    if runtime not in (info.get("Runtimes") or {}):
        raise RuntimeUnavailable(
            f"isolation='gvisor' needs gVisor's runsc registered with the {engine} engine as "
            f"{runtime!r} (it has {sorted(info.get('Runtimes') or {})}): apt-get install runsc, "
            'then add {"runtimes": {"runsc": {"path": "/usr/bin/runsc", "runtimeArgs": '
            '["--platform=ptrace", "--network=host", "--file-access=shared"]}}} to '
            "/etc/docker/daemon.json and reload dockerd (kill -HUP); ./dev services does both"
        )


def new_marker() -> str:
    return secrets.token_hex(8)


def signaller(run: Callable[[list[str]], Awaitable[ExecResult]], marker: str) -> Signaller:
    """Send a signal to every process of one exec, from inside the sandbox."""

    async def send(signum: int) -> None:
        name = signal.Signals(signum).name.removeprefix("SIG")
        await run(["/bin/sh", "-c", _SIGNAL_MARKED, "pomona-signal", marker, name])

    return send


def tmp_keeper() -> bytes:
    """A tar of one empty file, for /tmp (see above)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        info = tarfile.TarInfo(".pomona-gvisor")
        info.mode = 0o644
        tar.addfile(info, io.BytesIO(b""))
    return buffer.getvalue()


def gated(argv: list[str], user: str) -> list[str]:
    """The command line that takes `argv` in through the gate, as root or the sandbox user."""
    uid = "0" if user == "root" else str(SANDBOX_UID)
    return [GATE, FILTER, uid, uid, *argv]


@functools.cache
def gate_mounts(state_dir: str) -> dict[str, str]:
    """Host path -> sandbox path of the gate and the filter it loads, built once."""
    program = seccomp.program()
    digest = hashlib.sha256(program).hexdigest()[:12]
    filter_file = Path(state_dir) / f"seccomp-{digest}.bpf"
    if not filter_file.exists():
        filter_file.parent.mkdir(parents=True, exist_ok=True)
        staging = filter_file.with_suffix(f".{os.getpid()}.tmp")
        staging.write_bytes(program)
        staging.replace(filter_file)
    return {_gate_binary(): GATE, str(filter_file): FILTER}


def _gate_binary() -> str:
    source = GATE_SOURCE.read_bytes()
    binary = GATE_DIR / f"pomona-gvisor-gate-{hashlib.sha256(source).hexdigest()[:12]}"
    if binary.exists():
        return str(binary)
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise RuntimeUnavailable(
            "isolation='gvisor' builds a small static gate at first use and needs a C "
            "compiler for it: apt-get install gcc libc6-dev (./dev setup)"
        )
    GATE_DIR.mkdir(parents=True, exist_ok=True)
    with open(GATE_DIR / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not binary.exists():
            staging = binary.with_suffix(".tmp")
            built = subprocess.run(
                [compiler, "-static", "-O2", "-o", str(staging), str(GATE_SOURCE)],
                capture_output=True,
                text=True,
            )
            if built.returncode:
                raise RuntimeUnavailable(f"building the gVisor gate failed: {built.stderr[-500:]}")
            staging.replace(binary)
    return str(binary)
