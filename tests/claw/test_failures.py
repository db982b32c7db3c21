"""What cannot be scored is said, never scored 0: a trusted side that died before grading, a
task grader that crashes, a judge that never answers (Claw-Eval's LLMJudge retries 30 times;
the grading's time limit ends it) are `verifier` failures with the reason, and the official-style
report counts them as the official scripts count a crashed trial."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from typing import Any

import pytest

from pomona.benchmarks.claw import claw_eval, load, runtime, scoring
from pomona.episodes import run_episode
from tests.claw.conftest import solutions, solved, steps

pytestmark = pytest.mark.timeout(900)
TASK = "T086_pinbench_calendar_event_creation"  # one service, one tool call


class HostKilled(claw_eval.ClawEvalTask):
    """The task with its trusted host killed once the agent is done (a crashed service side)."""

    def evaluate(self, sandbox: Any, run: Any = None, proxy: Any = None) -> Any:
        kill = f"kill -9 $(cat {runtime.HOME}/run/host.pid)"
        assert sandbox.exec(kill, user="root", timeout=30).exit_code == 0
        return super().evaluate(sandbox, run, proxy)


def _episode(task: Any, proxy: Any, client: Any) -> Any:
    return run_episode(task, "claw-eval", "oracle", proxy=proxy, client=client, timeout=600)


def test_a_dead_host_is_a_verifier_failure_not_a_zero(need, proxy, client, claw_eval_checkout):
    [base] = solved("claw-eval", [TASK])
    task = HostKilled(**{f.name: getattr(base, f.name) for f in dataclasses.fields(base)})
    record = _episode(task, proxy, client)
    assert (record.failure_kind, record.reward) == ("verifier", None)
    assert "the trusted side could not finish the episode" in record.failure_message


@pytest.fixture
def crashing_checkout(claw_eval_checkout: Path, tmp_path: Path) -> Path:
    """The checkout with TASK's grader raising (its other files as they are)."""
    for part in ("mock_services", "src", "config_general.yaml"):
        (tmp_path / part).symlink_to(claw_eval_checkout / part)
    shutil.copytree(claw_eval_checkout / "tasks" / TASK, tmp_path / "tasks" / TASK)
    grader = tmp_path / "tasks" / TASK / "grader.py"
    grader.write_text(grader.read_text().replace("scores = DimensionScores(safety=1.0)", "1 / 0"))
    return tmp_path


def test_a_grader_that_crashes_is_a_verifier_failure(need, proxy, client, crashing_checkout):
    [base] = load("claw-eval", str(crashing_checkout), only=[TASK])
    task = dataclasses.replace(base, solution=steps(solutions("claw-eval")[TASK]))
    record = _episode(task, proxy, client)
    assert (record.failure_kind, record.reward) == ("verifier", None)
    assert "ZeroDivisionError" in record.failure_message
    rows = [{"task": record.task, "reward": None, "failure_kind": "verifier", "artifacts": []}]
    assert scoring.claw_eval_report(rows)["tasks"][TASK]["scores"] == [0.0, 0.0, 0.0]


def test_a_judge_that_never_answers_is_a_verifier_failure(
    need, proxy, client, claw_eval_checkout, monkeypatch
):
    monkeypatch.setenv("POMONA_JUDGE_MODEL", "no-such-judge")  # the proxy routes no such model
    monkeypatch.setattr(claw_eval, "GRADE_TIMEOUT", 20.0)
    [task] = solved("claw-eval", ["T003zh_calendar_scheduling"])
    assert task.benchmark.endswith("[judge: no-such-judge]")
    record = _episode(task, proxy, client)
    assert (record.failure_kind, record.reward) == ("verifier", None)
    assert "the grader ran past 20 s" in record.failure_message
