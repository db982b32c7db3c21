"""Grade one QwenClawBench run as its benchmark script does, with its own code from the checkout
(scripts/lib_tasks.py, scripts/lib_grading.py), in a verifier sandbox the agent never touched:
its TaskLoader reads the task file, its grade_task runs the task's `grade()` on the transcript and
the workspace copy, asks the judge (its prompt, its parsing; JUDGE_BASE_URL is the recording
proxy) and combines them (penalized hybrid, score_simple beside it). The GradeResult is printed.

    qwen_grade.py --task-file F --transcript F --workspace D --judge-model M --judge-url URL
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # pomona-python runs with -I

from claw_common import BENCH  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--task-file", type=Path, required=True)
    p.add_argument("--transcript", type=Path, required=True)
    p.add_argument("--workspace", type=Path, required=True)
    p.add_argument("--judge-model", required=True)
    p.add_argument("--judge-url", required=True)
    args = p.parse_args(argv)
    sys.path.insert(0, str(BENCH / "scripts"))
    os.environ["JUDGE_BASE_URL"] = args.judge_url
    os.environ["JUDGE_API_KEY"] = "sk-pomona"
    from lib_grading import grade_task
    from lib_tasks import TaskLoader

    task = TaskLoader(args.task_file.parent).load_task(args.task_file)
    execution = {
        "transcript": json.loads(args.transcript.read_text()),
        "workspace": str(args.workspace),
    }
    with contextlib.redirect_stdout(sys.stderr):  # a task's grade() may print
        grade = grade_task(
            task=task,
            execution_result=execution,
            skill_dir=BENCH,
            judge_model=args.judge_model,
        )
    sys.stdout.write("\n" + json.dumps(grade.to_dict(), ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
