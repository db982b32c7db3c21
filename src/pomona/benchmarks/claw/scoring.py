"""Run-level scores as the two benchmarks publish them, from `episodes` rows (task, reward,
failure_kind).

Claw-Eval: three trials per task; a missing or errored trial is padded with a score of 0.0 up to
three (the official procedure, which reruns broken trials by hand until three valid ones exist:
the report says how many were padded so nobody mistakes padding for a weak model). Per task:
avg_score, any_pass (Pass@3), all_pass (Pass^3, the primary metric), avg_pass; pass = score >=
0.75. Pomona's own metrics (benchmarks/metrics.py) keep infra failures out instead.

QwenClawBench: per task the mean of its runs' scores; headline = the mean over tasks; pass@k /
pass^k over runs whose score is perfect (>= 1 - 1e-9); strict accuracy = the share of tasks whose
mean is perfect.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any, TypedDict

from pomona.benchmarks.claw.claw_eval import PASS_THRESHOLD
from pomona.benchmarks.claw.qwenclawbench import PERFECT
from pomona.benchmarks.metrics import pass_at_k, pass_hat_k

Row = Mapping[str, Any]


class ClawEvalFigures(TypedDict):
    """One task's Claw-Eval figures over its (padded) trials."""

    scores: list[float]
    padded: int
    avg_score: float
    any_pass: bool  # Pass@3
    all_pass: bool  # Pass^3
    avg_pass: float


class QwenClawFigures(TypedDict):
    """One task's QwenClawBench figures over its valid runs."""

    scores: list[float]
    mean: float
    perfect: int  # runs with a perfect score


def _by_task(rows: Iterable[Row]) -> dict[str, list[Row]]:
    out: dict[str, list[Row]] = defaultdict(list)
    for row in rows:
        out[row["task"]].append(row)
    return dict(sorted(out.items()))


def _valid(row: Row) -> bool:
    return (row.get("failure_kind") or "none") == "none" and row.get("reward") is not None


def claw_eval_report(rows: Iterable[Row], trials: int = 3) -> dict[str, Any]:
    """Claw-Eval's per-task and overall figures, with the official padding to `trials`."""
    per_task: dict[str, ClawEvalFigures] = {}
    padded_total = 0
    for task, task_rows in _by_task(rows).items():
        scores = [float(r["reward"]) for r in task_rows if _valid(r)][:trials]
        padded = trials - len(scores)
        padded_total += padded
        scores += [0.0] * padded
        passes = [s >= PASS_THRESHOLD for s in scores]
        per_task[task] = {
            "scores": scores,
            "padded": padded,
            "avg_score": sum(scores) / trials,
            "any_pass": any(passes),
            "all_pass": all(passes),
            "avg_pass": sum(passes) / trials,
        }
    figures = per_task.values()

    def mean(values: Iterable[float]) -> float | None:
        return sum(values) / len(figures) if figures else None

    return {
        "tasks": per_task,
        "trials": trials,
        "padded_trials": padded_total,
        "avg_score": mean(t["avg_score"] for t in figures),
        "pass_at_3": mean(t["any_pass"] for t in figures),
        "pass_hat_3": mean(t["all_pass"] for t in figures),
        "avg_pass": mean(t["avg_pass"] for t in figures),
    }


def qwenclawbench_report(rows: Iterable[Row], ks: Iterable[int] = (1,)) -> dict[str, Any]:
    """QwenClawBench's headline, pass@k / pass^k on perfect runs, and strict accuracy. Runs
    that did not run (infra failures) are left out and counted."""
    per_task: dict[str, QwenClawFigures] = {}
    infra = 0
    for task, task_rows in _by_task(rows).items():
        valid = [float(r["reward"]) for r in task_rows if _valid(r)]
        infra += len(task_rows) - len(valid)
        if valid:
            per_task[task] = {
                "scores": valid,
                "mean": sum(valid) / len(valid),
                "perfect": sum(s >= PERFECT for s in valid),
            }
    n = len(per_task)
    out: dict[str, Any] = {
        "tasks": per_task,
        "infra_failures": infra,
        "headline": sum(t["mean"] for t in per_task.values()) / n if n else None,
        "strict_accuracy": sum(t["mean"] >= PERFECT for t in per_task.values()) / n if n else None,
        "pass_at": {},
        "pass_hat": {},
    }
    least = min((len(t["scores"]) for t in per_task.values()), default=0)
    for k in ks:
        if 1 <= k <= least:
            out["pass_at"][k] = (
                sum(pass_at_k(len(t["scores"]), t["perfect"], k) for t in per_task.values()) / n
            )
            out["pass_hat"][k] = (
                sum(pass_hat_k(len(t["scores"]), t["perfect"], k) for t in per_task.values()) / n
            )
    return out


def reports(directory: str, trials: int = 3) -> dict[str, Any]:
    """Both benchmarks' reports for every (benchmark, harness, model) in a trajectory store."""
    from pomona import trajectories

    groups: dict[tuple[str, str, str], list[Row]] = defaultdict(list)
    for row in trajectories.read(directory, "episodes").to_pylist():
        benchmark = row.get("benchmark") or ""
        if benchmark.startswith(("claw-eval", "qwenclawbench")) and row.get("harness"):
            groups[(benchmark, row["harness"], row.get("model") or "")].append(row)
    out = {}
    for (benchmark, harness, model), rows in sorted(groups.items()):
        report = (
            claw_eval_report(rows, trials)
            if benchmark.startswith("claw-eval")
            else qwenclawbench_report(rows, ks=range(1, trials + 1))
        )
        out[f"{benchmark} · {harness} · {model}"] = report
    return out


def main(argv: list[str] | None = None) -> int:
    """python -m pomona.benchmarks.claw.scoring [DIR]: the published figures of recorded runs."""
    import argparse
    import json

    p = argparse.ArgumentParser(description=main.__doc__)
    p.add_argument("trajectories", nargs="?", default="pomona-runs")
    p.add_argument("--trials", type=int, default=3)
    args = p.parse_args(argv)
    summary = {
        key: {k: v for k, v in r.items() if k != "tasks"}
        for key, r in reports(args.trajectories, args.trials).items()
    }
    print(json.dumps(summary, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
