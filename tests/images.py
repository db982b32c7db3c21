"""Test images for container runtimes, built offline from Debian packages with debootstrap and
cached outside the checkout (CI's fresh clones on one machine share them; a new machine rebuilds
them on first use)."""

from __future__ import annotations

import fcntl
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

CACHE = Path("/var/cache/pomona/images")


def _has(image: str) -> bool:
    return (
        subprocess.run(["docker", "image", "inspect", image], capture_output=True).returncode == 0
    )


@contextmanager
def _building(name: str) -> Iterator[None]:
    """One build of an image at a time on the machine: the suite's parallel workers (and CI's
    clones) would otherwise debootstrap into one directory and remove it under each other."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def rootfs_tar(name: str, include: tuple[str, ...] = (), absent: tuple[str, ...] = ()) -> Path:
    """A Debian bookworm minbase root filesystem (plus `include` packages) as a tar, built once.
    `absent` names programs the image must not have (checked, so a test relying on it is real)."""
    tar = CACHE / f"{name}.tar"
    with _building(name):
        if not tar.exists():
            _debootstrap(name, tar, include, absent)
    return tar


def _debootstrap(name: str, tar: Path, include: tuple[str, ...], absent: tuple[str, ...]) -> None:
    rootfs = CACHE / f"{name}-rootfs"
    subprocess.run(["rm", "-rf", str(rootfs)], check=True)
    command = ["debootstrap", "--variant=minbase"]
    if include:
        command.append("--include=" + ",".join(include))
    subprocess.run([*command, "bookworm", str(rootfs)], check=True, capture_output=True)
    for tool in absent:
        if any((rootfs / d / tool).exists() for d in ("usr/bin", "usr/local/bin", "bin")):
            raise RuntimeError(f"the {name} image unexpectedly has {tool}")
    subprocess.run(["tar", "-C", str(rootfs), "-cf", f"{tar}.tmp", "."], check=True)
    Path(f"{tar}.tmp").rename(tar)
    subprocess.run(["rm", "-rf", str(rootfs)], check=True)


def docker_image(image: str, tar: Path) -> str:
    """The image in the Docker engine's store (the local runtime reads it from there too)."""
    with _building(image.replace("/", "_").replace(":", "_")):
        if not _has(image):
            with open(tar, "rb") as f:
                subprocess.run(
                    ["docker", "import", "-", image], stdin=f, check=True, capture_output=True
                )
    return image


def debian_image() -> str:
    """Debian minbase with git, python3, patch and procps: the conformance suite's image."""
    return docker_image(
        "pomona-test/debian:bookworm",
        rootfs_tar("debian-bookworm", include=("git", "python3", "patch", "procps")),
    )
