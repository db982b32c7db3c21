"""Append-only, crash-safe writing of trajectory rows.

Each writer owns one Arrow IPC *stream* file, so concurrent processes never interleave bytes,
and every row is flushed to the OS as soon as it is written: a process killed at any point
loses at most the row it was writing, never an earlier one (the reader drops a torn tail).
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, BinaryIO

import pyarrow as pa

from pomona.trajectories.schema import CALL_STATUSES, FAILURE_KINDS, TrajectoryError, schema_for

SUFFIX = ".arrows"


class TrajectoryWriter:
    """Writes rows of one table (`calls` or `episodes`) to a fresh stream file in `directory`.

    The file is created on the first write. `durable=True` also fsyncs after each batch, which
    survives a machine crash, not only a process crash, at the price of a disk round trip.
    """

    def __init__(self, directory: str | os.PathLike[str], table: str, *, durable: bool = False):
        self.directory = Path(directory)
        self.table = table
        self.schema = schema_for(table)
        self.durable = durable
        self.path: Path | None = None
        self.rows_written = 0
        self._lock = threading.Lock()
        # the open file and its stream writer, from the first batch on
        self._stream: tuple[BinaryIO, pa.ipc.RecordBatchStreamWriter] | None = None

    def write(self, row: Mapping[str, Any]) -> None:
        """Append one row and flush it."""
        self.write_many([row])

    def write_many(self, rows: Iterable[Mapping[str, Any]]) -> None:
        """Append rows as one record batch and flush it."""
        checked = [self._check(r) for r in rows]
        # Column by column is ~3x cheaper than from_pylist, and this runs once per model call.
        columns = [pa.array([r.get(f.name) for r in checked], type=f.type) for f in self.schema]
        batch = pa.RecordBatch.from_arrays(columns, schema=self.schema)
        if batch.num_rows == 0:
            return
        with self._lock:
            file, writer = self._stream or self._open()
            writer.write_batch(batch)
            file.flush()
            if self.durable:
                os.fsync(file.fileno())
            self.rows_written += batch.num_rows

    def close(self) -> None:
        with self._lock:
            if self._stream is not None:
                file, writer = self._stream
                writer.close()  # writes the end-of-stream marker
                file.close()
                self._stream = None

    def __enter__(self) -> TrajectoryWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _open(self) -> tuple[BinaryIO, pa.ipc.RecordBatchStreamWriter]:
        self.directory.mkdir(parents=True, exist_ok=True)
        stamp = time.strftime("%Y%m%dT%H%M%S")
        name = f"{self.table}-{stamp}-{os.getpid()}-{uuid.uuid4().hex[:8]}{SUFFIX}"
        self.path = self.directory / name
        file = open(self.path, "xb")  # noqa: SIM115 - lives as long as the writer
        writer = pa.ipc.new_stream(file, self.schema)
        file.flush()
        self._stream = (file, writer)
        return self._stream

    def _check(self, row: Mapping[str, Any]) -> dict[str, Any]:
        unknown = set(row) - set(self.schema.names)
        if unknown:
            raise TrajectoryError(f"unknown {self.table} columns: {sorted(unknown)}")
        out = dict(row)
        if "failure_kind" in out and out["failure_kind"] not in (None, *FAILURE_KINDS):
            raise TrajectoryError(
                f"failure_kind must be one of {FAILURE_KINDS}, not {out['failure_kind']!r}"
            )
        if "status" in out and out["status"] not in (None, *CALL_STATUSES):
            raise TrajectoryError(f"status must be one of {CALL_STATUSES}, not {out['status']!r}")
        if isinstance(out.get("artifacts"), Mapping):
            out["artifacts"] = [{"name": k, "uri": str(v)} for k, v in out["artifacts"].items()]
        return out
