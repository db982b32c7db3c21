"""Run harbor's own Verifier (the `harbor` package, in its Python >= 3.12 venv) against Pomona
sandboxes, for comparing its verdicts with Pomona's.

This file runs under harbor's interpreter, not Pomona's: it imports harbor only. Its environment
is a bridge: every exec, upload and download harbor's Verifier asks for is sent as one JSON line
on stdout to the parent (the test, which holds the sandbox) and answered on stdin. The parent
first sends {"jobs": [{"task_dir": ..., "trial_dir": ..., "step": name or null}, ...]} (a step
of a multi-step task is verified with that step's tests); each job ends with
{"op": "result", "job": i, "rewards": {...}} or {"op": "error", "job": i, "error": "..."}.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from harbor.environments.base import BaseEnvironment, ExecResult
from harbor.models.task.config import TaskOS
from harbor.models.task.task import Task
from harbor.models.trial.paths import EnvironmentPaths, TrialPaths
from harbor.verifier.verifier import Verifier


def ask(message: dict) -> dict:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()
    return json.loads(sys.stdin.readline())


class BridgeEnvironment:
    """What harbor's Verifier uses of an environment, served by the parent's sandbox."""

    os = TaskOS.LINUX

    def __init__(self, job: int):
        self.job = job

    def is_path_mounted(self, *_: object) -> bool:
        return False  # files come back by download, as from a remote sandbox

    async def exec(
        self,
        command: str,
        cwd: str | None = None,
        env: dict | None = None,
        timeout_sec: int | None = None,
        user: str | int | None = None,
    ) -> ExecResult:
        reply = ask(
            {
                "op": "exec",
                "job": self.job,
                "command": command,
                "cwd": cwd,
                "env": env or {},
                "timeout": timeout_sec,
                "user": user,
            }
        )
        return ExecResult(
            stdout=reply["stdout"], stderr=reply["stderr"], return_code=reply["exit_code"]
        )

    async def upload_dir(self, source_dir: Path | str, target_dir: str) -> None:
        ask({"op": "upload_dir", "job": self.job, "source": str(source_dir), "target": target_dir})

    async def download_dir(self, source_dir: str, target_dir: Path | str) -> None:
        ask(
            {"op": "download_dir", "job": self.job, "source": source_dir, "target": str(target_dir)}
        )


async def verify(job: int, task_dir: str, trial_dir: str, step: str | None) -> dict:
    paths = TrialPaths(Path(trial_dir))
    paths.verifier_dir.mkdir(parents=True, exist_ok=True)
    env = BridgeEnvironment(job)
    # what harbor's trial does to a separate verifier environment first: an empty verifier dir
    empty = BaseEnvironment._empty_dirs_command(env, [EnvironmentPaths.verifier_dir], chmod=True)
    await env.exec(empty, user="root")
    verifier = Verifier(task=Task(task_dir), trial_paths=paths, environment=env, step_name=step)
    try:
        result = await verifier.verify()
    except Exception as e:  # noqa: BLE001 - harbor's own failure is the answer
        return {"op": "error", "job": job, "error": f"{type(e).__name__}: {e}"}
    return {"op": "result", "job": job, "rewards": result.rewards}


def main() -> None:
    jobs = json.loads(sys.stdin.readline())["jobs"]
    for i, job in enumerate(jobs):
        ask(asyncio.run(verify(i, job["task_dir"], job["trial_dir"], job.get("step"))))
    sys.stdout.write(json.dumps({"op": "done"}) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
