"""The two static C programs of the `local` runtime, built at first use with the system's cc.

pomona-init (init.c) builds a sandbox and stays in it as its pid 1; pomona-enter (enter.c) takes
every command into one. Static, so they run whatever the image holds, and in C because each runs
between namespaces where Python would need a preexec_fn (a fork of the whole orchestrator, tens
of milliseconds, instead of a vfork). Each is built once per machine, and again when its source
changes (the binary's name carries the source's hash).
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from pomona.errors import RuntimeUnavailable
from pomona.orchestrator.linux.syscalls import in_user_namespace

SOURCES = {"pomona-init": "init.c", "pomona-enter": "enter.c"}


def cache_dir() -> Path:
    """POMONA_CACHE: /var/cache/pomona as the host's root, else the user's ~/.cache/pomona."""
    host_root = os.geteuid() == 0 and not in_user_namespace()
    default = "/var/cache/pomona" if host_root else os.path.expanduser("~/.cache/pomona")
    return Path(os.environ.get("POMONA_CACHE", default))


def build_dir() -> Path:
    return cache_dir() / "bin"


@functools.cache
def helper(name: str) -> str:
    """The path of the built helper, building it if this source has not been built yet."""
    source_path = Path(__file__).with_name(SOURCES[name])
    source = source_path.read_bytes()
    directory = build_dir()
    binary = directory / f"{name}-{hashlib.sha256(source).hexdigest()[:12]}"
    if binary.exists():
        return str(binary)
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise RuntimeUnavailable(
            f"the local runtime builds {name} at first use and needs a C compiler for it: "
            "apt-get install gcc libc6-dev (./dev setup)"
        )
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not binary.exists():
            staging = binary.with_suffix(".tmp")
            built = subprocess.run(
                [compiler, "-static", "-O2", "-o", str(staging), str(source_path)],
                capture_output=True,
                text=True,
            )
            if built.returncode:
                raise RuntimeUnavailable(f"building {name} failed: {built.stderr.strip()[-500:]}")
            staging.replace(binary)
    return str(binary)
