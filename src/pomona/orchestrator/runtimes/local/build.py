"""Building one local sandbox (its writable layer, its init's instructions, its init) and
taking it down again.

Everything privileged happens in pomona-init (linux/init.c), which builds the sandbox inside
namespaces of its own and stays as its pid 1; this side prepares the files it needs, moves it
into the sandbox's cgroup, and tells it to go on. Three channels, no polling: the instructions on
its stdin (a memfd), its report on its stdout ("pid N", then "ok" or "error: ..."), and a pipe it
waits on before it hands the sandbox over, so that a creator which dies half-way leaves nothing
running (the pipe reads EOF and the init exits).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
import threading
import time
from pathlib import Path

from pomona.errors import InvalidRequest, PomonaError, SandboxFailed
from pomona.orchestrator.linux import idranges, seccomp, syscalls
from pomona.orchestrator.linux.helpers import helper
from pomona.orchestrator.linux.safefs import remove_tree
from pomona.orchestrator.runtimes.local.records import Live
from pomona.orchestrator.runtimes.local.store import run
from pomona.orchestrator.types import SANDBOX_HOME, SANDBOX_UID, NetworkMode, SandboxSpec

INIT_DEADLINE = 120.0  # seconds for the init to build the sandbox (a loaded machine is slow)
EXIT_DEADLINE = 10.0  # seconds for a killed init's namespace to empty
FICLONE = 0x40049409  # ioctl: make the target share the source's blocks


def prepare(live: Live, spec: SandboxSpec, plain: bool = False) -> None:
    """The sandbox's writable layer: directories in the store, or, with a disk limit, an ext4
    image of exactly that size (this kernel has no quota support), mounted by the init only in
    the sandbox's own mount namespace."""
    d = live.dir
    if spec.limits.disk and plain:  # no loop device for an ordinary user: a tmpfs of that size
        (d / "disk").mkdir()
        live.record.disk = True
    elif spec.limits.disk:
        clone(disk_template(d.parent.parent / "disks", spec.limits.disk), d / "disk.img")
        (d / "disk").mkdir()
        live.record.disk = True
    else:
        for sub in ("upper", "work"):
            (d / sub).mkdir()
    (d / "rootfs").mkdir()


def disk_template(directory: Path, size: int) -> Path:
    """An empty ext4 image of that size, made once per size (mkfs costs tens of milliseconds,
    a clone of its result next to nothing); made under a temporary name, so processes sharing
    the store never use one half made."""
    template = directory / f"{size}.img"
    if not template.exists():
        staged = directory / f".{size}.img.{os.getpid()}.{threading.get_ident()}"
        try:
            with open(staged, "wb") as f:
                f.truncate(size)
            run("mkfs.ext4", "-q", "-F", "-O", "^has_journal", "-m", "0", str(staged))
            staged.replace(template)
        finally:
            staged.unlink(missing_ok=True)
    return template


def clone(source: Path, target: Path) -> None:
    """A copy that shares the source's blocks (a reflink on the XFS store), else a sparse copy."""
    with open(source, "rb") as src, open(target, "xb") as dst:
        try:
            fcntl.ioctl(dst.fileno(), FICLONE, src.fileno())
        except OSError:
            run("cp", "--sparse=always", str(source), str(target))


def instructions(live: Live, spec: SandboxSpec, go: int, plain: bool = False) -> bytes:
    """What pomona-init reads on its stdin: NUL-separated words."""
    record, d = live.record, live.dir
    uid = 0 if spec.user == "root" else SANDBOX_UID
    words = ["ids", str(record.ids), "dir", str(d), "seccomp", str(seccomp.shared_fd())]
    words += ["go", str(go), "hostname", record.id[:63]]
    words += ["net", "host" if spec.network == NetworkMode.full else "own"]
    if plain:
        words += ["layers", "plain"]
    if record.disk:
        words += ["tmpdisk", str(spec.limits.disk)] if plain else ["disk", str(d / "disk.img")]
    for lower in record.lowers:
        words += ["lower", lower]
    dirs = (("/tmp", "1777", -1), (spec.workdir, "755", uid), (SANDBOX_HOME, "755", uid))
    for path, mode, owner in dirs:
        words += ["mkdir", path, mode, str(owner)]
    for m in spec.mounts:
        source = m.host_path()
        if not os.path.exists(source):
            raise InvalidRequest(f"mount source {m.source} does not exist on the host")
        words += ["bind", source, m.target, "ro" if m.read_only else "rw"]
    return b"".join(w.encode() + b"\0" for w in words)


