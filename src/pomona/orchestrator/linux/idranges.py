"""Host id ranges, one per live sandbox, machine-wide.

Every `local` sandbox maps uids and gids 0-65535 inside to a range of host ids of its own, so
root inside is an unprivileged host id that owns nothing of the host, of the orchestrator or of
another sandbox (Docker's userns-remap, rootless Podman and Kubernetes' `hostUsers: false` do the
same). Ranges are handed out from one machine-wide directory, so sandboxes of different state
directories and processes never share one: range i is host ids FIRST + i * SIZE .. + SIZE - 1,
and is held while the file `i` exists there (created with O_EXCL, so two claimants can never
both win). The sandbox's record in its state store names its range too.

A claim names its state directory and sandbox, the creator (pid and start time) and, once it
runs, the sandbox's init. It is released when the sandbox is torn down, after its last process
is gone. A claim whose creator and init are both dead is stale (a process killed mid-create, or
a state directory deleted with sandboxes in it): it is taken over, under a lock, only when a
claimant meets it.

The ids FIRST - 1 (OUTSIDE) and everything below FIRST + SIZE * COUNT are above the ids any
image uses (0-65535), so a file owned by OUTSIDE shows as the overflow id in every sandbox:
state directories are owned by it, and root inside cannot open them even where it can see them.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import random
import time
from pathlib import Path

from pomona.errors import SandboxFailed
from pomona.orchestrator.linux.syscalls import alive

SIZE = 65536  # ids per sandbox: 0-65535 inside
FIRST = 0x70000000  # 1879048192: above the ranges /etc/subuid and systemd-nspawn hand out
COUNT = 4094  # up to 0x7FFE0000, where systemd's "foreign" range begins (ids stay below 2**31)
OUTSIDE = FIRST - 1  # owns state directories: never mapped in any sandbox
STALE_UNREADABLE = 60.0  # seconds after which a claim nobody finished writing is stale


def claims_dir() -> Path:
    return Path(os.environ.get("POMONA_ID_RANGES", "/var/lib/pomona-id-ranges"))


def _directory() -> Path:
    path = claims_dir()
    if not path.is_dir():
        path.mkdir(parents=True, exist_ok=True)
        path.chmod(0o700)
        os.chown(path, OUTSIDE, 0)
    return path


_next = random.randrange(COUNT)  # where this process starts looking: claimants spread out


def claim(state_dir: Path, sandbox_id: str, owner: tuple[int, int]) -> int:
    """A free range for the sandbox: its first host id."""
    global _next
    directory = _directory()
    content = _content(state_dir, sandbox_id, owner, None)
    for k in range(COUNT):
        index = (_next + k) % COUNT
        path = directory / str(index)
        for _ in range(2):  # a stale claim is taken over once, then tried again
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            except FileExistsError:
                if not _reclaim(directory, path):
                    break
                continue
            try:
                os.write(fd, content)
            finally:
                os.close(fd)
            _next = index + 1
            return FIRST + index * SIZE
    raise SandboxFailed(
        f"all {COUNT} host id ranges are held by live sandboxes (claims in {directory})"
    )


def note_init(
    base: int, state_dir: Path, sandbox_id: str, owner: tuple[int, int], init: tuple[int, int]
) -> None:
    """Record the sandbox's init in its claim: the range stays held while the init lives,
    whatever becomes of the process that created it."""
    if base < FIRST:
        return  # an ordinary user's sandbox: no claim
    path = claims_dir() / str(_index(base))
    staged = path.with_name(f".{path.name}.{os.getpid()}")
    staged.write_bytes(_content(state_dir, sandbox_id, owner, init))
    staged.replace(path)


def release(base: int, state_dir: Path, sandbox_id: str) -> None:
    """Give the range back (once nothing of the sandbox lives), if the claim is still this
    sandbox's (an ordinary user's sandboxes claim none: their base is below FIRST)."""
    if base < FIRST:
        return
    path = claims_dir() / str(_index(base))
    with contextlib.suppress(OSError, ValueError):
        data = json.loads(path.read_bytes())
        if data["state"] == str(state_dir) and data["sandbox"] == sandbox_id:
            path.unlink()


def release_all(state_dir: Path) -> list[int]:
    """Give back every range claimed for sandboxes of a state directory (`pomona gc`, once none
    of them lives). The first host ids of the ranges released."""
    released = []
    with contextlib.suppress(FileNotFoundError):
        for path in claims_dir().iterdir():
            with contextlib.suppress(OSError, ValueError):
                if path.name.isdigit() and json.loads(path.read_bytes())["state"] == str(state_dir):
                    path.unlink()
                    released.append(FIRST + int(path.name) * SIZE)
    return released


def _index(base: int) -> int:
    index, offset = divmod(base - FIRST, SIZE)
    if offset or not 0 <= index < COUNT:
        raise SandboxFailed(f"{base} is not the first id of a sandbox's range")
    return index


def _content(
    state_dir: Path, sandbox_id: str, owner: tuple[int, int], init: tuple[int, int] | None
) -> bytes:
    return json.dumps(
        {"state": str(state_dir), "sandbox": sandbox_id, "owner": owner, "init": init}
    ).encode()


def _reclaim(directory: Path, path: Path) -> bool:
    """Remove a stale claim (under the directory's lock, so two claimants never both do);
    whether it was stale."""
    with open(directory / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            data = json.loads(path.read_bytes())
            holders = [data["owner"], *([data["init"]] if data["init"] else [])]
            if any(alive(pid, start) for pid, start in holders):
                return False
        except FileNotFoundError:
            return True  # released meanwhile: try again
        except (OSError, ValueError, KeyError, TypeError):
            with contextlib.suppress(FileNotFoundError):
                if time.time() - path.stat().st_mtime < STALE_UNREADABLE:
                    return False  # being written right now
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        return True
