"""The browser image for container runtimes: Debian bookworm (minbase) with Chromium and what a
browser sandbox runs besides it (python3 for the local web's server, procps for pgrep, fonts),
built offline from Debian's packages with debootstrap, the way Pomona's test images are, then
imported into Docker, where the `docker` runtime (and the `local` one, which reads Docker's
store) finds it.

    pomona browser image [--tag T] [--force]
    gym.make("pomona/BrowserEnv-v0", runtime="docker", image="pomona/browser:bookworm")

The root filesystem's tar is cached (a second build only imports it); debootstrap needs root and
Debian's package mirror.
"""

from __future__ import annotations

import argparse
import fcntl
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pomona.errors import PomonaError

IMAGE = "pomona/browser:bookworm"
CACHE = Path("/var/cache/pomona/images")
# dbus-x11: debootstrap's --include takes no alternatives, and Chromium's dconf needs a provider
# of dbus-session-bus (this one pulls no systemd)
PACKAGES = ("chromium", "python3", "procps", "fonts-dejavu-core", "dbus-x11")
SUITE = "bookworm"


class ImageBuildError(PomonaError, RuntimeError):
    """A step of the build failed; the message says which and why."""


def _run(argv: list[str], what: str, **kwargs: object) -> None:
    proc = subprocess.run(argv, capture_output=True, text=True, **kwargs)  # type: ignore[call-overload]
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout or "").strip()[-2000:]
        raise ImageBuildError(f"{what} failed (exit {proc.returncode}): {tail}")


@contextmanager
def _building(cache: Path) -> Iterator[None]:
    """One build at a time per cache: processes starting together (test workers, a pool of
    environments) would otherwise debootstrap into one directory and remove it under each other;
    the ones that waited find the image built."""
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / f"browser-{SUITE}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def rootfs_tar(cache: Path = CACHE, force: bool = False) -> Path:
    """The image's root filesystem as a tar, built once."""
    tar = cache / f"browser-{SUITE}.tar"
    if tar.exists() and not force:
        return tar
    if shutil.which("debootstrap") is None:
        raise ImageBuildError(
            "building the browser image needs debootstrap (apt-get install debootstrap)"
        )
    rootfs = cache / f"browser-{SUITE}-rootfs"
    _run(["rm", "-rf", str(rootfs)], "clearing an old build")
    _run(
        ["debootstrap", "--variant=minbase", "--include=" + ",".join(PACKAGES), SUITE, str(rootfs)],
        "debootstrap",
        timeout=3600,
    )
    if not (rootfs / "usr/lib/chromium/chromium").exists():
        raise ImageBuildError("debootstrap finished but the image has no Chromium")
    _run(["tar", "-C", str(rootfs), "-cf", f"{tar}.tmp", "."], "packing the root filesystem")
    Path(f"{tar}.tmp").rename(tar)
    _run(["rm", "-rf", str(rootfs)], "removing the build directory")
    return tar


def has_image(tag: str = IMAGE) -> bool:
    return subprocess.run(["docker", "image", "inspect", tag], capture_output=True).returncode == 0


def build(tag: str = IMAGE, cache: Path = CACHE, force: bool = False) -> str:
    """The browser image in Docker's store, built (or imported from the cached tar) if missing."""
    if shutil.which("docker") is None:
        raise ImageBuildError("the browser image goes into Docker's store: no `docker` here")
    if has_image(tag) and not force:
        return tag
    with _building(cache):
        if has_image(tag) and not force:
            return tag
        tar = rootfs_tar(cache, force)
        with open(tar, "rb") as f:
            _run(["docker", "import", "-", tag], "docker import", stdin=f)
    return tag


def for_runtime(runtime: str | None) -> str:
    """The image a browser sandbox gets by default: the host's root (with Debian's Chromium) on
    the `local` runtime and an orchestrator's, the browser image (built if missing) on Docker."""
    return build() if runtime == "docker" else "host"


def disk_for(runtime: str | None) -> str | None:
    """The browser sandbox's disk limit (what downloads can fill): 1 GiB, except on Docker,
    whose storage driver often has no quotas (downloads are then bounded by count only)."""
    return None if runtime == "docker" else "1Gi"


def add_browser_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register `browser` on a `pomona` subparsers object."""
    p = subparsers.add_parser("browser", help="the browser layer: build its container image")
    sub = p.add_subparsers(dest="browser_command", required=True)
    image = sub.add_parser("image", help="build the browser image (Debian + Chromium) offline")
    image.add_argument("--tag", default=IMAGE)
    image.add_argument("--force", action="store_true", help="rebuild even when cached")
    image.set_defaults(func=_image)
    return p


def _image(args: argparse.Namespace) -> int:
    try:
        print(build(args.tag, force=args.force))
    except ImageBuildError as e:
        print(f"pomona browser image: {e}")
        return 1
    return 0
