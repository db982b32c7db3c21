"""An episode's artifacts (transcripts, patches, test output, screenshots, audit logs...), shown by
kind and served safely.

Artifacts are `{name, uri}` pairs in the episodes row; the viewer knows nothing of who wrote
them, only how to show a kind: images inline, patches as diffs, a verifier's verification.json
as its verdict with the evidence (command, image digest, integrity, spoof findings), JSON Lines
and text as text.
A row is untrusted input: a uri may name any file on the machine (`file:///etc/shadow`), so only
files inside the store directory are ever served, after symlinks are resolved, and nothing is
served as a type a browser would run (no HTML, no SVG).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from pomona.errors import PomonaError

IMAGE_TYPES = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg",
               ".gif": "image/gif", ".webp": "image/webp"}  # fmt: skip
PREVIEW_BYTES = 256 * 1024
"""Bytes of a text artifact the episode page shows; the download link serves the whole file."""


def kind_of(name: str) -> str:
    """How to show an artifact, from its name alone."""
    lower = name.lower()
    suffix = Path(lower).suffix
    if Path(lower).name == "verification.json":
        return "verdict"  # a verifier's verdict and its evidence (pomona.benchmarks.verification)
    if Path(lower).name == "witness.jsonl":
        return "witness record"
    if suffix in IMAGE_TYPES:
        return "image"
    if suffix in (".patch", ".diff"):
        return "patch"
    if "audit" in lower:
        return "audit log"
    if "test_output" in lower or suffix == ".log":
        return "log"
    if suffix == ".jsonl" or "transcript" in lower or "session" in lower:
        return "transcript"
    if suffix == ".json":
        return "json"
    return "text"


class ArtifactRefused(PomonaError, Exception):
    """The artifact is not a file this viewer may serve (outside the store, not a file...)."""


@dataclass(frozen=True)
class Artifact:
    index: int
    name: str
    uri: str
    kind: str

    def describe(self, root: Path) -> dict[str, Any]:
        try:
            path = resolve(self.uri, root)
            size, problem = path.stat().st_size, None
        except ArtifactRefused as e:
            size, problem = None, str(e)
        return {"index": self.index, "name": self.name, "kind": self.kind, "size": size,
                "problem": problem}  # fmt: skip


def of_row(row: dict[str, Any] | None) -> list[Artifact]:
    items = (row or {}).get("artifacts") or []
    return [
        Artifact(i, str(a.get("name") or a.get("uri") or f"artifact {i}"), str(a.get("uri") or ""),
                 kind_of(str(a.get("name") or a.get("uri") or "")))
        for i, a in enumerate(items) if isinstance(a, dict)
    ]  # fmt: skip


def resolve(uri: str, root: Path) -> Path:
    """The artifact's file, if it is a regular file inside `root` once every link is followed."""
    parsed = urlparse(uri)
    if parsed.scheme not in ("file", ""):
        raise ArtifactRefused(f"only file artifacts are served, not {parsed.scheme}: URIs")
    if parsed.netloc not in ("", "localhost"):
        raise ArtifactRefused(f"the artifact is on another host ({parsed.netloc})")
    raw = Path(unquote(parsed.path))
    path = (raw if raw.is_absolute() else root / raw).resolve()
    if not path.is_relative_to(root.resolve()):
        raise ArtifactRefused("the artifact is outside the trajectory directory: not served")
    if not path.is_file():
        raise ArtifactRefused("the artifact file is missing")
    return path


def media_type(artifact: Artifact) -> str:
    """Images as themselves; everything else as plain text, never as something a browser runs."""
    if artifact.kind == "image":
        return IMAGE_TYPES[Path(artifact.name.lower()).suffix]
    return "text/plain; charset=utf-8"


def preview(path: Path) -> tuple[str, bool]:
    """The start of a text artifact, and whether it was cut."""
    with open(path, "rb") as f:
        data = f.read(PREVIEW_BYTES + 1)
    return data[:PREVIEW_BYTES].decode("utf-8", "replace"), len(data) > PREVIEW_BYTES
