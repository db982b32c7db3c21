"""Snapshots of local sandboxes: an upper layer copied into an immutable layer of the store.

The copy is of the upper layer as stored, with the ids inside (0-65535), never through a
sandbox's id mapping, so a snapshot belongs to no range: a fork stacks it, idmapped like any
image layer, under the fresh upper layer of a sandbox with a range of its own. O(1): nothing
is copied at fork.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import time
from pathlib import Path

from pomona import progress
from pomona.errors import SandboxConflict, SandboxFailed, SnapshotNotFound
from pomona.orchestrator.runtimes.local.records import UPPER_FD, Live
from pomona.orchestrator.types import SandboxSpec, SnapshotInfo


async def take(state: Path, live: Live, snapshot_id: str) -> SnapshotInfo:
    target = state / "snapshots" / snapshot_id
    try:
        target.mkdir()
    except FileExistsError:
        raise SandboxConflict(f"snapshot {snapshot_id!r} already exists") from None
    try:
        # the init holds the upper directory (on the store, or on the sandbox's own disk)
        upper = live.open_checked(f"fd/{UPPER_FD}", os.O_PATH | os.O_DIRECTORY)
        try:
            source = Path(f"/proc/self/fd/{upper}")
            # reflinks where the filesystem has them (xfs, btrfs); a plain copy otherwise
            proc = await asyncio.create_subprocess_exec(
                "cp",
                "-a",
                "--reflink=auto",
                f"{source}/.",
                str(target / "layer"),
                stderr=asyncio.subprocess.PIPE,
                pass_fds=(upper,),
            )
            _, err = await progress.copying(
                proc, source, target / "layer", f"snapshot {snapshot_id}"
            )
        finally:
            os.close(upper)
        if proc.returncode:
            raise SandboxFailed(f"snapshot copy failed: {err.decode().strip()}")
    except BaseException:
        shutil.rmtree(target, ignore_errors=True)
        raise
    info = SnapshotInfo(
        id=snapshot_id,
        sandbox_id=live.record.id,
        runtime="local",
        spec=SandboxSpec.model_validate(live.record.spec),
        created_at=time.time(),
    )
    data = {
        **info.model_dump(mode="json"),
        "lowers": [str(target / "layer"), *live.record.lowers],
        "image_env": live.record.image_env,
    }
    (target / "snapshot.json").write_text(json.dumps(data))
    return info


def lowers(state: Path, snapshot_id: str) -> tuple[list[str], dict[str, str]]:
    """The layers a fork of the snapshot stacks, and its image's environment."""
    try:
        data = json.loads((state / "snapshots" / snapshot_id / "snapshot.json").read_text())
    except OSError:
        raise SnapshotNotFound.of(snapshot_id) from None
    return data["lowers"], data["image_env"]


def listed(state: Path) -> list[SnapshotInfo]:
    found = []
    for path in (state / "snapshots").glob("*/snapshot.json"):
        with contextlib.suppress(OSError, ValueError):
            data = json.loads(path.read_text())
            info = {k: v for k, v in data.items() if k not in ("lowers", "image_env")}
            found.append(SnapshotInfo.model_validate(info))
    return found


async def delete(state: Path, snapshot_id: str, sandboxes: dict[str, list[str]]) -> bool:
    """Remove a snapshot no sandbox (of `sandboxes`: id -> its layers) and no other snapshot
    stacks."""
    target = state / "snapshots" / snapshot_id
    if not target.exists():
        return False
    layer = str(target / "layer")
    users = [s for s, layers in sandboxes.items() if layer in layers]
    for path in (state / "snapshots").glob("*/snapshot.json"):
        with contextlib.suppress(OSError, ValueError):
            if path.parent != target and layer in json.loads(path.read_text())["lowers"]:
                users.append(path.parent.name)
    if users:
        raise SandboxConflict(
            f"snapshot {snapshot_id!r} is a layer of {', '.join(sorted(users))}; delete those first"
        )
    await asyncio.to_thread(shutil.rmtree, target, True)
    return True
