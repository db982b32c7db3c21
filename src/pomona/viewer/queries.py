"""What each page of the viewer shows, computed from the index with Arrow filters and slices.

Every function takes a `StoreIndex` and returns plain JSON-ready data. Rates come from
`benchmarks.metrics` (the same numbers `pomona leaderboard` prints): infra failures are left out
of every rate and counted apart by kind.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import asdict
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from pomona.benchmarks import leaderboard as board
from pomona.benchmarks import metrics
from pomona.viewer.conversation import jsonable, sent_messages, timeline
from pomona.viewer.index import StoreIndex

LIVE_WINDOW_S = 120
"""A run counts as running while its writer is alive and it finished an episode this recently
(or episodes of that writer are in flight): a store records no explicit end of run."""

SUMMARY_COLUMNS = ("run", "benchmark", "task", "harness", "model", "reward", "resolved",
                   "failure_kind", "role")  # fmt: skip


def _status_column(table: pa.Table) -> pa.Array:
    """An episode's outcome on the pages: `pass` (resolved), `fail` (ran, not resolved), `infra`
    (an infrastructure failure: no trustworthy reward) or `unscored` (ran, no reward); for a
    model's work on an attempt's behalf, its role (`judge`, `simulated-user`)."""
    kind = pc.fill_null(table["failure_kind"], "none")
    infra = pc.not_equal(kind, "none")
    unscored = pc.is_null(table["reward"])
    resolved = pc.fill_null(table["resolved"], False)
    outcome = pc.if_else(
        infra, "infra", pc.if_else(unscored, "unscored", pc.if_else(resolved, "pass", "fail"))
    )
    return pc.coalesce(table["role"], outcome)


def _plain(row: dict[str, Any]) -> dict[str, Any]:
    return {k: jsonable(v) for k, v in row.items() if not k.startswith("_")}


def episodes_table(index: StoreIndex) -> pa.Table:
    """Episodes with a `status` column, newest first."""

    def compute() -> pa.Table:
        data = index.episode_rows()
        data = data.append_column("status", _status_column(data))
        if data.num_rows == 0:
            return data
        return data.sort_by([("started_at", "descending")])

    return index.cached("episodes_table", compute)


# --- in-flight episodes --------------------------------------------------------------------------


def in_flight(index: StoreIndex, run: str | None = None) -> list[dict[str, Any]]:
    """Episodes whose calls are recorded but whose row is not written yet, from writers still
    alive (a dead writer's unfinished episodes will never end: they are not in flight); those
    of `run` only, if given.

    The proxy writes an episode's row when the episode closes, so a running episode shows
    through its calls until then; each call carries the run, benchmark, task and harness its
    episode was opened with (null in stores written before schema 3)."""
    live = {s.number for s in index.calls.live_files()}  # fresh: a writer may die any time
    return [
        {k: v for k, v in e.items() if k != "_file"}
        for e in _unfinished(index)
        if e["_file"] in live and (run is None or e["run"] == run)
    ]


_OPENED_AS = ("run", "benchmark", "task", "harness", "model")
"""What an in-flight episode's calls say it is (the same on each of its calls)."""


def _unfinished(index: StoreIndex) -> list[dict[str, Any]]:
    """Calls without an episode row, by episode, newest first (per version of the store)."""

    def compute() -> list[dict[str, Any]]:
        calls = index.calls.data()
        if calls.num_rows == 0:
            return []
        known = index.episodes.data()["episode"]
        mask = pc.and_(pc.invert(pc.is_in(calls["episode"], known)), pc.is_valid(calls["episode"]))
        pending = calls.filter(mask)
        if pending.num_rows == 0:
            return []
        grouped = pending.group_by("episode").aggregate(
            [("call_id", "count"), ("started_at", "min"), ("ended_at", "max"), ("_file", "max"),
             *((column, "max") for column in _OPENED_AS)]
        )  # fmt: skip
        rows = grouped.sort_by([("ended_at_max", "descending")]).to_pylist()
        return [
            {"episode": r["episode"], **{c: r[f"{c}_max"] for c in _OPENED_AS},
             "calls": r["call_id_count"], "_file": r["_file_max"],
             "started_at": jsonable(r["started_at_min"]), "last_call_at": jsonable(r["ended_at_max"])}
            for r in rows
        ]  # fmt: skip

    return index.cached("unfinished", compute)


# --- runs ----------------------------------------------------------------------------------------


def _joined(values: list[Any]) -> str:
    names = sorted({str(v) for v in values if v is not None})
    return ", ".join(names) if names else "?"


def runs(index: StoreIndex) -> list[dict[str, Any]]:
    """Every run, newest first: what ran, counts, resolve rate, infra failures, episodes in
    flight, whether live. A run none of whose episodes has ended yet is there from its first
    recorded call."""
    running = live_runs(index)
    flying: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in in_flight(index):
        if e["run"] is not None:
            flying[e["run"]].append(e)
    summaries = [_plain(r) for r in _run_summaries(index)]
    ended = {r["run"] for r in summaries}
    opened = [_opened_run(run, group) for run, group in flying.items() if run not in ended]
    every = sorted([*opened, *summaries], key=lambda r: r["started_at"] or "", reverse=True)
    return [{**r, "in_flight": len(flying[r["run"]]), "live": r["run"] in running} for r in every]


def _opened_run(run: str, flying: list[dict[str, Any]]) -> dict[str, Any]:
    """A run known so far only from its episodes in flight: what they say, nothing ended yet."""
    return {
        "run": run,
        **{k: _joined([e[k] for e in flying]) for k in ("benchmark", "harness", "model")},
        "episodes": 0, "tasks": 0, "passed": 0, "failed": 0, "infra": 0, "unscored": 0,
        "failures": {}, "resolve_rate": None, "helpers": 0, "calls": 0,
        "started_at": min(e["started_at"] or "" for e in flying) or None, "last_at": None,
    }  # fmt: skip


def live_runs(index: StoreIndex) -> set[str]:
    """Runs still running, judged now: the store records no end of run, so a run is running
    while it has episodes in flight, or while the process writing its rows is alive and
    appending (no end-of-stream marker) and it finished one in the last LIVE_WINDOW_S seconds.
    For in-flight episodes that do not say their run (stores before schema 3, episodes opened
    without one), their writer's latest run counts as running. This changes with time and
    processes, not rows, so it is never cached."""
    running = {e["run"] for e in in_flight(index) if e["run"] is not None}
    files = {s.number: s for s in index.episodes.live_files()}
    if not files:
        return running
    busy = _busy_writers(index)
    now = datetime.now(UTC)
    latest: dict[
        int, tuple[Any, str]
    ] = {}  # live file -> (last episode end, run) of its newest run
    for r in _run_summaries(index):
        mine = [n for n in r["_files"] if n in files]
        last = r["_last"]
        if mine and last is not None and (now - last).total_seconds() < LIVE_WINDOW_S:
            running.add(r["run"])
        for n in mine:
            if last is not None and (n not in latest or last > latest[n][0]):
                latest[n] = (last, r["run"])
    running |= {run for n, (_, run) in latest.items() if files[n].writer_pid in busy}
    return running


def _busy_writers(index: StoreIndex) -> set[int | None]:
    """Writer processes (by pid) with episodes in flight that do not say their run."""
    by_number = {s.number: s.writer_pid for s in index.calls.live_files()}
    return {
        by_number[e["_file"]]
        for e in _unfinished(index)
        if e["_file"] in by_number and e["run"] is None
    }


def _run_summaries(index: StoreIndex) -> list[dict[str, Any]]:
    def compute() -> list[dict[str, Any]]:
        data = episodes_table(index)
        if data.num_rows == 0:
            return []
        rows = data.select([*SUMMARY_COLUMNS, "num_calls", "started_at", "ended_at", "status",
                            "_file"]).to_pylist()  # fmt: skip
        by_run: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for row in rows:
            by_run[row["run"] or "(no run)"].append(row)
        out = [_run_summary(run, group) for run, group in by_run.items()]
        return sorted(out, key=lambda r: r["started_at"] or "", reverse=True)

    return index.cached("runs", compute)


def _run_summary(run: str, everything: list[dict[str, Any]]) -> dict[str, Any]:
    group = list(filter(metrics.is_attempt, everything))  # a judge's episodes are not counted
    summaries = metrics.summarize(group)
    trials = sum(s.trials for s in summaries)
    rate = sum((s.resolve_rate or 0.0) * s.trials for s in summaries) / trials if trials else None
    statuses = Counter(r["status"] for r in group)
    failures = Counter(r["failure_kind"] for r in group if r["status"] == "infra")
    last = max((r["ended_at"] for r in everything if r["ended_at"] is not None), default=None)
    started = min(
        (r["started_at"] for r in everything if r["started_at"] is not None), default=None
    )
    return {
        "run": run,
        "benchmark": _joined([r["benchmark"] for r in group]),
        "harness": _joined([r["harness"] for r in group]),
        "model": _joined([r["model"] for r in group]),
        "episodes": len(group),
        "tasks": len({r["task"] for r in group}),
        "passed": statuses["pass"],
        "failed": statuses["fail"],
        "infra": statuses["infra"],
        "unscored": statuses["unscored"],
        "failures": dict(failures),
        "resolve_rate": rate,
        "helpers": len(everything) - len(group),
        "calls": sum(r["num_calls"] or 0 for r in everything),
        "started_at": jsonable(started),
        "last_at": jsonable(last),
        "_files": sorted({r["_file"] for r in group}),
        "_last": last,
    }


def run_detail(index: StoreIndex, run: str) -> dict[str, Any] | None:
    """One run's header: its summaries per (benchmark, harness, model) and its counts."""
    found = next((r for r in runs(index) if r["run"] == run), None)
    if found is None:
        return None
    data = _of_run(index, run)
    group = data.select(list(SUMMARY_COLUMNS)).to_pylist()
    most = max(Counter((r["task"], r["harness"], r["model"]) for r in group).values(), default=1)
    summaries = [_summary_dict(s) for s in metrics.summarize(group, range(1, most + 1))]
    return {**found, "summaries": summaries, "failure_kinds": sorted(found["failures"]),
            "in_flight_episodes": in_flight(index, run)}  # fmt: skip


def _of_run(index: StoreIndex, run: str) -> pa.Table:
    data = episodes_table(index)
    if run == "(no run)":
        return data.filter(pc.is_null(data["run"]))
    return data.filter(pc.equal(data["run"], run))


def run_tasks(index: StoreIndex, run: str, *, status: str | None = None,
              failure_kind: str | None = None, task: str | None = None, offset: int = 0,
              limit: int = 50) -> dict[str, Any]:  # fmt: skip
    """The run's tasks × attempts, one page of tasks, with the attempts that match the filters."""
    data = _of_run(index, run)
    data = _filtered(data, status=status, failure_kind=failure_kind, task=task)
    tasks = pc.unique(data["task"]).to_pylist() if data.num_rows else []
    tasks = sorted(tasks, key=lambda t: (t is None, t or ""))
    page = tasks[offset : offset + limit]
    rows = (
        data.filter(pc.is_in(data["task"], pa.array(page, pa.string())))
        if page
        else data.slice(0, 0)
    )
    by_task: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for row in rows.select(EPISODE_LIST_COLUMNS).to_pylist():
        by_task[row["task"]].append(_plain(row))
    for attempts in by_task.values():
        attempts.sort(
            key=lambda r: (r["attempt"] is None, r["attempt"] or 0, r["started_at"] or "")
        )
    return {
        "total": len(tasks),
        "offset": offset,
        "limit": limit,
        "tasks": [{"task": t, "attempts": by_task[t]} for t in page],
    }


EPISODE_LIST_COLUMNS = [
    "episode", "run", "benchmark", "task", "harness", "model", "attempt", "status", "reward",
    "failure_kind", "failure_message", "num_calls", "started_at", "ended_at",
]  # fmt: skip


def _filtered(data: pa.Table, **filters: str | None) -> pa.Table:
    """Exact matches on columns; `task` also matches as a substring (case-insensitive)."""
    for column, value in filters.items():
        if not value or data.num_rows == 0:
            continue
        if column == "task":
            mask = pc.match_substring(pc.fill_null(data["task"], ""), value, ignore_case=True)
        else:
            mask = pc.equal(data[column], value)
        data = data.filter(pc.fill_null(mask, False))
    return data


def episodes(index: StoreIndex, *, offset: int = 0, limit: int = 50,
             **filters: str | None) -> dict[str, Any]:  # fmt: skip
    """One page of episodes, newest first, filtered by run, benchmark, task, harness, model,
    status or failure kind."""
    data = _filtered(episodes_table(index), **filters)
    page = data.slice(offset, limit).select(EPISODE_LIST_COLUMNS).to_pylist()
    return {"total": data.num_rows, "offset": offset, "limit": limit,
            "episodes": [_plain(r) for r in page]}  # fmt: skip


# --- leaderboard ---------------------------------------------------------------------------------


def _summary_dict(s: metrics.Summary) -> dict[str, Any]:
    d = asdict(s)
    d["pass_at"] = {str(k): v for k, v in s.pass_at.items()}
    d["pass_hat"] = {str(k): v for k, v in s.pass_hat.items()}
    d["infra_failures"] = s.infra_failures
    return d


def _summaries(index: StoreIndex) -> list[metrics.Summary]:
    def compute() -> list[metrics.Summary]:
        rows = episodes_table(index).select(list(SUMMARY_COLUMNS)).to_pylist()
        counts = Counter((r["benchmark"], r["harness"], r["model"], r["task"]) for r in rows)
        most = max(counts.values(), default=1)
        return board.rank(metrics.summarize(rows, range(1, most + 1)))

    return index.cached("summaries", compute)


def leaderboard(index: StoreIndex) -> dict[str, Any]:
    """The benchmark × harness × model matrix with pass@k and pass^k, as `pomona leaderboard`."""
    summaries = _summaries(index)
    ks = sorted({k for s in summaries for k in s.pass_at})
    return {"ks": ks, "rows": [_summary_dict(s) for s in summaries]}


def leaderboard_png(index: StoreIndex) -> bytes | None:
    """The same heatmap `pomona leaderboard --html` draws (None on an empty store)."""
    summaries = _summaries(index)
    if not summaries:
        return None
    return index.cached("leaderboard_png", lambda: board.matrix_png(summaries))


# --- one episode ---------------------------------------------------------------------------------


def episode_row(index: StoreIndex, key: str) -> dict[str, Any] | None:
    data = episodes_table(index)
    found = data.filter(pc.equal(data["episode"], key))
    return _plain(found.slice(found.num_rows - 1).to_pylist()[0]) if found.num_rows else None


def call_rows(index: StoreIndex, key: str, only: int | None = None) -> list[dict[str, Any]]:
    """The episode's calls, whole (bodies included), in the order they started (or just call
    number `only`). A file that went away meanwhile (the store was compacted) means the index is
    stale: refresh, once."""
    try:
        return _call_rows(index, key, only)
    except (FileNotFoundError, KeyError):
        index.refresh(force=True)
        return _call_rows(index, key, only)


def _call_rows(index: StoreIndex, key: str, only: int | None) -> list[dict[str, Any]]:
    calls = index.calls.data()
    found = calls.filter(pc.equal(calls["episode"], key))
    if found.num_rows == 0:
        return []
    found = found.sort_by([("started_at", "ascending"), ("sequence", "ascending")])
    where = list(zip(found["_file"].to_pylist(), found["_offset"].to_pylist(),
                     found["_row"].to_pylist(), strict=True))  # fmt: skip
    return index.calls.full_rows(where if only is None else where[only : only + 1])


def episode(index: StoreIndex, key: str) -> dict[str, Any] | None:
    """The episode's row (while it runs: what its calls say it was opened as), its timeline of
    calls and what the proxy measured over them."""
    row = episode_row(index, key)
    items = _timeline(index, index.version, key)
    if row is None and not items:
        return None
    usage = [c.get("usage") or {} for c in items]
    opened = None if row else next((e for e in _unfinished(index) if e["episode"] == key), None)
    return {
        "episode": row,
        "key": key,
        "in_flight": row is None,
        "opened_as": {k: opened[k] for k in _OPENED_AS} if opened else None,
        "calls": items,
        "totals": {
            "calls": len(items),
            "input_tokens": sum(u.get("input_tokens") or 0 for u in usage),
            "output_tokens": sum(u.get("output_tokens") or 0 for u in usage),
            "latency_ms": sum(c.get("latency_ms") or 0.0 for c in items),
            "errors": sum(c.get("status") != "ok" for c in items),
        },
    }


def call_messages(index: StoreIndex, key: str, n: int) -> list[dict[str, Any]] | None:
    """Every message call `n` of the episode sent (None when it has no such call)."""
    items = _timeline(index, index.version, key)
    if not 0 <= n < len(items):
        return None
    return sent_messages(call_rows(index, key, only=n)[0], items[n]["earlier"])


@lru_cache(maxsize=8)
def _timeline(index: StoreIndex, version: int, key: str) -> list[dict[str, Any]]:
    """An episode's timeline, kept for a few episodes per version of the store (the page and its
    folds ask for the same episode again and again; a new version makes a new key)."""
    return timeline(call_rows(index, key))


def same_task(index: StoreIndex, key: str, limit: int = 200) -> list[dict[str, Any]]:
    """Other episodes of the episode's task (any run, harness or model), for comparing."""
    row = episode_row(index, key)
    if row is None:
        return []
    data = episodes_table(index)
    mask = pc.and_(pc.equal(data["task"], row["task"]), pc.not_equal(data["episode"], key))
    if row.get("benchmark") is not None:
        mask = pc.and_(mask, pc.equal(data["benchmark"], row["benchmark"]))
    found = data.filter(pc.fill_null(mask, False)).slice(0, limit)
    return [_plain(r) for r in found.select(EPISODE_LIST_COLUMNS).to_pylist()]


def overview(index: StoreIndex) -> dict[str, Any]:
    """What the store holds, for the header of every page."""
    return {
        "directory": str(index.directory),
        "version": index.version,
        "episodes": index.episodes.data().num_rows,
        "calls": index.calls.data().num_rows,
        "live_writers": sorted(index.live_writers()),
        "live_runs": sorted(live_runs(index)),
        "torn_files": index.torn_files(),
        "in_flight": in_flight(index),
    }
