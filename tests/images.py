"""Test images for container runtimes, built offline from Debian packages and cached."""

from __future__ import annotations

import subprocess
from pathlib import Path

# Outside the repository: CI's fresh clones on one machine share it; a new machine rebuilds it.
CACHE = Path("/var/cache/pomona/images")
DEBIAN = "pomona-test/debian:bookworm"


def _has(image: str) -> bool:
    return subprocess.run(["docker", "image", "inspect", image], capture_output=True).returncode == 0


def debian_rootfs_tar() -> Path:
    """A Debian minbase root filesystem with git and python3, via debootstrap (once)."""
    tar = CACHE / "debian-bookworm.tar"
    if tar.exists():
        return tar
    CACHE.mkdir(parents=True, exist_ok=True)
    rootfs = CACHE / "debian-rootfs"
    subprocess.run(["rm", "-rf", str(rootfs)], check=True)
    subprocess.run(["debootstrap", "--variant=minbase", "--include=git,python3,patch,procps",
                    "bookworm", str(rootfs)], check=True, capture_output=True)
    subprocess.run(["tar", "-C", str(rootfs), "-cf", str(tar) + ".tmp", "."], check=True)
    Path(str(tar) + ".tmp").rename(tar)
    subprocess.run(["rm", "-rf", str(rootfs)], check=True)
    return tar


def debian_image() -> str:
    if not _has(DEBIAN):
        with open(debian_rootfs_tar(), "rb") as f:
            subprocess.run(["docker", "import", "-", DEBIAN], stdin=f, check=True, capture_output=True)
    return DEBIAN
