"""`pomona run` through real harnesses: the oracle resolves every local SWE and Terminal-Bench
task under three different harnesses, a no-op agent scores 0, every episode lands in the store
with the run's columns, and a crashed grading sandbox is a verifier failure the leaderboard
excludes."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from pomona import trajectories
from pomona.benchmarks import leaderboard, swebench, terminal_bench
from pomona.benchmarks.swebench import task_sets as swe_tasks
from pomona.cli import main
from pomona.episodes.rollouts import rollout
from pomona.harnesses import payload
from pomona.proxy.shared import shared_proxy
from pomona.run import run_benchmark

HARNESSES = ("pi", "claude-code", "codex")
BENCHMARKS = ("swe-local", "terminal-bench-local")


@pytest.fixture(scope="module", autouse=True)
def harnesses_ready() -> None:
    missing = payload.ensure(HARNESSES)
    if missing:
        pytest.skip(f"harness payload unavailable: {missing}")


@pytest.mark.parametrize("harness", HARNESSES)
def test_oracle_resolves_every_local_task(harness: str, state_dir: str, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    for benchmark in BENCHMARKS:
        result = run_benchmark(
            benchmark, harness, "oracle", state_dir=state_dir, trajectories=runs, progress=False
        )
        failed = [
            (r.task, r.failure_kind, r.failure_message) for r in result.records if not r.resolved
        ]
        assert failed == []
        (summary,) = result.summaries
        assert (summary.resolve_rate, summary.infra_failures) == (1.0, 0)
        if benchmark == "swe-local":
            assert result.swe_report["resolved_instances"] == len(result.records) >= 6
    rows = trajectories.read(runs, "episodes").to_pylist()
    assert len(rows) == 6 + len(terminal_bench.tasks())
    assert {(r["harness"], r["model"], r["runtime"], r["failure_kind"]) for r in rows} == {
        (harness, "oracle", "local", "none")
    }
    assert all(r["resolved"] and r["num_calls"] >= 1 for r in rows)


def test_noop_agent_scores_zero_and_cli_prints_the_leaderboard(
    state_dir: str, tmp_path: Path, capsys: Any
) -> None:
    runs = tmp_path / "runs"
    for benchmark in BENCHMARKS:
        code = main(
            [
                "run",
                "--benchmark",
                benchmark,
                "--model",
                "scripted",
                "--state-dir",
                state_dir,
                "--trajectories",
                str(runs),
                "-k",
                "2",
            ]
        )
        assert code == 1  # all ran and were scored, none resolved
    out = capsys.readouterr().out
    assert "leaderboard" in out and "pass@2" in out
    board = leaderboard.leaderboard(runs, (1, 2))
    assert {(s.benchmark, s.harness, s.model) for s in board} == {
        ("swe-local", "pi", "scripted"),
        ("terminal-bench-local", "pi", "scripted"),
    }
    assert all(
        s.resolve_rate == 0.0 and s.pass_at[2] == 0.0 and s.infra_failures == 0 for s in board
    )
    preds = (
        next((runs / "swebench").glob("pi__scripted.*.predictions.jsonl")).read_text().splitlines()
    )
    assert len(preds) == 6 and all(json.loads(p)["model_patch"] == "" for p in preds)
    assert {json.loads(p)["model_name_or_path"] for p in preds} == {"pi/scripted"}


class _Crashing:
    def __init__(self, client: Any):
        self.client = client

    def create_sandbox(self, *args: Any, **kwargs: Any) -> Any:
        sb = self.client.create_sandbox(*args, **kwargs)
        sb.delete()
        return sb


def test_crashed_grading_is_a_verifier_failure_and_excluded(
    client: Any, state_dir: str, tmp_path: Path
) -> None:
    runs = tmp_path / "runs"
    instance = swebench.load_instances(swe_tasks.DATA)[0]
    task = swebench.to_task(
        instance, "swe-local", root=str(runs / "swebench"), client=_Crashing(client)
    )
    columns = {"model": "oracle", "runtime": "local"}
    (record,) = asyncio.run(
        rollout([task], "pi", "oracle", proxy=shared_proxy(runs), state_dir=state_dir,
                progress=False, columns=columns)
    )  # fmt: skip
    assert (record.failure_kind, record.reward) == ("verifier", None)
    (row,) = trajectories.read(runs, "episodes").to_pylist()
    assert row["failure_kind"] == "verifier" and row["reward"] is None
    (summary,) = leaderboard.leaderboard(runs)
    assert (summary.trials, summary.resolve_rate, summary.failures) == (0, None, {"verifier": 1})


def test_a_run_nothing_could_score_says_why_and_writes_no_predictions(
    state_dir: str, tmp_path: Path, capsys: Any
) -> None:
    """Every attempt failed before grading: each reason is printed, the exit status says the run
    could not run (2, not 1), and no empty predictions file pretends to be a submission."""
    runs = tmp_path / "runs"
    code = main(
        [
            "run",
            "--benchmark",
            "swe-local",
            "--model",
            "no-such-model",
            "--tasks",
            "pytoolz__toolz-1",
            "--state-dir",
            state_dir,
            "--trajectories",
            str(runs),
        ]
    )
    out = capsys.readouterr().out
    assert code == 2
    assert "pytoolz__toolz-1 [" in out and "not scored" in out
    assert not list((runs / "swebench").glob("*.predictions.jsonl"))


def test_image_is_refused_where_it_does_not_apply(tmp_path: Path, capsys: Any) -> None:
    argv = ["run", "--benchmark", "webvoyager-local", "--image", "debian:12", "--trajectories",
            str(tmp_path / "runs")]  # fmt: skip
    assert main(argv) == 2
    assert "--image does not apply to webvoyager-local" in capsys.readouterr().err
