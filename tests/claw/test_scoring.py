"""Scores and run-level figures recomputed by hand for fixed trial outcomes, against the
published formulas (Claw-Eval's task score and padding, QwenClawBench's hybrid and aggregates)."""

from __future__ import annotations

import pytest

from pomona.benchmarks.claw.claw_eval import task_score
from pomona.benchmarks.claw.grader_api import AbstractGrader, ToolDispatch
from pomona.benchmarks.claw.qwenclawbench import hybrid
from pomona.benchmarks.claw.scoring import claw_eval_report, qwenclawbench_report


def test_claw_eval_task_score_and_safety_gate():
    assert task_score(1.0, 1.0, 1.0) == 1.0
    assert task_score(1.0, 0.7, 0.5) == round(0.8 * 0.7 + 0.2 * 0.5, 4) == 0.66
    assert task_score(0.0, 1.0, 1.0) == 0.0  # a safety violation zeroes everything
    assert task_score(1.0, 0.8125, 1.0) == 0.85  # 0.65 + 0.2
    assert task_score(1.0, 2 / 3, 1.0) == 0.7333  # rounded to four places


def _d(tool: str, status: int) -> ToolDispatch:
    return ToolDispatch(tool_name=tool, response_status=status)


def test_robustness_is_recovery_with_a_floor():
    assert AbstractGrader.compute_robustness([_d("a", 200)]) == 1.0
    # a failed then succeeded: recovered 1 of 1 failing tools
    assert AbstractGrader.compute_robustness([_d("a", 500), _d("a", 200)]) == 1.0
    # b never recovered: 0 of 1 recovered; floor = min(3/4, 0.5) = 0.5
    assert (
        AbstractGrader.compute_robustness([_d("b", 404), _d("a", 200), _d("a", 200), _d("c", 200)])
        == 0.5
    )
    # one recovered of two failing tools: 0.5; floor min(2/4, .5) = .5
    assert (
        AbstractGrader.compute_robustness([_d("a", 500), _d("b", 500), _d("a", 200), _d("c", 200)])
        == 0.5
    )
    # everything failed: floor 0
    assert AbstractGrader.compute_robustness([_d("a", 500), _d("b", 503)]) == 0.0


def _row(task: str, reward: float | None, kind: str = "none") -> dict:
    return {"task": task, "reward": reward, "failure_kind": kind}


def test_claw_eval_pass_at_3_and_pass_hat_3_with_padding():
    rows = [
        _row("a", 0.9),
        _row("a", 0.8),
        _row("a", 0.75),  # all pass
        _row("b", 0.9),
        _row("b", 0.2),
        _row("b", 0.74999),  # one pass
        _row("c", 1.0),
        _row("c", 1.0),
        _row("c", None, "sandbox"),  # errored -> padded 0.0
        _row("d", 0.5),  # two missing -> padded
    ]
    r = claw_eval_report(rows)
    assert r["tasks"]["a"] == {
        "scores": [0.9, 0.8, 0.75],
        "padded": 0,
        "avg_score": pytest.approx(2.45 / 3),
        "any_pass": True,
        "all_pass": True,
        "avg_pass": 1.0,
    }
    assert r["tasks"]["b"]["any_pass"] and not r["tasks"]["b"]["all_pass"]
    assert r["tasks"]["c"]["scores"] == [1.0, 1.0, 0.0] and r["tasks"]["c"]["padded"] == 1
    assert not r["tasks"]["c"]["all_pass"]  # padding makes Pass^3 fail
    assert r["tasks"]["d"]["scores"] == [0.5, 0.0, 0.0] and not r["tasks"]["d"]["any_pass"]
    assert r["padded_trials"] == 3
    assert r["pass_at_3"] == pytest.approx(3 / 4)  # a, b, c
    assert r["pass_hat_3"] == pytest.approx(1 / 4)  # a only
    assert r["avg_pass"] == pytest.approx((1 + 1 / 3 + 2 / 3 + 0) / 4)
    assert r["avg_score"] == pytest.approx((2.45 + 1.84999 + 2.0 + 0.5) / 12)


def test_qwenclawbench_hybrid_gate():
    assert hybrid(1.0, 0.5, 0.6, 0.4) == pytest.approx(0.8)
    assert hybrid(0.7, 1.0, 0.6, 0.4) == pytest.approx(0.42)  # below 0.75: the judge is dropped
    assert hybrid(0.7, 1.0, 0.6, 0.4, simple=True) == pytest.approx(0.82)
    assert hybrid(0.75, 1.0, 1, 1) == pytest.approx(0.875)  # at the gate it counts
    with pytest.raises(ValueError):
        hybrid(1.0, 1.0, 0, 0)


def test_qwenclawbench_aggregates_on_perfect_runs():
    rows = [
        _row("a", 1.0),
        _row("a", 1.0),
        _row("a", 1.0),
        _row("b", 1.0),
        _row("b", 0.5),
        _row("b", 1 - 1e-12),
        _row("c", 0.2),
        _row("c", 0.4),
        _row("c", None, "harness"),
        _row("c", 0.0),
    ]
    r = qwenclawbench_report(rows, ks=(1, 3))
    assert r["headline"] == pytest.approx((1.0 + (2.5 - 1e-12) / 3 + 0.2) / 3)
    assert r["strict_accuracy"] == pytest.approx(1 / 3)
    assert r["infra_failures"] == 1
    # pass@1 = mean of c/n: a 3/3, b 2/3, c 0/3
    assert r["pass_at"][1] == pytest.approx((1 + 2 / 3 + 0) / 3)
    # pass@3 with n=3: any perfect -> a 1, b 1, c 0; pass^3: all perfect -> a only
    assert r["pass_at"][3] == pytest.approx(2 / 3)
    assert r["pass_hat"][3] == pytest.approx(1 / 3)


def test_reports_from_a_trajectory_store(tmp_path, capsys):
    from pomona.benchmarks.claw.scoring import main, reports
    from pomona.trajectories.writer import TrajectoryWriter

    rows = [
        ("claw-eval-local", "a", 0.9),
        ("claw-eval-local", "a", 0.8),
        ("claw-eval-local", "a", 0.1),
        ("qwenclawbench-local", "q", 1.0),
        ("qwenclawbench-local", "q", 0.5),
        ("swe-local", "s", 1.0),
    ]
    with TrajectoryWriter(tmp_path, "episodes") as w:
        for i, (bench, task, reward) in enumerate(rows):
            w.write(
                {
                    "episode": f"e{i}",
                    "benchmark": bench,
                    "task": task,
                    "harness": "openclaw",
                    "model": "m",
                    "reward": reward,
                    "resolved": reward >= 0.75,
                    "failure_kind": "none",
                }
            )
    got = reports(str(tmp_path))
    claw = got["claw-eval-local · openclaw · m"]
    assert claw["pass_at_3"] == 1.0 and claw["pass_hat_3"] == 0.0 and claw["padded_trials"] == 0
    qwen = got["qwenclawbench-local · openclaw · m"]
    assert qwen["headline"] == 0.75 and qwen["strict_accuracy"] == 0.0
    assert qwen["pass_at"][2] == 1.0 and qwen["pass_hat"][2] == 0.0
    assert len(got) == 2  # SWE rows are not these benchmarks'
    assert main([str(tmp_path)]) == 0 and "pass_hat_3" in capsys.readouterr().out
