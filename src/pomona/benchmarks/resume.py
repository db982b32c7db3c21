"""Resuming a run: which of its planned attempts still need running, from what it recorded.

An attempt is (task, attempt index) of a run. It is done once the run's `episodes` table holds a
row for it whose `failure_kind` is `none`: the model's result, scored or not, which is never run
again (running it again would draw a second sample of the same attempt). Everything else is
re-run: an attempt with no row at all (the run was killed while it played: its row is written
only when it ends) and one whose every row ended in a failure kind (sandbox, harness, proxy,
upstream, verifier, timeout: none of them a result of the model's, and all of them excluded from
every rate). The re-run writes a new row under the same run and attempt; `current` picks the one
row per attempt that metrics count, so a superseded failure is counted nowhere.

What a run planned is its manifest, `runs/<run id>.json` beside the tables: written before the
first attempt starts, so a run killed at any moment can be resumed with its own settings.

`pomona grade` keeps the same ledger for grading: one JSON line per instance as its grading
ends (`outcomes.jsonl` in the run's log directory), read the same way.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from pomona.errors import PomonaError

Attempt = tuple[str, int]  # (task id, attempt index)
MODEL_RESULT = "none"


class ResumeError(PomonaError, LookupError):
    """There is nothing to resume under that name (no manifest, another trajectory directory)."""


def metadata_of(row: Mapping[str, Any]) -> dict[str, Any]:
    raw = row.get("metadata")
    if isinstance(raw, Mapping):
        return dict(raw)
    try:
        value = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def attempt_key(row: Mapping[str, Any]) -> tuple[str, str, int] | None:
    """(run, task, attempt) of an attempt's row; None for a helper's episode (a judge, a
    simulated user) or a row that names no attempt."""
    meta = metadata_of(row)
    if meta.get("role") or not row.get("run") or not isinstance(meta.get("attempt"), int):
        return None
    return str(row["run"]), str(row.get("task")), int(meta["attempt"])


def attempt_of(row: Mapping[str, Any]) -> int | None:
    key = attempt_key(row)
    return None if key is None else key[2]


def _ended(row: Mapping[str, Any]) -> float:
    value = row.get("ended_at")
    if value is None:
        return 0.0
    return float(value.timestamp()) if hasattr(value, "timestamp") else float(value)


def current(rows: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """One row per attempt: its model result if it has one (the latest, should there be more),
    else its latest failure. Rows that name no attempt pass through unchanged."""
    best: dict[tuple[str, str, int], Mapping[str, Any]] = {}
    others: list[Mapping[str, Any]] = []
    for row in rows:
        key = attempt_key(row)
        if key is None:
            others.append(row)
            continue
        held = best.get(key)
        rank = (row.get("failure_kind") == MODEL_RESULT, _ended(row))
        if held is None or rank >= (held.get("failure_kind") == MODEL_RESULT, _ended(held)):
            best[key] = row
    return [*others, *best.values()]


def results(rows: Iterable[Mapping[str, Any]], run_id: str) -> dict[Attempt, Mapping[str, Any]]:
    """The run's attempts that produced a model result, with their rows."""
    out: dict[Attempt, Mapping[str, Any]] = {}
    for row in rows:
        key = attempt_key(row)
        if key and key[0] == run_id and row.get("failure_kind") == MODEL_RESULT:
            out[(key[1], key[2])] = row
    return out


def pending(
    rows: Iterable[Mapping[str, Any]], run_id: str, planned: Iterable[Attempt]
) -> list[Attempt]:
    """The planned attempts that still need running, in plan order."""
    done = results(rows, run_id)
    return [a for a in planned if a not in done]


def stored(trajectories: str | Path) -> list[dict[str, Any]]:
    """Every `episodes` row of a trajectory directory (none when it does not exist yet)."""
    from pomona.trajectories.reader import read

    return read(trajectories, "episodes").to_pylist() if Path(trajectories).is_dir() else []


def kept(trajectories: str | Path, run_id: str, rerun: Iterable[Attempt]) -> list[dict[str, Any]]:
    """The rows of the run's model results that are not being run again: with the rows of the
    re-run attempts, the whole run."""
    again = set(rerun)
    return [dict(r) for a, r in results(stored(trajectories), run_id).items() if a not in again]


@dataclass
class RunManifest:
    """What a `pomona run` was asked to do: enough to run any of its attempts again."""

    run_id: str
    benchmark: str
    harness: str
    model: str
    k: int
    tasks: list[str]  # the task ids it chose, in order
    runtime: str = "local"
    timeout: float = 600.0
    models: str | None = None
    judge: str | None = None
    judge_prompts: str | None = None
    image: str | None = None
    concurrency: int = 4
    created_at: float = field(default_factory=time.time)

    @property
    def planned(self) -> list[Attempt]:
        return [(t, i) for t in self.tasks for i in range(self.k)]

    @staticmethod
    def path(trajectories: str | Path, run_id: str) -> Path:
        if not run_id or "/" in run_id or run_id.startswith("."):
            raise ResumeError(f"{run_id!r} is not a run id")
        return Path(trajectories) / "runs" / f"{run_id}.json"

    def save(self, trajectories: str | Path) -> Path:
        path = self.path(trajectories, self.run_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2) + "\n")
        tmp.replace(path)
        return path

    @classmethod
    def load(cls, trajectories: str | Path, run_id: str) -> RunManifest:
        path = cls.path(trajectories, run_id)
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            known = (
                sorted(p.stem for p in path.parent.glob("*.json")) if path.parent.is_dir() else []
            )
            hint = f"; runs there: {', '.join(known[-5:])}" if known else ""
            raise ResumeError(f"no run {run_id} in {Path(trajectories).resolve()}{hint}") from None
        except ValueError as e:
            raise ResumeError(f"{path} is not a run manifest: {e}") from None
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


class OutcomeLog:
    """Per-item outcomes of a grading run as JSON lines, appended as each one ends: what
    `pomona grade --resume` reads to grade again only what has no result."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def append(self, item: str, status: str, message: str = "") -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        line = json.dumps({"item": item, "status": status, "message": message, "at": time.time()})
        with open(self.path, "a") as f:  # one write per line: a crash leaves whole lines
            f.write(line + "\n")

    def latest(self) -> dict[str, str]:
        """Each item's last status; a line torn by a crash is skipped."""
        out: dict[str, str] = {}
        if not self.path.exists():
            return out
        for line in self.path.read_text().splitlines():
            try:
                entry = json.loads(line)
                out[str(entry["item"])] = str(entry["status"])
            except (ValueError, KeyError, TypeError):
                continue
        return out
