"""Pomona's local sets, small offline fixtures in the benchmarks' own layouts run with their
frameworks from the checkouts (POMONA_CLAW_EVAL, POMONA_QWENCLAWBENCH): `pomona run` as a user
types it, the oracle (Pomona's scripted steps, which the official loaders ignore) passing and
each negative failing, a safety violation scoring 0; a task that cannot run here is listed with
its reason and the rest of the run goes on."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from pomona.benchmarks import registry
from pomona.cli import main
from pomona.run import run_benchmark

pytestmark = pytest.mark.timeout(1200)


@pytest.fixture
def frameworks(claw_eval_checkout: Path, qwen_checkout: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("POMONA_CLAW_EVAL", str(claw_eval_checkout))
    monkeypatch.setenv("POMONA_QWENCLAWBENCH", str(qwen_checkout))


def test_the_local_claw_eval_oracles_pass_through_pomona_run(need, frameworks, tmp_path, capsys):
    code = main(["run", "--benchmark", "claw-eval-local", "--trajectories", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert out.count(" 1/1 ") == 2 and "claw-eval-local [judge: scripted]" in out


def test_the_local_negatives_fail_and_unsafe_ones_score_zero(
    need, frameworks, tmp_path, monkeypatch
):
    real = registry.load

    def negatives(*args, **kwargs):
        return [
            dataclasses.replace(t, solution=t.metadata["negative"]) for t in real(*args, **kwargs)
        ]

    monkeypatch.setattr(registry, "load", negatives)
    result = run_benchmark("claw-eval-local", trajectories=tmp_path, progress=False)
    assert {(r.task, r.failure_kind, r.reward) for r in result.records} == {
        ("claw-eval/L001_todo_close_two", "none", 0.0),
        ("claw-eval/L002_mail_draft_reply", "none", 0.0),
    }


def test_the_local_qwenclawbench_oracle_passes(need, frameworks, tmp_path):
    need("claude-code")
    result = run_benchmark(
        "qwenclawbench-local",
        "claude-code",
        trajectories=tmp_path,
        task_ids=["task_01_sales_by_region", "task_04_action_items"],  # automated; hybrid, judged
        progress=False,
    )
    assert {(r.task, r.failure_kind, r.resolved) for r in result.records} == {
        ("qwenclawbench/task_01_sales_by_region", "none", True),
        ("qwenclawbench/task_04_action_items", "none", True),
    }


def test_unavailable_tasks_are_set_aside_with_their_reasons(claw_eval_checkout):
    from pomona.benchmarks.claw import load
    from pomona.run import not_run, playable

    asked = ["T086_pinbench_calendar_event_creation", "C02zh_personal_finance"]  # C02: web_real
    loaded = load("claw-eval", str(claw_eval_checkout), only=asked)
    tasks, unavailable = playable(f"claw-eval:{claw_eval_checkout}", "m", None, "local", loaded)
    assert [t.id for t in tasks] == ["claw-eval/T086_pinbench_calendar_event_creation"]
    assert not_run(unavailable) == (
        "  claw-eval/C02zh_personal_finance: needs the internet: its service web_real searches "
        "the live web"
    )


def test_official_tasks_have_no_oracle_and_the_run_says_so(claw_eval_checkout, tmp_path, capsys):
    code = main(
        ["run", "--benchmark", f"claw-eval:{claw_eval_checkout}", "--trajectories", str(tmp_path),
         "--tasks", "T086_pinbench_calendar_event_creation"]
    )  # fmt: skip
    assert code == 2 and "ships no gold solutions" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_a_run_with_nothing_runnable_says_why_before_it_starts(
    claw_eval_checkout, tmp_path, capsys
):
    code = main(
        ["run", "--benchmark", f"claw-eval:{claw_eval_checkout}", "--trajectories", str(tmp_path),
         "--tasks", "C02zh_personal_finance"]
    )  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "can run here" in err and "needs the internet" in err
    assert not list(tmp_path.iterdir())  # nothing started, nothing recorded


def test_claw_evals_own_loop_is_refused_on_another_benchmark_before_it_starts(tmp_path, capsys):
    """claw-eval's loop is laid out by Claw-Eval's tasks: elsewhere the run is refused in words,
    and nothing is made (no run manifest, no sandbox)."""
    code = main(["run", "--benchmark", "swe-local", "--harness", "claw-eval",
                 "--trajectories", str(tmp_path)])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2, err
    assert "claw-eval is a benchmark's own loop" in err and "not swe-local" in err
    assert "claw-eval-local and claw-eval only" in err
    assert not list(tmp_path.rglob("*.json"))  # refused before the manifest is written
