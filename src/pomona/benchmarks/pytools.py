"""Python test dependencies for task sandboxes, offline: the local SWE and Terminal-Bench tasks
run on the host image, whose /usr/bin/python3 has no pytest, and no registry is reachable from a
sandbox.

We take the distributions a task declares (pytest by default) and their runtime dependencies
from the interpreter running Pomona (they must be pure Python), pack them into one tar once per
process, and unpack it into the sandbox Python's own site directory (writable: the sandbox's root
is an overlay). The task then runs plain `python3 -m pytest`, like in an image that has it
installed, and needs no mount or environment variable from whoever created the sandbox.
"""

from __future__ import annotations

import functools
import io
import re
import shlex
import tarfile
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

from packaging.requirements import Requirement

from pomona.benchmarks.task import VerifierError
from pomona.errors import PomonaError

if TYPE_CHECKING:
    from pomona.orchestrator.sdk.client import Sandbox

DEFAULT = ("pytest",)
_SITE = "python3 -c 'import sysconfig; print(sysconfig.get_path(\"purelib\"))'"


class MissingDistribution(PomonaError, LookupError):
    """A task declares a test dependency Pomona's own environment does not have."""


def _key(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _closure(names: tuple[str, ...]) -> list[metadata.Distribution]:
    """The named distributions and everything they need on this interpreter."""
    seen: dict[str, metadata.Distribution] = {}
    todo = list(names)
    while todo:
        name = _key(todo.pop())
        if name in seen:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            raise MissingDistribution(
                f"test dependency {name!r} is not installed in Pomona's environment, so it "
                "cannot be copied into the sandbox; install it there or use an image that "
                "has it"
            ) from None
        seen[name] = dist
        for spec in dist.requires or []:
            req = Requirement(spec)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return list(seen.values())


@functools.cache
def _tar(names: tuple[str, ...]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for dist in _closure(names):
            base = Path(str(dist.locate_file("")))
            for rel in dist.files or []:
                parts = Path(str(rel)).parts
                if not parts or parts[0] == ".." or "__pycache__" in parts:
                    continue
                path = base / rel
                if path.is_file():
                    tar.add(path, arcname=str(rel), recursive=False)
    return buf.getvalue()


def packages_tar(names: Iterable[str] = DEFAULT) -> bytes:
    """The distributions and their dependencies as a tar rooted at a site-packages directory."""
    return _tar(tuple(sorted({_key(n) for n in names})))


def _importable(name: str) -> str:
    """The module a distribution is imported as (its top-level name; a guess by name else)."""
    try:
        top = metadata.distribution(name).read_text("top_level.txt")
    except metadata.PackageNotFoundError:
        top = None
    return (top.split() or [name])[0] if top else _key(name).replace("-", "_")


def install(
    sandbox: Sandbox, names: Iterable[str] = DEFAULT, python: str = "python3", force: bool = False
) -> None:
    """Make the distributions importable by the sandbox's `python`. Skipped where the image
    already has them all, unless `force` (a verifier that must not trust what an agent left)."""
    names = tuple(names)
    if not names:
        return
    probe = " ".join(f"import {_importable(n)};" for n in names)
    if not force and sandbox.exec(f"{python} -c {shlex.quote(probe)}", timeout=60).exit_code == 0:
        return
    site = sandbox.exec(_SITE.replace("python3", python, 1), timeout=60)
    if site.exit_code != 0 or not site.stdout.strip():
        raise VerifierError(f"no usable {python} in the sandbox: {site.stderr.strip()}")
    target = site.stdout.strip()
    sandbox.exec(f"mkdir -p {shlex.quote(target)}", timeout=60, user="root")
    sandbox.upload_dir(target, packages_tar(names))


def install_pytest(sandbox: Sandbox, python: str = "python3", force: bool = False) -> None:
    """Make `python3 -m pytest` work in the sandbox (a no-op where the image already has it)."""
    install(sandbox, DEFAULT, python, force)
