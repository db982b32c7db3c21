"""Root's end of a Claw-Eval episode, once the agent is done: in the order Claw-Eval's runner
does it, with its own functions through the root-only gateway, the evidence (the host's dispatch
record, the simulated user's turns, the native loop's traces, each service's audit fetched as its
loop fetches them), then the grader-only files (SandboxRunner.inject_grader_files), then the env
snapshot (its CLI's collector: commands first, then files). The host runs these (it has Claw-Eval
imported already); Pomona asks from outside (`exec` as root), and the answer is printed:

    claw_ctl.py finish

`inject` (SandboxRunner.inject_files, then the files given to the agent's user) is the host's
first step, before the agent starts.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # pomona-python runs with -I

from claw_common import CONTROL_SOCKET, SNAPSHOT_PORT, request  # noqa: E402

SANDBOX_URL = f"http://127.0.0.1:{SNAPSHOT_PORT}"


def _task(task_dir: Path) -> Any:
    from claw_eval.models.task import TaskDefinition

    return TaskDefinition.from_yaml(task_dir / "task.yaml")


def inject(task_dir: Path, which: str) -> dict[str, Any]:
    """The task's files into /workspace as Claw-Eval places them; the agent's files are then
    made the agent's (it works as the owner of /workspace, not as root)."""
    from claw_eval.runner.sandbox_runner import SandboxRunner

    task = _task(task_dir)
    handle = SimpleNamespace(sandbox_url=SANDBOX_URL)
    if which == "sandbox":
        count = SandboxRunner.inject_files(handle, task, task_dir=str(task_dir))
        expected = len(task.sandbox_files or task.environment.fixtures)
        owner = os.stat("/workspace")
        subprocess.run(["chown", "-R", f"{owner.st_uid}:{owner.st_gid}", "/workspace"], check=False)
    else:
        count = SandboxRunner.inject_grader_files(handle, task, task_dir=str(task_dir))
        expected = len(task.sandbox_grader_files)
    return {"injected": count, "expected": expected}


def snapshot(task_dir: Path) -> dict[str, Any]:
    from claw_eval.cli import _collect_env_snapshot

    return _collect_env_snapshot(SANDBOX_URL, _task(task_dir))


def finish(task_dir: Path, evidence: dict[str, Any]) -> dict[str, Any]:
    """The host's record completed with the audits, the grader files and the env snapshot."""
    import httpx

    audits: dict[str, Any] = {}
    for svc in _task(task_dir).services:
        if svc.reset_endpoint:  # as Claw-Eval's loop finds each audit
            url = svc.reset_endpoint.rsplit("/reset", 1)[0] + "/audit"
            try:
                audits[svc.name] = {"url": url, "data": httpx.get(url, timeout=5).json()}
            except Exception as e:  # noqa: BLE001 - the loop skips it; we say why
                audits[svc.name] = {"url": url, "error": f"{type(e).__name__}: {e}"}
    evidence["audits"] = audits
    evidence["loop_traces"] = {p: Path(p).read_text() for p in evidence["loop_traces"]}
    with contextlib.redirect_stdout(sys.stderr):  # Claw-Eval's functions print as they go
        evidence["grader_files"] = inject(task_dir, "grader")
        evidence["env_snapshot"] = snapshot(task_dir)
    return evidence


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("what", choices=["finish"])
    args = p.parse_args(argv)
    out = request(CONTROL_SOCKET, {"op": args.what}, timeout=900)
    sys.stdout.write("\n" + json.dumps(out, ensure_ascii=False) + "\n")
    return 0 if "error" not in out else 1


if __name__ == "__main__":
    sys.exit(main())
