"""Run-level figures as the two benchmarks' own scoring code computes them, from `episodes` rows
(task, reward, failure_kind), and the way to run that code itself on a run's traces.

Claw-Eval (its score_summary.py): three trials expected per task; the graded trials' task
scores, padded with 0.0 up to three (a trial that could not be graded counts 0 there, which the
official procedure avoids by rerunning it by hand); avg_score = their sum / 3 (also when more than
three were graded: its formula), avg_pass = avg_score >= 0.75, any_pass (Pass@3), all_pass
(Pass^3, the primary metric since March 2026) over all of them.

QwenClawBench (its benchmark.py summary, lib_grading.pass_k_stats): per task the mean of its runs'
scores; mean_score = the mean over tasks, rounded to 4 places; pass@k / pass^k for k = 1..runs
over runs whose score is perfect (>= 1 - 1e-9), 0 where a task has fewer than k runs; strict
accuracy = the share of tasks whose mean is perfect. Its summary grades every run, a failed one
too; here a run that could not run or be graded counts 0 and is counted apart.

Pomona's own metrics (benchmarks/metrics.py, the leaderboard) keep infrastructure failures out
of every rate instead.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from collections.abc import Iterable, Mapping
from math import comb
from pathlib import Path
from typing import Any

from pomona.errors import PomonaError

PASS_THRESHOLD = 0.75  # Claw-Eval's
EXPECTED_TRIALS = 3  # Claw-Eval's
PERFECT = 1.0 - 1e-9  # QwenClawBench's


class ScoringError(PomonaError, RuntimeError):
    """The benchmark's own scoring script failed on the run's results (its error is said)."""


Row = Mapping[str, Any]


def _by_task(rows: Iterable[Row]) -> dict[str, list[Row]]:
    out: dict[str, list[Row]] = defaultdict(list)
    for row in rows:
        out[str(row["task"]).split("/", 1)[-1]].append(row)
    return dict(sorted(out.items()))


def scored(row: Row) -> bool:
    return (row.get("failure_kind") or "none") == "none" and row.get("reward") is not None


def claw_eval_task(rows: list[Row], expected: int = EXPECTED_TRIALS) -> dict[str, Any]:
    """One task's figures over its trials, in score_summary.py's order of fields."""
    graded = [float(r["reward"]) for r in rows if scored(r)]
    scores = graded + [0.0] * max(0, expected - len(graded))
    avg = sum(scores) / expected
    return {
        "scores": scores,
        "n_graded": len(graded),
        "n_errors": len(rows) - len(graded),
        "avg_score": avg,
        "avg_pass": avg >= PASS_THRESHOLD,
        "any_pass": any(s >= PASS_THRESHOLD for s in scores),
        "all_pass": all(s >= PASS_THRESHOLD for s in scores),
    }


def claw_eval_report(rows: Iterable[Row], expected: int = EXPECTED_TRIALS) -> dict[str, Any]:
    """Claw-Eval's per-task and aggregate figures (score_summary.py's analyze_model)."""
    tasks = {task: claw_eval_task(trials, expected) for task, trials in _by_task(rows).items()}
    n = len(tasks)
    count = {
        k: sum(bool(t[k]) for t in tasks.values()) for k in ("avg_pass", "any_pass", "all_pass")
    }
    return {
        "n_tasks": n,
        "overall_avg_score": sum(t["avg_score"] for t in tasks.values()) / n if n else 0.0,
        "n_avg_pass": count["avg_pass"],
        "n_any_pass": count["any_pass"],
        "n_all_pass": count["all_pass"],
        "avg_pass_rate": count["avg_pass"] / n if n else 0.0,
        "any_pass_rate": count["any_pass"] / n if n else 0.0,
        "all_pass_rate": count["all_pass"] / n if n else 0.0,
        "tasks": tasks,
    }


def _pass_at(n: int, c: int, k: int) -> float:
    if n < k:
        return 0.0
    return 1.0 if c >= n else 1.0 - comb(n - c, k) / comb(n, k)


def _pass_pow(n: int, c: int, k: int) -> float:
    return 0.0 if n < k else comb(c, k) / comb(n, k)


def qwenclawbench_report(rows: Iterable[Row], runs: int = 1) -> dict[str, Any]:
    """QwenClawBench's summary figures; `runs` per task as its --runs."""
    per_task: dict[str, dict[str, Any]] = {}
    infra = 0
    for task, task_rows in _by_task(rows).items():
        scores = [float(r["reward"]) if scored(r) else 0.0 for r in task_rows]
        infra += sum(not scored(r) for r in task_rows)
        per_task[task] = {
            "scores": scores,
            "mean": statistics.mean(scores),
            "perfect": sum(s >= PERFECT for s in scores),
        }
    out: dict[str, Any] = {
        "tasks_completed": len(per_task),
        "mean_score": round(statistics.mean(t["mean"] for t in per_task.values()), 4)
        if per_task
        else 0.0,
        "strict_accuracy": sum(t["mean"] >= PERFECT for t in per_task.values()) / len(per_task)
        if per_task
        else 0.0,
        "not_run_or_graded": infra,
        "tasks": per_task,
    }
    for k in range(1, runs + 1):
        at = [_pass_at(len(t["scores"]), t["perfect"], k) for t in per_task.values()]
        pw = [_pass_pow(len(t["scores"]), t["perfect"], k) for t in per_task.values()]
        out[f"pass@{k}"] = round(sum(at) / len(at), 4) if at else 0.0
        out[f"pass^{k}"] = round(sum(pw) / len(pw), 4) if pw else 0.0
    return out


