"""The machine's list of Pomona state directories.

Root inside a `host`-image sandbox reads host files as the host's uid 0, so the only protection
for another runtime's state (its store image holds every sandbox's files) is not to show it: the
`host` image hides every state directory on this list. Each runtime adds its own at start; `pomona
gc` reads the list to find what may be left over.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
from collections.abc import Iterable
from pathlib import Path

REGISTRY = Path(os.environ.get("POMONA_STATE_REGISTRY", "/var/lib/pomona-state-dirs"))


_dirs: set[str] = set()  # entries seen to be directories: each local create asks, and a
# machine's list grows to hundreds of entries, so a directory is stat()ed once per process


def _existing() -> tuple[str, ...]:
    """The registered paths that are (or were, when first asked about) directories."""
    with contextlib.suppress(OSError):
        lines = REGISTRY.read_text().splitlines()
        for line in lines:
            if line.startswith("/") and line not in _dirs and Path(line).is_dir():
                _dirs.add(line)
        return tuple(sorted({line for line in lines if line in _dirs}))
    return ()


def registered() -> list[Path]:
    """Every registered state directory that exists."""
    return [Path(line) for line in _existing()]


def register(state_dir: Path) -> None:
    """Add a state directory (idempotent; safe against concurrent processes)."""
    REGISTRY.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(REGISTRY, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "r+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        known = [
            line for line in f.read().splitlines() if line.startswith("/") and Path(line).is_dir()
        ]
        if str(state_dir) not in known:
            known.append(str(state_dir))
        f.seek(0)
        f.truncate()
        f.write("".join(f"{line}\n" for line in known))


def hidden_places(base: Iterable[str], own: Path) -> list[str]:
    """Paths relative to / that the host image hides: `base`, this runtime's state dir and
    every registered one, minus those already under a hidden place."""
    return list(_hidden(tuple(base), str(own), _existing()))


@functools.lru_cache(maxsize=16)
def _hidden(base: tuple[str, ...], own: str, existing: tuple[str, ...]) -> tuple[str, ...]:
    places = sorted({*base, *(p.lstrip("/") for p in (own, *existing) if p != "/")})
    kept: list[str] = []
    for place in places:  # sorted, so a parent comes before what lies under it
        if not any(place == k or place.startswith(k + "/") for k in kept):
            kept.append(place)
    return tuple(kept)
