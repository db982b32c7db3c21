"""A bare image for the harness tests: Debian minbase, with no Node and no Python at all, so the
payload alone must carry what the harnesses run on."""

from __future__ import annotations

from tests.images import docker_image, rootfs_tar


def bare_image() -> str:
    return docker_image(
        "pomona-test/debian-bare:bookworm",
        rootfs_tar("debian-bookworm-bare", absent=("python3", "python", "node", "nodejs")),
    )
