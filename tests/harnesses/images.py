"""A bare image for the harness tests: Debian minbase, with no Node and no Python at all, so the
payload alone must carry what the harnesses run on. Built offline with debootstrap, cached."""

from __future__ import annotations

import subprocess
from pathlib import Path

CACHE = Path("/var/cache/pomona/images")  # outside the checkout: CI's fresh clones reuse it
BARE = "pomona-test/debian-bare:bookworm"


def _has(image: str) -> bool:
    return (
        subprocess.run(["docker", "image", "inspect", image], capture_output=True).returncode == 0
    )


def bare_rootfs_tar() -> Path:
    tar = CACHE / "debian-bookworm-bare.tar"
    if tar.exists():
        return tar
    CACHE.mkdir(parents=True, exist_ok=True)
    rootfs = CACHE / "debian-bare-rootfs"
    subprocess.run(["rm", "-rf", str(rootfs)], check=True)
    subprocess.run(
        ["debootstrap", "--variant=minbase", "bookworm", str(rootfs)],
        check=True,
        capture_output=True,
    )
    for tool in ("python3", "python", "node", "nodejs"):
        if any((rootfs / d / tool).exists() for d in ("usr/bin", "usr/local/bin", "bin")):
            raise RuntimeError(f"the bare image unexpectedly has {tool}")
    subprocess.run(["tar", "-C", str(rootfs), "-cf", f"{tar}.tmp", "."], check=True)
    Path(f"{tar}.tmp").rename(tar)
    subprocess.run(["rm", "-rf", str(rootfs)], check=True)
    return tar


def bare_image() -> str:
    """The bare image in the Docker engine's store (the local runtime reads it from there too)."""
    if not _has(BARE):
        with open(bare_rootfs_tar(), "rb") as f:
            subprocess.run(
                ["docker", "import", "-", BARE], stdin=f, check=True, capture_output=True
            )
    return BARE
