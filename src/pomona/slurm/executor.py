"""A run on Slurm, driven from the login node: the attempts still to play are split into shards,
one array task each (a node plays its shard with its own sandboxes and proxy, writing into the
run's trajectory directory on the shared filesystem: one run, merged on read); the driver waits
for the array, and an array task that ended without finishing its shard (its node failed, it was
cancelled, it ran out of time) leaves its unplayed attempts typed as infra failures (`sandbox`:
their sandboxes went with the node), which the next round submits again, up to `retries` times.
An attempt with a model result is never submitted again (pomona.benchmarks.resume decides).
"""

from __future__ import annotations

import json
import secrets
import sys
import time
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pomona.benchmarks import metrics, registry, swebench
from pomona.benchmarks.resume import Attempt, RunManifest, current, pending, results, stored
from pomona.run import RunResult, choose_tasks
from pomona.slurm import cluster
from pomona.slurm.cluster import SlurmSettings
from pomona.trajectories import TrajectoryWriter


def shards(todo: list[Attempt], nodes: int) -> list[list[Attempt]]:
    """Round-robin over at most `nodes` shards, so every node gets tasks of every kind."""
    count = max(1, min(nodes, len(todo)))
    return [todo[i::count] for i in range(count)]


def _say(text: str) -> None:
    print(f"[slurm] {text}", file=sys.stderr, flush=True)


def submit_round(
    manifest: RunManifest,
    trajectories: Path,
    todo: list[Attempt],
    settings: SlurmSettings,
    work: Path,
) -> tuple[str, list[list[Attempt]]]:
    """One job array over `todo`; returns its id and the shards."""
    parts = shards(todo, settings.nodes)
    work.mkdir(parents=True, exist_ok=True)
    for old in work.glob("shard-*"):
        old.unlink()
    for i, part in enumerate(parts):
        shard = {"manifest": asdict(manifest), "trajectories": str(trajectories),
                 "attempts": part, "state_dir": settings.state_dir}  # fmt: skip
        (work / f"shard-{i}.json").write_text(json.dumps(shard, indent=1))
    script = cluster.executable(work / "worker.sh", cluster.batch_script(sys.executable, work))
    job = cluster.submit(script, len(parts), settings, f"pomona-{manifest.run_id}", work / "logs")
    _say(f"job {job}: {len(todo)} attempt(s) over {len(parts)} node(s)")
    return job, parts


def wait(job: str, settings: SlurmSettings) -> None:
    while cluster.running(job):
        time.sleep(settings.poll)


def record_losses(
    manifest: RunManifest, trajectories: Path, job: str, parts: list[list[Attempt]], work: Path
) -> int:
    """Rows for the attempts of array tasks that did not finish their shard: typed infra
    failures saying which job, node and state; returns how many."""
    states = cluster.tasks(job)
    done = results(stored(trajectories), manifest.run_id)
    now = datetime.now(UTC)
    label = _benchmark_of(trajectories, manifest)
    rows: list[dict[str, Any]] = []
    for i, part in enumerate(parts):
        if (work / f"shard-{i}.done").exists():
            continue  # the worker played its whole shard: every attempt has its own row
        task = states.get(i, {})
        state = task.get("JobState", "UNKNOWN")
        where = f"slurm job {job}_{i} on {task.get('NodeList') or '?'} ended {state}"
        reason = task.get("Reason")
        message = f"{where}{f' ({reason})' if reason not in (None, 'None') else ''}: the node's sandboxes were lost before this attempt ended"
        for name, attempt in part:
            if (name, attempt) in done:
                continue
            rows.append({
                "episode": f"slurm-{job}-{i}-{secrets.token_hex(6)}", "run": manifest.run_id,
                "task": name, "harness": manifest.harness, "model": manifest.model,
                "runtime": manifest.runtime, "failure_kind": "sandbox", "failure_message": message,
                "metadata": json.dumps({"attempt": attempt, "slurm_job": f"{job}_{i}", "slurm_state": state}),
                "num_calls": 0, "started_at": now, "ended_at": now,
                "benchmark": label,
            })  # fmt: skip
    if rows:
        with TrajectoryWriter(trajectories, "episodes") as writer:
            writer.write_many(rows)
        _say(f"job {job}: {len(rows)} attempt(s) lost with their node(s)")
    return len(rows)


def _benchmark_of(trajectories: Path, manifest: RunManifest) -> str:
    """The benchmark label the run's rows carry (a dataset path's label, not the argument)."""
    for row in stored(trajectories):
        if row.get("run") == manifest.run_id and row.get("benchmark"):
            return str(row["benchmark"])
    return manifest.benchmark


def run_on_slurm(
    manifest: RunManifest,
    trajectories: str | Path,
    settings: SlurmSettings,
    attempts: list[Attempt] | None = None,
) -> RunResult:
    """Play the run's attempts that have no model result (or `attempts`) on the cluster; the
    result covers the whole run."""
    trajectories = Path(trajectories).resolve()
    work = trajectories / "slurm" / manifest.run_id
    todo = (
        attempts
        if attempts is not None
        else pending(stored(trajectories), manifest.run_id, manifest.planned)
    )
    for round_ in range(settings.retries + 1):
        if not todo:
            break
        if round_:
            _say(f"round {round_ + 1}: submitting {len(todo)} lost attempt(s) again")
        job, parts = submit_round(manifest, trajectories, todo, settings, work)
        try:
            wait(job, settings)
        except BaseException:
            cluster.cancel(job)
            raise
        record_losses(manifest, trajectories, job, parts, work)
        todo = pending(stored(trajectories), manifest.run_id, todo)
    return whole_run(manifest, trajectories)


def whole_run(manifest: RunManifest, trajectories: Path) -> RunResult:
    """The run's result from its rows: one per attempt, SWE predictions over them."""
    rows = [dict(r) for r in current(stored(trajectories)) if r.get("run") == manifest.run_id]
    rows = [r for r in rows if metrics.is_attempt(r)]
    swe_model = swebench.model_name(manifest.harness, manifest.model)
    tasks = choose_tasks(
        manifest.benchmark, manifest.run_id, trajectories, swe_model, manifest.tasks
    )
    kept = [r for r in rows if r.get("failure_kind") == "none"]
    bench, _ = registry.get(manifest.benchmark)
    context = registry.LoadContext(
        logs=trajectories / "swebench", run_id=manifest.run_id, model=swe_model
    )
    done = registry.Finished([], tasks, context, trajectories, bool(manifest.judge), kept)
    outputs = bench.finish(done) if bench.finish else registry.Outputs()
    summaries = metrics.summarize(rows, range(1, manifest.k + 1))
    return RunResult(
        manifest.run_id, [], summaries, trajectories, outputs.results.get("swe_report"), rows,
        manifest.benchmark, manifest.k, outputs.lines,
    )  # fmt: skip
