"""An incremental, column-light index over a trajectory directory, for a viewer that stays fast.

The viewer never loads a table whole. It keeps in memory only the small columns of each table
(ids, status, counts, timing: a few dozen bytes a row) plus where each row lives: the file, the
byte offset of its record batch and its row in that batch. The large columns (request and
response bodies, token ids) are read from disk for the one episode being looked at, by seeking
straight to those batches in a memory map.

Stream files grow while a run is live, so `refresh` reads only what was appended since the last
look (each file remembers the end of its last whole message); a torn tail is left for the next
refresh, exactly as `trajectories.read` drops it. Columns a file lacks (a store written before
the schema grew) read as nulls; columns the index does not know are ignored.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from pomona.benchmarks import metrics
from pomona.trajectories.schema import CALLS, EPISODES
from pomona.trajectories.writer import SUFFIX

CALL_COLUMNS = (
    "call_id", "episode", "run", "benchmark", "task", "harness", "sequence", "side", "dialect",
    "model", "upstream", "stream", "status",
    "status_code", "error", "usage", "token_faithful", "token_faithful_reason", "started_at",
    "ended_at", "ttfb_ms", "latency_ms",
)  # fmt: skip
"""The calls columns kept in memory; the bodies and token ids stay on disk."""

LOCATION = pa.schema(
    [pa.field("_file", pa.int32()), pa.field("_offset", pa.int64()), pa.field("_row", pa.int32())]
)
EOS = b"\xff\xff\xff\xff\x00\x00\x00\x00"  # an Arrow stream's end-of-stream marker
_WRITER_PID = re.compile(r"-(\d+)-[0-9a-f]+\.(?:arrows|parquet)$")


def _light_schema(schema: pa.Schema, columns: tuple[str, ...] | None) -> pa.Schema:
    fields = [schema.field(c) for c in columns] if columns else list(schema)
    return pa.schema([*fields, *LOCATION])


@dataclass
class SourceFile:
    """One file of the store and how far it has been read."""

    path: Path
    number: int
    parquet: bool
    writer_pid: int | None
    schema: pa.Schema | None = None  # the file's own schema, once its first message is read
    read_to: int = 0  # byte offset just past the last whole message read
    finished: bool = False  # end-of-stream marker seen (or Parquet): the file will not grow
    torn: bool = False  # bytes past `read_to` that do not yet make a whole message

    @property
    def live(self) -> bool:
        """Still being appended to: no end marker and its writer process is alive here."""
        if self.finished or self.writer_pid is None:
            return False
        try:
            os.kill(self.writer_pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True


@dataclass
class TableIndex:
    """The light columns of one table (`calls` or `episodes`) over every file in the directory."""

    directory: Path
    table: str
    columns: tuple[str, ...] | None  # None: every column of the schema
    files: dict[str, SourceFile] = field(default_factory=dict)
    _parts: list[pa.Table] = field(default_factory=list)
    _combined: pa.Table | None = None
    _lock: threading.RLock = field(default_factory=threading.RLock)  # refresh vs. readers

    def __post_init__(self) -> None:
        self.schema = EPISODES if self.table == "episodes" else CALLS
        self.light = _light_schema(self.schema, self.columns)

    # -- reading new rows -----------------------------------------------------------------------

    def refresh(self) -> int:
        """Read what was appended since the last call; returns the number of new rows."""
        with self._lock:
            return self._refresh()

    def _refresh(self) -> int:
        names = sorted(
            [*self.directory.glob(f"{self.table}-*{SUFFIX}")],
            key=lambda p: p.name,
        ) + sorted(self.directory.glob(f"{self.table}-*.parquet"))
        seen = {str(p) for p in names}
        if any(key not in seen for key in self.files):  # compacted or removed under us: start over
            self.files.clear()
            self._parts.clear()
            self._combined = None
        added = 0
        for path in names:
            source = self.files.get(str(path))
            if source is None:
                pid = _WRITER_PID.search(path.name)
                source = self.files[str(path)] = SourceFile(
                    path, len(self.files), path.suffix == ".parquet",
                    int(pid.group(1)) if pid else None,
                )  # fmt: skip
            if source.finished:
                continue
            part = self._read_parquet(source) if source.parquet else self._read_stream(source)
            if part is not None and part.num_rows:
                self._parts.append(part)
                self._combined = None
                added += part.num_rows
        return added

    def _read_parquet(self, source: SourceFile) -> pa.Table | None:
        source.finished = True
        parquet = pq.ParquetFile(source.path)
        source.schema = parquet.schema_arrow
        wanted = [c for c in self._wanted() if c in source.schema.names]
        parts = []
        for group in range(parquet.num_row_groups):
            data = parquet.read_row_group(group, columns=wanted)
            rows = data.num_rows
            parts.append(self._project(data, source.number, [group] * rows, list(range(rows))))
        return pa.concat_tables(parts) if parts else None

    def _read_stream(self, source: SourceFile) -> pa.Table | None:
        try:
            size = source.path.stat().st_size
        except FileNotFoundError:
            return None
        if size <= source.read_to:
            return None
        batches: list[pa.RecordBatch] = []
        offsets: list[int] = []
        with pa.memory_map(str(source.path)) as mapped:
            mapped.seek(source.read_to)
            try:
                reader = pa.ipc.MessageReader.open_stream(mapped)
                while True:
                    start = mapped.tell()
                    message = reader.read_next_message()
                    if message.type == "schema":
                        source.schema = pa.ipc.read_schema(message)
                    elif message.type == "record batch" and source.schema is not None:
                        batches.append(pa.ipc.read_record_batch(message, source.schema))
                        offsets.append(start)
                    source.read_to = mapped.tell()
            except StopIteration:
                source.torn = False
                source.finished = _ends_with_eos(source.path, size)
            except (pa.ArrowInvalid, OSError, EOFError):
                source.torn = True  # a message still being written, or a torn tail
            if not batches:
                return None
            at = [o for b, o in zip(batches, offsets, strict=True) for _ in range(b.num_rows)]
            rows = [i for b in batches for i in range(b.num_rows)]
            data = pa.Table.from_batches(batches, schema=source.schema)
            wanted = [c for c in self._wanted() if c in data.column_names]
            # one chunk per column (not one per batch), copied off the map, which can then close
            light = data.select(wanted).combine_chunks()
        return self._project(light, source.number, at, rows)

    def _wanted(self) -> list[str]:
        return list(self.columns) if self.columns else self.schema.names

    def _project(
        self, data: pa.Table, number: int, offsets: list[int], rows: list[int]
    ) -> pa.Table:
        """The light columns in the index's types (nulls for columns the file lacks) + location."""
        light = [f for f in self.light if f.name not in LOCATION.names]
        columns = _in_types(data, light)
        columns["_file"] = pa.array([number] * len(rows), pa.int32())
        columns["_offset"] = pa.array(offsets, pa.int64())
        columns["_row"] = pa.array(rows, pa.int32())
        return pa.table(columns, schema=self.light)

    # -- what the viewer reads ------------------------------------------------------------------

    def data(self) -> pa.Table:
        """Every indexed row: the light columns and each row's location."""
        with self._lock:
            if self._combined is None:
                table = pa.concat_tables(self._parts) if self._parts else self.light.empty_table()
                self._combined = table.combine_chunks()
                self._parts = [self._combined]
            return self._combined

    def full_rows(self, locations: list[tuple[int, int, int]]) -> list[dict[str, Any]]:
        """Whole rows (every column the file has) at (file, offset, row) locations, in order."""
        with self._lock:
            by_number = {s.number: s for s in self.files.values()}
        out: list[dict[str, Any]] = []
        for number, offset, row in locations:
            source = by_number[number]
            if source.parquet:
                data = pq.ParquetFile(source.path).read_row_group(offset).slice(row, 1)
            else:
                with pa.memory_map(str(source.path)) as mapped:
                    mapped.seek(offset)
                    message = pa.ipc.MessageReader.open_stream(mapped).read_next_message()
                    batch = pa.ipc.read_record_batch(message, source.schema)
                    data = pa.Table.from_batches([batch.slice(row, 1)])
            out.append(self._conform(data).to_pylist()[0])
        return out

    def _conform(self, data: pa.Table) -> pa.Table:
        """Every column of the current schema (nulls where the file lacks one), then any column
        the file has beyond it (a newer writer's), as they are."""
        columns = _in_types(data, list(self.schema))
        for name in data.column_names:
            columns.setdefault(name, data[name])
        return pa.table(columns)

    def live_files(self) -> list[SourceFile]:
        with self._lock:
            files = list(self.files.values())
        return [s for s in files if s.live]


