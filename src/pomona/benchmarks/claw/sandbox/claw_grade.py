"""Grade one Claw-Eval trial as Claw-Eval's batch runner does, with its own code from the
checkout, in a verifier sandbox the agent never touched: load the trace (its trace reader), load
the task's grader (its registry), grade with the env snapshot and its LLMJudge (pointed at the
recording proxy), compute the task score and the pass (its scoring), and append the
grading_result event to the trace, which is printed.

    claw_grade.py --task-dir D --trace F --snapshot F [--judge-model M --judge-url URL]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # pomona-python runs with -I

from claw_common import BENCH  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--task-dir", type=Path, required=True)
    p.add_argument("--trace", type=Path, required=True)
    p.add_argument("--snapshot", type=Path, required=True)
    p.add_argument("--judge-model")
    p.add_argument("--judge-url")
    args = p.parse_args(argv)
    sys.path.insert(0, str(BENCH / "src"))
    from claw_eval.cli import _append_grading_to_trace, _grade_with_optional_params
    from claw_eval.graders.llm_judge import LLMJudge
    from claw_eval.graders.registry import get_grader
    from claw_eval.models.scoring import compute_task_score, is_pass
    from claw_eval.models.task import TaskDefinition
    from claw_eval.trace.reader import load_trace

    task = TaskDefinition.from_yaml(args.task_dir / "task.yaml")
    judge = None
    if args.judge_url:
        judge = LLMJudge(model_id=args.judge_model, api_key="sk-pomona", base_url=args.judge_url)
    env_snapshot = json.loads(args.snapshot.read_text())
    start, messages, dispatches, media_events, end, audit_data = load_trace(args.trace)
    grader = get_grader(task.task_id, tasks_dir=args.task_dir.parent, task_dir=args.task_dir)
    scores, judge_calls = _grade_with_optional_params(
        grader,
        messages,
        dispatches,
        task,
        audit_data=audit_data,
        judge=judge,
        media_events=media_events,
        env_snapshot=env_snapshot,
    )
    task_score = compute_task_score(scores)
    user_agent_meta = {}
    if end and end.user_agent_rounds > 0:
        user_agent_meta = {
            "rounds_used": end.user_agent_rounds,
            "max_rounds": end.user_agent_max_rounds,
            "done_reached": end.user_agent_done,
        }
    _append_grading_to_trace(
        args.trace,
        trace_id=start.trace_id,
        task_id=task.task_id,
        scores=scores,
        task_score=task_score,
        passed=is_pass(task_score),
        judge_calls=judge_calls,
        user_agent_meta=user_agent_meta,
    )
    last = args.trace.read_text().splitlines()[-1]
    result = {"grading_result": json.loads(last), "scores": scores.model_dump()}
    sys.stdout.write("\n" + json.dumps(result, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
