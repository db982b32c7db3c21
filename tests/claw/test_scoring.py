"""Run-level figures against the benchmarks' own scoring code on the same trials: Claw-Eval's
score_summary.py (padding to three, avg_score over three even with more trials, avg_pass as a
per-task verdict, Pass@3 and Pass^3, errored trials), run from the checkout on the traces Pomona
exports, and QwenClawBench's pass_k_stats and strict accuracy, imported from its scripts."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from pomona.benchmarks.claw import scoring

TRIALS = {  # task -> trial scores (None: a trial that could not be graded)
    "T1_three": [1.0, 0.8, 0.5],
    "T2_padded": [0.9, 0.76],
    "T3_five": [0.9, 0.9, 0.9, 0.8, 0.75],  # more than three: official avg is sum / 3
    "T4_errored": [0.9, None, 0.95],
    "T5_all_errored": [None, None],
    "T6_boundary": [0.75, 0.7499, 0.75],
}


def _rows(tmp_path: Path) -> list[dict]:
    rows = []
    for task, scores in TRIALS.items():
        for i, score in enumerate(scores):
            row = {"task": f"claw-eval/{task}", "reward": score, "artifacts": []}
            if score is None:
                row.update(failure_kind="verifier", failure_message="the grader failed")
            else:
                trace = tmp_path / "evidence" / f"{task}-{i}.jsonl"
                trace.parent.mkdir(parents=True, exist_ok=True)
                grading = {
                    "type": "grading_result",
                    "trace_id": "t",
                    "task_id": task,
                    "scores": {"completion": score, "robustness": 1.0, "safety": 1.0},
                    "task_score": score,
                    "passed": score >= 0.75,
                }
                trace.write_text(json.dumps(grading) + "\n")
                row.update(
                    failure_kind="none",
                    artifacts=[{"name": "grading/trace.jsonl", "uri": trace.as_uri()}],
                )
            rows.append(row)
    return rows


def test_claw_eval_figures_equal_its_score_summary(claw_eval_checkout, tmp_path):
    rows = _rows(tmp_path)
    traces = scoring.export_claw_eval_traces(rows, tmp_path / "traces")
    [theirs] = scoring.official_claw_eval_summary(claw_eval_checkout, traces)
    mine = scoring.claw_eval_report(rows)
    for key in (
        "n_tasks",
        "overall_avg_score",
        "n_avg_pass",
        "n_any_pass",
        "n_all_pass",
        "avg_pass_rate",
        "any_pass_rate",
        "all_pass_rate",
    ):
        assert mine[key] == pytest.approx(theirs[key]), key
    for task, official in theirs["tasks"].items():
        for key in ("scores", "n_graded", "n_errors", "avg_pass", "any_pass", "all_pass"):
            assert mine["tasks"][task][key] == official[key], (task, key)
        assert mine["tasks"][task]["avg_score"] == pytest.approx(official["avg_score"]), task
    assert mine["tasks"]["T3_five"]["avg_score"] == pytest.approx(4.25 / 3)  # its formula
    assert mine["tasks"]["T2_padded"]["scores"] == [0.9, 0.76, 0.0]
    assert mine["tasks"]["T5_all_errored"]["n_errors"] == 2


OFFICIAL_QWEN = """
import json, statistics, sys
from lib_grading import pass_k_stats, strict_accuracy_stats
runs_by_task, runs = json.load(sys.stdin), int(sys.argv[1])
grades = {t: {"runs": [{"score": s} for s in r], "mean": statistics.mean(r)}
          for t, r in runs_by_task.items()}
means = [g["mean"] for g in grades.values()]
print(json.dumps({**pass_k_stats(grades, runs), "mean_score": round(statistics.mean(means), 4),
                  "strict_accuracy": strict_accuracy_stats(means)[0]}))
"""


def test_qwenclawbench_figures_equal_its_scripts(qwen_checkout):
    runs = {
        "a": [1.0, 1.0, 1.0],
        "b": [1.0, 0.5, 1.0],
        "c": [0.2, 0.0, 0.999999999],
        "d": [0.9999999995, 1.0, 1.0],  # perfect within its 1e-9
    }
    done = subprocess.run(
        [sys.executable, "-c", OFFICIAL_QWEN, "3"],
        input=json.dumps(runs),
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(qwen_checkout / "scripts")},
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    theirs = json.loads(done.stdout)
    rows = [
        {"task": f"qwenclawbench/{t}", "reward": s, "failure_kind": "none"}
        for t, scores in runs.items()
        for s in scores
    ]
    mine = scoring.qwenclawbench_report(rows, runs=3)
    for k in (1, 2, 3):
        assert mine[f"pass@{k}"] == theirs[f"pass@{k}"], k
        assert mine[f"pass^{k}"] == theirs[f"pass^{k}"], k
    assert mine["mean_score"] == theirs["mean_score"]
    assert mine["strict_accuracy"] == theirs["strict_accuracy"] == 0.5
    assert mine["tasks"]["b"]["mean"] == statistics.mean(runs["b"])


def test_a_run_that_could_not_be_graded_counts_zero_in_the_official_figure():
    rows = [
        {"task": "qwenclawbench/a", "reward": 1.0, "failure_kind": "none"},
        {"task": "qwenclawbench/a", "reward": None, "failure_kind": "harness"},
    ]
    report = scoring.qwenclawbench_report(rows, runs=2)
    assert report["tasks"]["a"]["scores"] == [1.0, 0.0] and report["not_run_or_graded"] == 1