def start_init(live: Live, spec: SandboxSpec, state_dir: Path, plain: bool = False) -> None:
    """Start pomona-init and see it through to a ready sandbox (or raise, saying why)."""
    go_read, go_write = os.pipe()
    config = os.memfd_create("pomona-init-instructions")
    try:
        os.write(config, instructions(live, spec, go_read, plain))
        os.lseek(config, 0, os.SEEK_SET)
        # a clean environment: the orchestrator's (API keys, tokens) must not reach the sandbox
        live.process = subprocess.Popen(
            ["pomona-init"],
            executable=helper("pomona-init"),
            stdin=config,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            pass_fds=(seccomp.shared_fd(), go_read),
            start_new_session=True,
            env={},
        )
    finally:
        os.close(config)
        os.close(go_read)
    assert live.process.stdout is not None
    report = live.process.stdout.fileno()
    deadline = time.monotonic() + INIT_DEADLINE
    try:
        first = _line(report, deadline)
        if not first.startswith("pid "):
            raise SandboxFailed(f"the sandbox's init failed: {first or _exit(live)}")
        live.note_init(int(first.split()[1]))
        try:
            live.cgroup.join(live.record.init_pid)  # before the sandbox runs a thing
        except ProcessLookupError:  # it failed already: its report says why
            raise SandboxFailed(f"the sandbox's init failed: {_line(report, deadline)}") from None
        record = live.record
        owner, init = (record.owner_pid, record.owner_start), (record.init_pid, record.init_start)
        idranges.note_init(record.ids, state_dir, record.id, owner, init)
        live.save()
        os.write(go_write, b"1")
    finally:
        os.close(go_write)
    done = _line(report, deadline)
    if done != "ok":
        raise SandboxFailed(f"the sandbox's init failed: {done or _exit(live)}")
    live.process.stdout.close()
    if not live.hold():
        raise SandboxFailed("the sandbox's init exited as soon as it was ready")


def _line(fd: int, deadline: float) -> str:
    """One line of the init's report ("" at EOF), waiting no longer than the deadline."""
    data = b""
    while not data.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not syscalls.readable(fd, left):
            raise SandboxFailed(f"the sandbox's init did not answer in {INIT_DEADLINE:.0f} s")
        chunk = os.read(fd, 1)  # byte by byte: what follows the line is the next line's
        if not chunk:
            break
        data += chunk
    return data.decode(errors="replace").strip()[:2000]


def _exit(live: Live) -> str:
    assert live.process is not None
    with contextlib.suppress(subprocess.TimeoutExpired):
        return f"it exited with status {live.process.wait(5)}"
    return "it stopped answering"


def teardown(live: Live, state_dir: Path) -> None:
    """Kill, wait for the sandbox's last process, remove its cgroup and files, give back its
    id range. Safe to repeat after a crash: nothing of it is mounted in the host's namespace."""
    live.kill()
    if live.pidfd is not None:
        syscalls.exited(live.pidfd, EXIT_DEADLINE)
    if live.process:
        with contextlib.suppress(Exception):
            live.process.kill()  # only pomona-init's parent, or a half-made init
            live.process.wait(EXIT_DEADLINE)
    live.cgroup.destroy()
    live.release()
    if live.record.ids:
        idranges.release(live.record.ids, state_dir, live.record.id)
    remove_directory(live.dir)


def remove_directory(directory: Path) -> None:
    """Delete a sandbox's directory however deep its tree (never across a mount still there)."""
    with contextlib.suppress(OSError, PomonaError):
        parent = os.open(directory.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            remove_tree(parent, directory.name)
        finally:
            os.close(parent)