def _in_types(data: pa.Table, fields: list[pa.Field]) -> dict[str, Any]:
    """`fields` of `data` in the index's types; a field the file lacks is all nulls."""
    columns: dict[str, Any] = {}
    for f in fields:
        if f.name not in data.column_names:
            columns[f.name] = pa.nulls(data.num_rows, f.type)
        else:
            column = data[f.name]
            columns[f.name] = column if column.type == f.type else _cast(column, f.type)
    return columns


def _ends_with_eos(path: Path, size: int) -> bool:
    if size < len(EOS):
        return False
    with open(path, "rb") as f:
        f.seek(size - len(EOS))
        return f.read() == EOS


def _cast(column: pa.ChunkedArray, to: pa.DataType) -> pa.ChunkedArray:
    """An older file's column in the current type; a struct missing fields gets null fields."""
    if pa.types.is_struct(to) and pa.types.is_struct(column.type):
        have = {column.type.field(i).name for i in range(column.type.num_fields)}
        combined = column.combine_chunks()
        children = [
            _cast(pa.chunked_array([combined.field(f.name)]), f.type).combine_chunks()
            if f.name in have
            else pa.nulls(len(combined), f.type)
            for f in to
        ]
        return pa.chunked_array(
            [pa.StructArray.from_arrays(children, fields=list(to), mask=combined.is_null())]
        )
    return column.cast(to, safe=False)


