"""Rollout throughput: episodes per minute of a real harness on the built-in task sets with the
oracle (scripted) model, by concurrency, and where each episode's time goes.

    .venv/bin/python perf/rollout_bench.py [--harness pi] [--levels 1,4,8,16]

Columns (means per episode, in ms):
  sandbox       create + lay out the task + delete (Pomona's sandbox layer)
  harness start from launching the harness to its first model call (config files, process
                start: the harness's own cost, plus one exec)
  model calls   sum of the proxy's call latencies (record + scripted answer: Pomona's proxy)
  harness rest  the rest of the run: tool execution and the harness's own work between calls
  score         the task's scorer
The model is scripted, so "model calls" is pure proxy overhead; with a real model it would be
the model's latency instead.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from pomona import trajectories
from pomona.benchmarks import builtin
from pomona.episodes.rollouts import rollout
from pomona.orchestrator.runtimes.local import LocalRuntime
from pomona.orchestrator.sdk.shared import close_shared


def _per_episode_calls(runs: Path) -> dict[str, tuple[float, float]]:
    """episode -> (first call's start as a POSIX time, sum of call latencies in ms)."""
    out: dict[str, tuple[float, float]] = {}
    for c in trajectories.read(runs, "calls").to_pylist():
        start, latency = c["started_at"].timestamp(), c["latency_ms"] or 0.0
        first, total = out.get(c["episode"], (start, 0.0))
        out[c["episode"]] = (min(first, start), total + latency)
    return out


def bench(harness: str, concurrency: int, root: Path) -> dict[str, float]:
    tasks = builtin.tasks()
    n = max(2, concurrency // 2)
    runs = root / f"runs-c{concurrency}"
    t0 = time.monotonic()
    records = asyncio.run(
        rollout(
            tasks,
            harness,
            "oracle",
            n=n,
            concurrency=concurrency,
            trajectories=str(runs),
            state_dir=str(root / "state"),
            timeout=120,
            progress=False,
        )
    )
    wall = time.monotonic() - t0
    calls = _per_episode_calls(runs)
    rows = []
    for r in records:
        first, model_ms = calls.get(r.episode, (None, 0.0))
        start_ms = (first - r.harness_started_at) * 1000 if first and r.harness_started_at else 0.0
        harness_ms = r.timings.get("harness", 0.0) * 1000
        rows.append(
            {
                "sandbox": r.timings.get("sandbox", 0.0) * 1000,
                "start": start_ms,
                "model": model_ms,
                "rest": max(0.0, harness_ms - start_ms - model_ms),
                "score": r.timings.get("score", 0.0) * 1000,
                "total": r.timings.get("total", 0.0),
            }
        )
    mean = {k: statistics.fmean(row[k] for row in rows) for k in rows[0]}
    ok = sum(r.reward == 1.0 for r in records)
    return {
        "concurrency": concurrency,
        "episodes": len(records),
        "ok": ok,
        "wall": wall,
        "per_min": len(records) / wall * 60,
        **mean,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--harness", default="pi")
    parser.add_argument("--levels", default="1,4,8,16")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="pomona-rollout-bench-"))
    results = []
    try:
        for level in (int(x) for x in args.levels.split(",")):
            results.append(bench(args.harness, level, root))
    finally:
        close_shared()
        LocalRuntime(str(root / "state")).unmount_store()
    print(
        f"\nrollout throughput: {args.harness}, oracle model, built-in tasks "
        f"({len(builtin.tasks())}), local runtime\n"
    )
    print(
        "| concurrency | episodes | resolved | wall s | episodes/min | sandbox ms | "
        "harness start ms | model calls ms | harness rest ms | score ms | episode s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print(
            f"| {r['concurrency']} | {r['episodes']} | {r['ok']} | {r['wall']:.1f} | "
            f"{r['per_min']:.0f} | {r['sandbox']:.0f} | {r['start']:.0f} | {r['model']:.1f} | "
            f"{r['rest']:.0f} | {r['score']:.0f} | {r['total']:.2f} |"
        )


if __name__ == "__main__":
    main()
