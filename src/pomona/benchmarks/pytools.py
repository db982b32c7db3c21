"""pytest for task sandboxes, offline: the local SWE and Terminal-Bench tasks run on the host
image, whose /usr/bin/python3 has no pytest, and no registry is reachable from a sandbox.

We take pytest and its runtime dependencies from the interpreter running Pomona (they are pure
Python), pack them into one tar once per process, and unpack it into the sandbox Python's own
site directory (writable: the sandbox's root is an overlay). The task then runs plain
`python3 -m pytest`, like in an image that has it installed, and needs no mount or environment
variable from whoever created the sandbox.
"""

from __future__ import annotations

import functools
import io
import re
import shlex
import tarfile
from importlib import metadata
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement

ROOTS = ("pytest",)
_SITE = "python3 -c 'import sysconfig; print(sysconfig.get_path(\"purelib\"))'"


def _closure(names: tuple[str, ...]) -> list[metadata.Distribution]:
    """The named distributions and everything they need on this interpreter."""
    seen: dict[str, metadata.Distribution] = {}
    todo = list(names)
    while todo:
        name = re.sub(r"[-_.]+", "-", todo.pop()).lower()
        if name in seen:
            continue
        dist = metadata.distribution(name)
        seen[name] = dist
        for spec in dist.requires or []:
            req = Requirement(spec)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return list(seen.values())


@functools.cache
def pytest_tar() -> bytes:
    """pytest and its dependencies as a tar rooted at a site-packages directory."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for dist in _closure(ROOTS):
            base = Path(str(dist.locate_file("")))
            for rel in dist.files or []:
                parts = Path(str(rel)).parts
                if not parts or parts[0] == ".." or "__pycache__" in parts:
                    continue
                path = base / rel
                if path.is_file():
                    tar.add(path, arcname=str(rel), recursive=False)
    return buf.getvalue()


def install_pytest(sandbox: Any, python: str = "python3") -> None:
    """Make `python3 -m pytest` work in the sandbox (a no-op where the image already has it)."""
    if sandbox.exec(f"{python} -c 'import pytest'", timeout=60).exit_code == 0:
        return
    site = sandbox.exec(_SITE.replace("python3", python, 1), timeout=60)
    if site.exit_code != 0 or not site.stdout.strip():
        raise RuntimeError(f"no usable {python} in the sandbox: {site.stderr.strip()}")
    target = site.stdout.strip()
    sandbox.exec(f"mkdir -p {shlex.quote(target)}", timeout=60, user="root")
    sandbox.upload_dir(target, pytest_tar())
