"""The local runtime for an ordinary user: no root, no loop mount, the user's subordinate ids.

An ordinary user can own a user namespace and be root in it, with the ids /etc/subuid and
/etc/subgid give it (newuidmap and newgidmap, setuid root, write the map). One such namespace
per state directory, made by `pomona-init hold` and held while that process lives, maps 0 to
the user and 1-65536 to its first 65,536 subordinate ids; the local runtime runs in it as a
worker process (root there: it may mount overlays, make namespaces, change owners within those
ids), and the SDK in the user's process talks to the worker over loopback HTTP with a key of
its own, as it would to `pomona serve`. A later process joins the same namespace (the user owns
it, so the kernel lets it in), so it adopts the sandboxes the last one left.

What differs from the runtime as root (docs/security.md says why each holds):
- every sandbox's ids 0-65535 are the namespace's 1-65536, i.e. the user's subordinate ids:
  root inside is not the user, but the user's sandboxes share that one range (as rootless
  Podman's containers do);
- nothing can be idmapped (an ordinary user may not idmap the host's filesystems), so image
  layers are unpacked with their owners shifted into that range, and the overlay keeps its
  metadata in user.* xattrs;
- the store is a plain directory: no loop mount, so snapshots are plain copies where the
  filesystem has no reflinks; forks stay O(1);
- `image="host"` is refused: overlayfs cannot stack the host's root in a user namespace (its
  mounts are locked together, and a copy without them would show what they cover);
- limits: no cgroup is delegated on a cgroup v1 machine, so pids become a per-user process
  limit inside the sandbox (RLIMIT_NPROC, counted per user namespace), memory a per-process
  address-space limit (RLIMIT_AS), `disk=` a tmpfs of that size (in memory), and CPU is not
  limited at all.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pwd
import secrets
import subprocess
import sys
from pathlib import Path

from pomona.errors import RuntimeUnavailable
from pomona.orchestrator.linux.helpers import helper
from pomona.orchestrator.linux.syscalls import alive, in_user_namespace, start_time

IDS = 65536  # subordinate ids a sandbox needs: 0-65535 inside
__all__ = ["IDS", "Worker", "hold", "in_user_namespace", "release", "subordinate"]
WORKER_DEADLINE = 120.0
# the worker: the server layer's entry (this layer imports nothing above it)
WORKER = (
    "import sys; from pathlib import Path; "
    "from pomona.orchestrator.server.rootless import serve; serve(Path(sys.argv[1]))"
)


def subordinate(kind: str) -> int:
    """The first of the current user's subordinate uids ("uid") or gids ("gid")."""
    path = Path(f"/etc/sub{kind}")
    try:
        user = pwd.getpwuid(os.getuid())
    except KeyError:  # newuidmap, too, refuses a user it cannot name
        raise RuntimeUnavailable(
            f"the local runtime as uid {os.getuid()} needs a user name with {IDS} subordinate "
            f"{kind}s in {path}: useradd the user, then usermod --add-subuids A-B --add-subgids "
            "A-B NAME (as root, with 65,536 ids no other user holds)"
        ) from None
    with contextlib.suppress(OSError):
        for line in path.read_text().splitlines():
            name, start, count = (line.split(":") + ["", "", ""])[:3]
            if name in (user.pw_name, str(user.pw_uid)) and count.isdigit() and int(count) >= IDS:
                return int(start)
    raise RuntimeUnavailable(
        f"the local runtime as {user.pw_name} needs {IDS} subordinate {kind}s in {path}: "
        f"usermod --add-subuids A-B --add-subgids A-B {user.pw_name} (as root, with 65,536 ids "
        "no other user holds: pomona doctor local prints the command)"
    )


def hold(root: Path) -> int:
    """The pid of the process holding the state directory's user namespace, started if no
    live one does."""
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    record = root / "userns.json"
    with open(root / "userns.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        with contextlib.suppress(OSError, ValueError, KeyError):
            held = json.loads(record.read_text())
            if alive(held["pid"], held["start"]):
                return int(held["pid"])
        uid, gid = subordinate("uid"), subordinate("gid")
        proc = subprocess.Popen(
            ["pomona-init", "hold"],
            executable=helper("pomona-init"),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={},
        )
        assert proc.stdin is not None and proc.stdout is not None
        try:
            if proc.stdout.readline().strip() != b"ready":
                raise RuntimeUnavailable("could not make a user namespace for the local runtime")
            for tool, me, first in (
                ("newuidmap", os.getuid(), uid),
                ("newgidmap", os.getgid(), gid),
            ):
                mapped = subprocess.run(
                    [tool, str(proc.pid), "0", str(me), "1", "1", str(first), str(IDS)],
                    capture_output=True,
                    text=True,
                )
                if mapped.returncode:
                    raise RuntimeUnavailable(f"{tool} failed: {mapped.stderr.strip()}")
            proc.stdin.write(b"1")
            proc.stdin.close()
            if proc.stdout.readline().strip() != b"ok":
                raise RuntimeUnavailable("the local runtime's user namespace did not start")
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        record.write_text(json.dumps({"pid": proc.pid, "start": start_time(proc.pid)}))
        return proc.pid


def release(root: Path) -> None:
    """End the process holding the user namespace (once no sandbox is left to need it)."""
    with contextlib.suppress(OSError, ValueError, KeyError, ProcessLookupError):
        held = json.loads((root / "userns.json").read_text())
        if alive(held["pid"], held["start"]):
            os.kill(held["pid"], 9)
        (root / "userns.json").unlink()


class Worker:
    """The local runtime, in the state directory's user namespace, served on loopback."""

    def __init__(self, root: Path):
        self.root = root
        self.process: subprocess.Popen | None = None
        self.url = ""
        self.key = secrets.token_urlsafe(32)
        self._lock: int | None = None  # a shared flock on the state dir's lock while it runs

    def start(self) -> None:
        """Hold the state dir (shared, as every process using it does), then the namespace,
        then start the worker in it; a failure releases all three."""
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._lock = os.open(self.root / "lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        fcntl.flock(self._lock, fcntl.LOCK_SH)
        try:
            self._spawn(hold(self.root))
        except BaseException:
            self.stop()
            raise

    def _spawn(self, pid: int) -> None:
        self.process = subprocess.Popen(
            ["pomona-init", "enter", str(pid), sys.executable, "-c", WORKER, str(self.root)],
            executable=helper("pomona-init"),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            start_new_session=True,
        )
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(self.key.encode() + b"\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline().decode().strip()
        if not line.startswith("http://"):
            raise RuntimeUnavailable(f"the local runtime's worker did not start: {line}")
        self.url = line

    def stop(self) -> None:
        """Close the worker's stdin (it stops serving and exits; sandboxes keep running). The
        last process out of the state dir, when no sandbox is left in it, ends the namespace."""
        if self.process is not None:
            assert self.process.stdin is not None
            with contextlib.suppress(OSError):
                self.process.stdin.close()
            try:
                self.process.wait(WORKER_DEADLINE)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            self.process = None
        if self._lock is None:
            return
        try:
            sandboxes = self.root / "store" / "sandboxes"
            if not (sandboxes.is_dir() and any(sandboxes.iterdir())):
                with contextlib.suppress(BlockingIOError):
                    fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # no one else uses it
                    release(self.root)
        finally:
            os.close(self._lock)
            self._lock = None
