"""What an image name stood for when a verifier used it: the local Docker engine's image id
(the local runtime reads images from that engine's store too), or, for a task built on the
host image, a digest of the files the task builds its environment from."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import docker


def engine() -> docker.DockerClient | None:
    """The local Docker engine, or None (not installed, not running)."""
    try:
        import docker
        from docker.errors import DockerException
    except ImportError:
        return None
    try:
        client = docker.from_env()
        client.ping()
        return client
    except DockerException:
        return None


def engine_digest(image: str) -> str | None:
    """The engine's id for `image` (None: no engine, or not in its store)."""
    found = engine()
    if found is None:
        return None
    from docker.errors import DockerException

    try:
        return str(found.images.get(image).id)
    except DockerException:
        return None


def files_digest(*paths: Path) -> str:
    """One digest over files and directory trees (names and contents, in order)."""
    h = hashlib.sha256()
    for path in paths:
        files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        for f in files:
            h.update(str(f.relative_to(path.parent)).encode() + b"\0" + f.read_bytes())
    return "sha256:" + h.hexdigest()
