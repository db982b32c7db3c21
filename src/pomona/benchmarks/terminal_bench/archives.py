"""Directories as tars for a sandbox, and an agent's tar made safe to unpack: what the task's
loader, its sidecars and its verifier each move in and out of sandboxes."""

from __future__ import annotations

import io
import tarfile
import tempfile
from pathlib import Path


def tar_of(*directories: Path) -> bytes:
    """The directories' files as one tar, a later directory's file winning over an earlier's (a
    step's tests over the task's)."""
    files: dict[str, Path] = {}
    for directory in directories:
        for path in sorted(directory.rglob("*")):
            files[str(path.relative_to(directory))] = path
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, path in sorted(files.items()):
            tar.add(path, arcname=name, recursive=False)
    return buf.getvalue()


def sanitized(tar_bytes: bytes, exclude: tuple[str, ...] = ()) -> bytes:
    """A copy of a tar keeping only what tarfile's `data` filter allows (no links out of the
    tree, no devices, no setuid bits) and nothing `exclude` names: an agent's files are input."""
    out = io.BytesIO()
    with (
        tempfile.TemporaryDirectory() as dest,
        tarfile.open(fileobj=io.BytesIO(tar_bytes)) as src,
        tarfile.open(fileobj=out, mode="w") as dst,
    ):
        for member in src:
            name = member.name.removeprefix("./")
            if any(Path(name).match(p) or name.startswith(p.rstrip("/") + "/") for p in exclude):
                continue
            try:
                clean = tarfile.data_filter(member, dest)
            except tarfile.FilterError:
                continue
            # the filter leaves what it drops unset (owner, directory and link modes): a tar
            # being written needs values, so the copy is owned by whoever unpacks it
            clean = clean.replace(
                uid=0,
                gid=0,
                uname="",
                gname="",
                deep=False,
                mode=0o755 if clean.mode is None else clean.mode,
            )
            dst.addfile(clean, src.extractfile(member) if member.isfile() else None)
    return out.getvalue()
