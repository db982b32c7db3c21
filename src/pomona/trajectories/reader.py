"""Reading trajectory directories, including files whose last write was torn by a crash."""

from __future__ import annotations

import os
import tempfile
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from pomona.trajectories import storage
from pomona.trajectories.schema import schema_for
from pomona.trajectories.writer import SUFFIX

if TYPE_CHECKING:
    import datasets
    import pandas


class TornTrajectoryWarning(UserWarning):
    """Some file ended in a partial record (its writer died mid-write); that tail was dropped."""


@dataclass
class FileReport:
    path: str
    rows: int
    whole: bool
    dropped_bytes: int = 0
    error: str | None = None


@dataclass
class ReadReport:
    """What `read` found: rows per file and any torn tails it dropped."""

    table: str
    files: list[FileReport] = field(default_factory=list)

    @property
    def rows(self) -> int:
        return sum(f.rows for f in self.files)

    @property
    def torn(self) -> list[FileReport]:
        return [f for f in self.files if not f.whole]


def _files(directory: Path, table: str, suffix: str) -> list[Path]:
    return sorted(directory.glob(f"{table}-*{suffix}"))


def _read_stream(path: Path, schema: pa.Schema) -> tuple[list[pa.RecordBatch], FileReport]:
    """Every whole batch of one stream file; a torn or missing tail is reported, not raised."""
    batches: list[pa.RecordBatch] = []
    size = path.stat().st_size
    with pa.memory_map(str(path)) as source:
        try:
            reader = pa.ipc.open_stream(source)
        except (pa.ArrowInvalid, OSError) as e:
            return [], FileReport(str(path), 0, size == 0, size, None if size == 0 else str(e))
        good_end = source.tell()
        error = None
        while True:
            try:
                batch = reader.read_next_batch()
            except StopIteration:
                break
            except (pa.ArrowInvalid, OSError) as e:
                error = str(e)
                break
            batches.append(batch)
            good_end = source.tell()
    rows = sum(b.num_rows for b in batches)
    dropped = size - good_end if error else 0
    # A stream without its end-of-stream marker (a live or killed writer) is still whole.
    return [_conform(b, schema) for b in batches], FileReport(
        str(path), rows, error is None, dropped, error
    )


def _conform(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """A batch in the current layout: columns an older schema version lacks are null."""
    if batch.schema == schema:
        return batch
    columns = [
        batch.column(f.name).cast(f.type)
        if f.name in batch.schema.names
        else pa.nulls(batch.num_rows, f.type)
        for f in schema
    ]
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def read_with_report(
    directory: str | os.PathLike[str], table: str = "calls"
) -> tuple[pa.Table, ReadReport]:
    """All rows of `table` in `directory` (stream files and compacted Parquet), plus a report.
    `directory` may also be an object store URI (s3://...): see storage.py."""
    if storage.is_uri(directory):
        return _read_store(storage.location_of(directory), table)
    directory = Path(directory)
    schema = schema_for(table)
    report = ReadReport(table)
    parts: list[pa.Table] = []
    for path in _files(directory, table, ".parquet"):
        t = pq.read_table(path)
        t = pa.Table.from_batches([_conform(b, schema) for b in t.to_batches()], schema=schema)
        parts.append(t)
        report.files.append(FileReport(str(path), t.num_rows, True))
    for path in _files(directory, table, SUFFIX):
        batches, file_report = _read_stream(path, schema)
        report.files.append(file_report)
        if batches:
            parts.append(pa.Table.from_batches(batches, schema=schema))
    table_out = pa.concat_tables(parts) if parts else schema.empty_table()
    return table_out, report


def _read_store(location: str, table: str) -> tuple[pa.Table, Any]:
    """read_with_report for a URI: the table's objects, downloaded and read like a directory;
    the report names the objects, not the temporary copies."""
    with tempfile.TemporaryDirectory(prefix="pomona-read-") as tmp:
        sources = storage.download(location, table, Path(tmp))
        result, report = read_with_report(tmp, table)
        for f in report.files:
            f.path = sources.get(f.path, f.path)
    return result, report


def read(directory: str | os.PathLike[str], table: str = "calls") -> pa.Table:
    """All whole rows of `table` in `directory`; warns (TornTrajectoryWarning) about torn tails."""
    result, report = read_with_report(directory, table)
    for f in report.torn:
        warnings.warn(
            f"{f.path}: dropped a torn tail of {f.dropped_bytes} bytes after {f.rows} whole rows ({f.error})",
            TornTrajectoryWarning,
            stacklevel=2,
        )
    return result


def episode_calls(
    directory: str | os.PathLike[str], key: str, columns: Sequence[str] | None = None
) -> list[dict[str, Any]]:
    """One episode's `calls` rows in the order they started (all columns unless named): the one
    reader every consumer of a single episode's calls goes through."""
    if not storage.is_uri(directory) and not Path(directory).exists():
        return []
    import pyarrow.compute as pc

    table = read(directory, "calls")
    if table.num_rows == 0:
        return []
    table = table.filter(pc.equal(table["episode"], key))
    if columns is not None:
        table = table.select(sorted({*columns, "started_at"}))
    rows: list[dict[str, Any]] = table.to_pylist()
    rows.sort(key=lambda r: r["started_at"])
    return rows


def to_pandas(directory: str | os.PathLike[str], table: str = "calls") -> pandas.DataFrame:
    frame: pandas.DataFrame = read(directory, table).to_pandas()  # (pyarrow has no type hints)
    return frame


def to_datasets(directory: str | os.PathLike[str], table: str = "calls") -> datasets.Dataset:
    """A Hugging Face `datasets.Dataset` over the table (in memory)."""
    import datasets

    return datasets.Dataset(read(directory, table))


def compact(
    directory: str | os.PathLike[str], table: str = "calls", *, remove: bool = True
) -> Path | None:
    """Merge every whole row of `table` into one Parquet file; by default remove the sources.

    Only run it when no writer is still appending to the directory: a live stream file would be
    removed under its writer.
    """
    directory = Path(directory)
    sources = _files(directory, table, SUFFIX) + _files(directory, table, ".parquet")
    if not sources:
        return None
    data = read(directory, table)
    out = directory / f"{table}-compacted-{os.getpid()}-{os.urandom(4).hex()}.parquet"
    tmp = out.with_suffix(".tmp")
    pq.write_table(data, tmp)
    os.replace(tmp, out)  # atomic: a crash leaves either the sources or the result
    if remove:
        for p in sources:
            p.unlink()
    return out
