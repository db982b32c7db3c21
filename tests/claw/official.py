"""The benchmarks' own code, run directly from their checkouts the way their users run it (a
Python process with the checkout on its path, no Pomona, no sandbox), on evidence Pomona saved:
what the score-agreement tests compare Pomona's recorded scores with.

    python official.py claw-eval CHECKOUT < jobs.json     # [{task_dir, trace, snapshot, judge_url}]
    python official.py qwenclawbench CHECKOUT < jobs.json # [{task_file, transcript, workspace, judge_url}]

Each job's answer is one JSON line: the official task score and dimensions, or the GradeResult.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any


def claw_eval(checkout: Path, job: dict[str, Any]) -> dict[str, Any]:
    """Claw-Eval's batch-runner grading of one saved trial (cli._run_single_task's steps)."""
    from claw_eval.cli import _grade_with_optional_params
    from claw_eval.graders.llm_judge import LLMJudge
    from claw_eval.graders.registry import get_grader
    from claw_eval.models.scoring import compute_task_score, is_pass
    from claw_eval.models.task import TaskDefinition
    from claw_eval.trace.reader import load_trace

    task_dir = Path(job["task_dir"])
    task = TaskDefinition.from_yaml(task_dir / "task.yaml")
    judge = LLMJudge(model_id="scripted", api_key="sk-test", base_url=job["judge_url"])
    _, messages, dispatches, media, _, audit = load_trace(job["trace"])
    grader = get_grader(task.task_id, tasks_dir=checkout / "tasks", task_dir=task_dir)
    scores, _ = _grade_with_optional_params(
        grader,
        messages,
        dispatches,
        task,
        audit_data=audit,
        judge=judge,
        media_events=media,
        env_snapshot=json.loads(Path(job["snapshot"]).read_text()),
    )
    score = compute_task_score(scores)
    return {"task_score": score, "passed": is_pass(score), "scores": scores.model_dump()}


def qwenclawbench(checkout: Path, job: dict[str, Any]) -> dict[str, Any]:
    """QwenClawBench's grade_task on one saved run (its benchmark.py's grading step)."""
    from lib_grading import grade_task
    from lib_tasks import TaskLoader

    os.environ["JUDGE_BASE_URL"], os.environ["JUDGE_API_KEY"] = job["judge_url"], "sk-test"
    task_file = Path(job["task_file"])
    task = TaskLoader(task_file.parent).load_task(task_file)
    transcript = json.loads(Path(job["transcript"]).read_text())
    result = {"transcript": transcript, "workspace": job["workspace"]}
    grade = grade_task(
        task=task, execution_result=result, skill_dir=checkout, judge_model="scripted"
    )
    return dict(grade.to_dict())


def run(kind: str, checkout: Path, jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Grade the jobs in one process of the test's Python with the checkout on its path."""
    path = checkout / ("src" if kind == "claw-eval" else "scripts")
    done = subprocess.run(
        [sys.executable, __file__, kind, str(checkout)],
        input=json.dumps(jobs),
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "PYTHONPATH": str(path)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def main() -> None:
    kind, checkout = sys.argv[1], Path(sys.argv[2])
    grade = claw_eval if kind == "claw-eval" else qwenclawbench
    out = []
    for job in json.load(sys.stdin):
        with contextlib.redirect_stdout(sys.stderr):  # graders print as they go
            out.append(grade(checkout, job))
    for answer in out:
        print(json.dumps(answer, ensure_ascii=False))


if __name__ == "__main__":
    main()
