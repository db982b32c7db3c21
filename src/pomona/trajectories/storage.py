"""One logical trajectory store written by many recorders on many machines.

A store is a location: a directory (local, or a volume several nodes mount) or an object store
URI that pyarrow's filesystem layer opens (`s3://bucket/prefix?endpoint_override=host:port&
scheme=http` reaches any S3-compatible server; `gs://`, `abfs://` likewise). Every writer owns
its own files, so writers never coordinate and never interleave bytes; readers merge them.

- On a directory, each writer appends to its own Arrow IPC stream file (writer.py): one row is
  durable in the file the moment it is written.
- An object store has no append. A `SegmentWriter` appends rows to a local spool stream file
  (just as crash-safe), and seals it into one object, `<table>-<writer>-<n>.arrows`, every
  `segment_rows` rows or `segment_seconds` seconds and at close. An object becomes visible only
  when its upload completes, so a reader never sees half a segment. A writer that died leaves
  its spool behind; the next writer opened on the same spool directory uploads it first.
  What a crash can lose is therefore only a spool that nobody opens again (a deleted pod's
  emptyDir): put the spool on a volume that outlives the pod, or set segment_rows=1.
- Reading a URI downloads the table's objects and reads them like a directory (torn tails
  dropped and reported the same way).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import socket
import tempfile
import threading
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa

from pomona.trajectories.schema import TrajectoryError
from pomona.trajectories.writer import SUFFIX, TrajectoryWriter

DEFAULT_SPOOL = (
    Path(os.environ.get("POMONA_TRAJECTORY_SPOOL", tempfile.gettempdir())) / "pomona-spool"
)
_SCHEME = re.compile(r"^([a-z][a-z0-9+.-]*):/+(.*)$", re.S)


def location_of(value: str | os.PathLike[str]) -> str:
    """A store location as given. `Path("s3://b/p")` reads back as "s3:/b/p": put the URI back."""
    text = os.fspath(value)
    match = _SCHEME.match(text)
    if match and match.group(1) != "file" and len(match.group(1)) > 1:
        return f"{match.group(1)}://{match.group(2)}"
    return text


def is_uri(value: str | os.PathLike[str]) -> bool:
    return "://" in location_of(value)


def filesystem(location: str) -> tuple[Any, str]:
    """(pyarrow filesystem, base path inside it) for a directory or a URI."""
    from pyarrow import fs

    location = location_of(location)
    if "://" not in location:
        return fs.LocalFileSystem(), os.path.abspath(location)
    try:
        found, base = fs.FileSystem.from_uri(location)
    except (pa.ArrowInvalid, OSError) as e:
        raise TrajectoryError(f"cannot open trajectory store {location!r}: {e}") from None
    return found, base.rstrip("/")


def open_writer(
    location: str | os.PathLike[str], table: str, *, durable: bool = False, **segment_options: Any
) -> TrajectoryWriter | SegmentWriter:
    """The writer for a store: a stream file in a directory, or segments in an object store."""
    location = location_of(location)
    if is_uri(location):
        return SegmentWriter(location, table, durable=durable, **segment_options)
    return TrajectoryWriter(location, table, durable=durable)


class SegmentWriter:
    """TrajectoryWriter's interface over an object store: rows spool locally, segments upload whole."""

    def __init__(
        self,
        location: str,
        table: str,
        *,
        durable: bool = False,
        segment_rows: int = 64,
        segment_seconds: float = 5.0,
        spool: str | os.PathLike[str] | None = None,
        writer_id: str | None = None,
    ):
        self.location = location_of(location)
        self.table = table
        self.durable = durable
        self.segment_rows = max(1, segment_rows)
        self.segment_seconds = segment_seconds
        self.fs, self.base = filesystem(self.location)
        self.writer_id = writer_id or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        key = hashlib.sha256(self.location.encode()).hexdigest()[:12]
        self.spool = Path(spool or DEFAULT_SPOOL) / key / table
        self.spool.mkdir(parents=True, exist_ok=True)
        self.rows_written = 0
        self._seq = 0
        self._lock = threading.Lock()
        self._current: TrajectoryWriter | None = None
        self._pending = 0
        self._unsent: list[Path] = []
        self._closed = threading.Event()
        self._mine = self._claim()
        self.recovered = self._recover()
        self._timer = threading.Thread(
            target=self._seal_periodically, daemon=True, name=f"pomona-segments-{table}"
        )
        self._timer.start()

    @property
    def schema(self) -> pa.Schema:
        from pomona.trajectories.schema import schema_for

        return schema_for(self.table)

    def write(self, row: Mapping[str, Any]) -> None:
        self.write_many([row])

    def write_many(self, rows: Iterable[Mapping[str, Any]]) -> None:
        rows = list(rows)
        if not rows:
            return
        with self._lock:
            if self._current is None:
                self._current = TrajectoryWriter(self._mine, self.table, durable=self.durable)
            self._current.write_many(rows)
            self._pending += len(rows)
            self.rows_written += len(rows)
            if self._pending >= self.segment_rows:
                with contextlib.suppress(OSError, pa.ArrowException):
                    self._seal()  # the store may be away: rows stay spooled, the next seal retries

    def flush(self) -> None:
        """Seal what is spooled into a segment and upload every unsent one; raises if the store
        cannot be reached (nothing is lost: the segments stay spooled)."""
        with self._lock:
            self._seal()

    def close(self) -> None:
        self._closed.set()
        try:
            self.flush()
        finally:
            if not self._unsent:
                self._release()

    def __enter__(self) -> SegmentWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _seal_periodically(self) -> None:
        while not self._closed.wait(self.segment_seconds):
            with contextlib.suppress(OSError, pa.ArrowException):
                self.flush()

    def _seal(self) -> None:
        """Close the spool file (its end-of-stream marker makes it whole), then upload it and
        any segment an earlier seal could not."""
        if self._current is not None and self._pending:
            writer, self._current, self._pending = self._current, None, 0
            writer.close()
            if writer.path is not None:
                self._unsent.append(writer.path)
        while self._unsent:
            self._upload(self._unsent[0])
            self._unsent.pop(0)

    def _upload(self, path: Path) -> None:
        self._seq += 1
        name = f"{self.table}-{self.writer_id}-{self._seq:06d}{SUFFIX}"
        self.fs.create_dir(self.base, recursive=True)
        with open(path, "rb") as source, self.fs.open_output_stream(f"{self.base}/{name}") as out:
            while chunk := source.read(1 << 20):
                out.write(chunk)
        path.unlink()

    def _claim(self) -> Path:
        """This writer's spool directory, held by an flock for as long as the writer lives."""
        mine = self.spool / f"open-{self.writer_id}"
        mine.mkdir()
        self._lockfile = open(mine / "lock", "w")  # noqa: SIM115 - held until close
        fcntl.flock(self._lockfile, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return mine

    def _release(self) -> None:
        for leftover in self._mine.glob(f"*{SUFFIX}"):
            if leftover.stat().st_size == 0:
                leftover.unlink()
        (self._mine / "lock").unlink(missing_ok=True)
        self._lockfile.close()
        with contextlib.suppress(OSError):
            self._mine.rmdir()

    def _recover(self) -> int:
        """Upload the spool files dead writers left (each as it was: a reader drops a torn
        tail). A directory whose lock can be taken has no live writer."""
        count = 0
        for directory in sorted(self.spool.glob("open-*")):
            if directory == self._mine:
                continue
            with contextlib.ExitStack() as stack:
                try:
                    lock = stack.enter_context(open(directory / "lock", "a"))  # noqa: SIM115
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue  # a live writer holds it
                except FileNotFoundError:
                    pass  # torn down half-way: nothing holds it
                for path in sorted(directory.glob(f"*{SUFFIX}")):
                    if path.stat().st_size:
                        self._upload(path)
                        count += 1
                    else:
                        path.unlink()
                (directory / "lock").unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                directory.rmdir()
        return count


def download(location: str, table: str, into: Path) -> dict[str, str]:
    """Copy `table`'s files of a store into a directory; returns local path -> store path."""
    from pyarrow import fs

    store, base = filesystem(location)
    sources: dict[str, str] = {}
    for info in store.get_file_info(fs.FileSelector(base, allow_not_found=True)):
        name = info.base_name
        if (
            info.type != fs.FileType.File
            or not name.startswith(f"{table}-")
            or not (name.endswith(SUFFIX) or name.endswith(".parquet"))
        ):
            continue
        local = into / name
        with store.open_input_stream(info.path) as source, open(local, "wb") as out:
            while chunk := source.read(1 << 20):
                out.write(chunk)
        sources[str(local)] = f"{location_of(location).split('?')[0].rstrip('/')}/{name}"
    return sources
