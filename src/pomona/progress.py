"""Progress lines for long commands (image unpack, harness payload install, workspace snapshot).

One line on stderr, rewritten in place by tqdm, and only when stderr is a terminal, so logs, CI
output and services stay clean; `POMONA_PROGRESS=0` turns them off, `=1` forces them on. When
they are off, every helper here costs nothing: no wrapper, no tree walk.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO, Any, TypeVar

T = TypeVar("T")


def enabled() -> bool:
    setting = os.environ.get("POMONA_PROGRESS", "")
    if setting in ("0", "1"):
        return setting == "1"
    try:
        import tqdm  # noqa: F401
    except ImportError:
        return False
    return sys.stderr.isatty()


def bar(
    desc: str, total: float | None = None, *, unit: str = "it", unit_scale: bool = False
) -> Any:
    """A tqdm bar on stderr (None when progress lines are off)."""
    if not enabled():
        return None
    from tqdm import tqdm

    size = shutil.get_terminal_size((100, 24))  # a terminal of size 0 (a bare pty) draws nothing
    return tqdm(total=total, desc=desc, unit=unit, unit_scale=unit_scale, file=sys.stderr,
                leave=False, ncols=size.columns, nrows=size.lines, disable=False)  # fmt: skip


def _done(line: Any) -> None:
    """Draw the final count once (a fast step may never have been drawn), then clear the line."""
    line.refresh()
    line.close()


def track(items: Iterable[T], desc: str, *, unit: str = "it") -> Iterator[T]:
    """Iterate `items`, one step per item, the current one named after the bar."""
    items = list(items)
    line = bar(desc, len(items), unit=unit)
    if line is None:
        yield from items
        return
    try:
        for item in items:
            line.set_postfix_str(str(item), refresh=False)
            yield item
            line.update(1)
    finally:
        _done(line)


class _CountedReader:
    """A binary file whose reads advance a byte bar; everything else is the file's own."""

    def __init__(self, raw: IO[bytes], line: Any):
        self._raw, self._line = raw, line

    def read(self, n: int = -1) -> bytes:
        data = self._raw.read(n)
        self._line.update(len(data))
        return data

    def readinto(self, buffer: Any) -> int:
        n = self._raw.readinto(buffer)  # type: ignore[attr-defined]
        self._line.update(n or 0)
        return n

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)


@contextmanager
def reading(raw: IO[bytes], desc: str) -> Iterator[IO[bytes]]:
    """`raw`, its reads counted into a byte bar (`raw` itself when lines are off)."""
    line = bar(desc, unit="B", unit_scale=True)
    if line is None:
        yield raw
        return
    try:
        yield _CountedReader(raw, line)  # type: ignore[misc]
    finally:
        _done(line)


def _size(path: Path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            with suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_size
    return total


async def copying(process: asyncio.subprocess.Process, source: Path, target: Path,
                  desc: str) -> tuple[bytes, bytes]:  # fmt: skip
    """`process.communicate()` for a copy of `source` into `target`, drawing bytes copied."""
    if not enabled():
        return await process.communicate()
    line = bar(desc, await asyncio.to_thread(_size, source), unit="B", unit_scale=True)
    task = asyncio.ensure_future(process.communicate())
    try:
        while not task.done():
            await asyncio.wait({task}, timeout=0.5)
            line.n = await asyncio.to_thread(_size, target)
            line.refresh()
        return task.result()
    finally:
        _done(line)