# --- running Claw-Eval's own score_summary.py on a run ------------------------------------------


def export_claw_eval_traces(rows: Iterable[Row], out: Path, label: str = "pomona") -> Path:
    """The run's trials as Claw-Eval's trace directory (OUT/LABEL/<dated>/<task>_<8 hex>.jsonl):
    each graded trial's trace with its grading_result event (its `grading/trace.jsonl`
    artifact), and for each trial that could not be graded a trace without one, so the
    script counts it as an error, as it counts a crashed trial."""
    where = out / label / "00-pomona"
    where.mkdir(parents=True, exist_ok=True)
    for i, row in enumerate(rows):
        task = str(row["task"]).split("/", 1)[-1]
        trace = _artifact(row, "grading/trace.jsonl") if scored(row) else None
        if trace is None:
            end = {"type": "trace_end", "failure_modes": [str(row.get("failure_message") or "")]}
            text = json.dumps({"type": "trace_start", "task_id": task}) + "\n" + json.dumps(end)
        else:
            text = trace.read_text(encoding="utf-8")
        (where / f"{task}_{i:08x}.jsonl").write_text(text + "\n", encoding="utf-8")
    return out


def _artifact(row: Row, name: str) -> Path | None:
    for item in row.get("artifacts") or []:
        if item.get("name") == name and str(item.get("uri", "")).startswith("file://"):
            path = Path(str(item["uri"])[len("file://") :])
            return path if path.is_file() else None
    return None


def official_claw_eval_summary(checkout: Path, traces: Path) -> list[dict[str, Any]]:
    """Claw-Eval's score_summary.py, from the user's checkout, on a trace directory; the JSON it
    saves (score_summary.json)."""
    script = checkout / "score_summary.py"
    done = subprocess.run(
        [sys.executable, str(script), str(traces)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=str(traces),
    )
    if done.returncode != 0:
        raise ScoringError(f"score_summary.py failed: {done.stderr[-2000:]}")
    result: list[dict[str, Any]] = json.loads((traces / "score_summary.json").read_text())
    return result


def main(argv: list[str] | None = None) -> int:
    """python -m pomona.benchmarks.claw.scoring DIR [--claw-eval CHECKOUT]: the two
    benchmarks' figures of the Claw episodes recorded in DIR; with --claw-eval, Claw-Eval's own
    score_summary.py on the same trials beside Pomona's."""
    import argparse

    from pomona import trajectories

    p = argparse.ArgumentParser(description=main.__doc__)
    p.add_argument("trajectories", nargs="?", default="pomona-runs")
    p.add_argument("--runs", type=int, default=EXPECTED_TRIALS, help="QwenClawBench's --runs")
    p.add_argument("--claw-eval", type=Path, help="a Claw-Eval checkout: run its score_summary")
    args = p.parse_args(argv)
    groups: dict[tuple[str, str, str], list[Row]] = defaultdict(list)
    for row in trajectories.read(args.trajectories, "episodes").to_pylist():
        benchmark = str(row.get("benchmark") or "")
        if benchmark.startswith(("claw-eval", "qwenclawbench")) and row.get("harness"):
            groups[(benchmark, row["harness"], row.get("model") or "")].append(row)
    summary: dict[str, Any] = {}
    for (benchmark, harness, model), rows in sorted(groups.items()):
        key = f"{benchmark} · {harness} · {model}"
        if benchmark.startswith("claw-eval"):
            report = claw_eval_report(rows)
            if args.claw_eval:
                with tempfile.TemporaryDirectory() as tmp:
                    traces = export_claw_eval_traces(rows, Path(tmp))
                    report["official"] = official_claw_eval_summary(args.claw_eval, traces)
        else:
            report = qwenclawbench_report(rows, args.runs)
        summary[key] = {k: v for k, v in report.items() if k != "tasks"}
    print(json.dumps(summary, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
