"""Resume: a `pomona run` SIGKILLed mid-way is resumed and plays exactly the attempts that have
no model result, never one that has; which attempts those are, over every failure kind; and a
superseded failure counts nowhere."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from pomona import trajectories
from pomona.benchmarks import metrics
from pomona.benchmarks.resume import RunManifest, current, pending, stored
from pomona.cli import main
from pomona.harnesses import payload

FAILURES = ("sandbox", "harness", "proxy", "upstream", "verifier", "timeout")


def _row(task: str, attempt: int, kind: str, ended: float, **extra: Any) -> dict[str, Any]:
    meta = {"attempt": attempt, **extra.pop("meta", {})}
    return {"run": "r", "task": task, "failure_kind": kind, "ended_at": ended,
            "metadata": json.dumps(meta), "benchmark": "b", "harness": "h", "model": "m",
            "reward": 1.0 if kind == "none" else None, "resolved": kind == "none", **extra}  # fmt: skip


def test_what_is_run_again():
    planned = [(t, i) for t in ("a", "b", "c", "d", "e") for i in range(2)]
    rows = [
        _row("a", 0, "none", 1),  # a model result: never again
        _row("a", 1, "none", 1, reward=0.0, resolved=False),  # unresolved is a result too
        _row("b", 0, "sandbox", 1),
        _row("b", 0, "none", 2),  # failed, then re-run to a result
        *(_row("c", i, kind, 1) for i, kind in enumerate(FAILURES[:2])),
        _row("d", 0, "none", 1, meta={"role": "judge"}),  # a judge's episode is no result
        {**_row("e", 0, "none", 1), "run": "another-run"},  # another run's result
    ]
    assert pending(rows, "r", planned) == [
        ("b", 1), ("c", 0), ("c", 1), ("d", 0), ("d", 1), ("e", 0), ("e", 1)
    ]  # fmt: skip
    for kind in FAILURES:  # every failure kind is run again
        assert pending([_row("x", 0, kind, 1)], "r", [("x", 0)]) == [("x", 0)]
    # metrics count each attempt once: b/0's superseded failure counts nowhere
    (summary,) = metrics.summarize([r for r in rows if r["task"] in ("a", "b")])
    assert summary.infra_failures == 0 and summary.trials == 3
    assert len(current([_row("x", 0, "harness", 1), _row("x", 0, "timeout", 2)])) == 1


@pytest.fixture(scope="module", autouse=True)
def pi_ready() -> None:
    if missing := payload.ensure(["pi"]):
        pytest.skip(f"harness payload unavailable: {missing}")


def _wait_for_a_result(runs: Path, process: subprocess.Popen[bytes]) -> None:
    for _ in range(3000):
        if process.poll() is not None:
            raise AssertionError(f"the run ended before it could be killed ({process.returncode})")
        if runs.is_dir() and any(r["failure_kind"] == "none" for r in stored(runs)):
            return
        time.sleep(0.1)
    raise AssertionError("no attempt finished in 300 s")


def test_a_killed_run_is_resumed_exactly(state_dir: str, tmp_path: Path):
    runs = tmp_path / "runs"
    killed_state = tempfile.mkdtemp(prefix="pomona-killed-")
    argv = [sys.executable, "-m", "pomona.cli", "run", "--benchmark", "text", "--concurrency", "1",
            "--trajectories", str(runs), "--state-dir", killed_state]  # fmt: skip
    process = subprocess.Popen(argv, start_new_session=True, stderr=subprocess.DEVNULL)
    try:
        _wait_for_a_result(runs, process)
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        subprocess.run([sys.executable, "-m", "pomona.cli", "gc", "--state-dir", killed_state],
                       capture_output=True, check=True)  # fmt: skip
        from pomona.orchestrator.runtimes.local import LocalRuntime

        LocalRuntime(killed_state).unmount_store()
    (manifest,) = (runs / "runs").glob("*.json")
    run_id = manifest.stem
    plan = RunManifest.load(runs, run_id).planned
    before = stored(runs)
    finished = {(r["task"], json.loads(r["metadata"])["attempt"]): r["episode"] for r in before}
    assert 1 <= len(finished) < len(plan) == 3

    assert (
        main(["run", "--resume", run_id, "--trajectories", str(runs), "--state-dir", state_dir])
        == 0
    )
    after = stored(runs)
    by_attempt: dict[tuple[str, int], list[str]] = {}
    for r in after:
        by_attempt.setdefault((r["task"], json.loads(r["metadata"])["attempt"]), []).append(
            r["episode"]
        )
    assert set(by_attempt) == set(plan)  # every planned attempt has its row now
    for attempt, episode in finished.items():
        assert by_attempt[attempt] == [episode]  # a model result is never played again
    assert all(len(keys) == 1 for keys in by_attempt.values())  # nor anything twice
    assert {r["run"] for r in after} == {run_id} and all(r["failure_kind"] == "none" for r in after)
    board = metrics.summarize(trajectories.read(runs, "episodes").to_pylist())
    assert [(s.tasks, s.trials, s.resolve_rate) for s in board] == [(3, 3, 1.0)]
    # resuming a finished run plays nothing; an unknown run is said in words
    assert (
        main(["run", "--resume", run_id, "--trajectories", str(runs), "--state-dir", state_dir])
        == 0
    )
    assert len(stored(runs)) == len(after)
    assert main(["run", "--resume", "run-none", "--trajectories", str(runs)]) == 2


def test_grade_resume_grades_only_what_has_no_result(state_dir: str, tmp_path: Path, capsys: Any):
    """`pomona grade --resume RUN`: an instance whose last outcome is a result of its patch is
    not graded again; one with no outcome (killed before it ended) or an environment failure is,
    with the run's own dataset and predictions from its run.json."""
    from pomona.benchmarks.swebench import evaluation as grade
    from pomona.benchmarks.swebench import task_sets as swe_tasks

    a, b = "kjd__idna-1", "jpvanhal__inflection-1"
    common = ["--log-root", str(tmp_path), "--report-dir", str(tmp_path), "--state-dir", state_dir]
    graded = ["grade", "-d", str(swe_tasks.DATA), "-p", "gold", "--run-id", "g", "-i", b, *common]
    assert main(graded) == 0  # b graded for real: its result and logs
    ledger = grade.OutcomeLog(grade.run_dir(tmp_path, "g") / "outcomes.jsonl")
    ledger.append(a, "error", "environment failure")  # as _grade_one records one for a
    capsys.readouterr()
    assert main(["grade", "--resume", "g", "-i", a, b, *common]) == 0
    out = capsys.readouterr().out
    assert f"{b}: cached - graded earlier in run g" in out and "2/2 resolved" in out
    assert [line["item"] for line in map(json.loads, ledger.path.read_text().splitlines())] == [
        b, a, a  # a graded again (its error superseded), b never
    ]  # fmt: skip
    assert ledger.latest() == {a: "resolved", b: "resolved"}
    assert main(["grade", "--resume", "nothing", *common]) == grade.EXIT_NOT_GRADED
    assert "no graded run nothing" in capsys.readouterr().err