class StoreIndex:
    """Both tables of a trajectory directory, refreshed at most every `interval` seconds.

    Every answer the viewer gives is computed from one `version` of the index, and caches key on
    it, so a page of a 10,000-episode store is a filter and a slice, not a re-read.
    """

    def __init__(self, directory: str | os.PathLike[str], interval: float = 1.0):
        self.directory = Path(directory).resolve()
        self.interval = interval
        self.episodes = TableIndex(self.directory, "episodes", None)
        self.calls = TableIndex(self.directory, "calls", CALL_COLUMNS)
        self.version = 0
        self._checked = 0.0
        self._lock = threading.Lock()
        self._cache: dict[Any, Any] = {}

    def refresh(self, force: bool = False) -> int:
        """Pick up new rows (rate-limited); returns the version the answers are computed from."""
        with self._lock:
            now = time.monotonic()
            if force or now - self._checked >= self.interval:
                self._checked = now
                if self.directory.is_dir() and (self.episodes.refresh() + self.calls.refresh()):
                    self.version += 1
                    self._cache.clear()
            return self.version

    def cached(self, key: Any, compute: Any) -> Any:
        """`compute()` once per index version."""
        with self._lock:
            if key in self._cache:
                return self._cache[key]
        value = compute()
        with self._lock:
            self._cache[key] = value
        return value

    def episode_rows(self) -> pa.Table:
        """The episodes, with `attempt` and `role` (from the metadata JSON) as columns."""

        def compute() -> pa.Table:
            data = self.episodes.data()
            metadata = data["metadata"].to_pylist()
            data = data.append_column(
                "attempt", pa.array([_attempt(m) for m in metadata], pa.int64())
            )
            roles = [metrics.role({"metadata": m}) for m in metadata]
            return data.append_column("role", pa.array(roles, pa.string()))

        return self.cached("episode_rows", compute)

    def torn_files(self) -> list[str]:
        """Files that end in a partial record although no live writer is finishing it (their
        writer died mid-write): their whole rows are shown, the torn tail is not."""
        files = [*self.episodes.files.values(), *self.calls.files.values()]
        return sorted(s.path.name for s in files if s.torn and not s.live)

    def live_writers(self) -> set[int]:
        """Writer processes of this store that are still appending."""
        return {
            s.writer_pid
            for s in [*self.episodes.live_files(), *self.calls.live_files()]
            if s.writer_pid is not None
        }


def _attempt(metadata: str | None) -> int | None:
    if not metadata:
        return None
    try:
        value = json.loads(metadata).get("attempt")
    except (ValueError, AttributeError):
        return None
    return value if isinstance(value, int) else None
