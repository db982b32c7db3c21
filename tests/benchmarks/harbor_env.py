"""harbor itself, for checking Pomona's Terminal-Bench verdicts and task files against it.

harbor needs Python >= 3.12 and Pomona runs on 3.11, so it lives in its own venv under the
checkout's .cache/ (made here on first use, under a lock, from the newest Python >= 3.12 on the
machine: pyenv's builds on this machine kind), and its verifier is driven through
harbor_bridge.py over a pipe.
"""

from __future__ import annotations

import fcntl
import glob
import io
import json
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
VENV = REPO / ".cache" / "harbor-venv"
HARBOR = "harbor==0.26.0"
BRIDGE = Path(__file__).with_name("harbor_bridge.py")


def _base_python() -> str:
    """The newest Python >= 3.12 that actually runs (pyenv's shims name versions not enabled)."""
    candidates = sorted(glob.glob("/root/.pyenv/versions/3.1[2-9]*/bin/python3"), reverse=True)
    candidates += [p for p in (shutil.which("python3.13"), shutil.which("python3.12")) if p]
    for python in candidates:
        check = "import sys; raise SystemExit(sys.version_info < (3, 12))"
        if subprocess.run([python, "-c", check], capture_output=True).returncode == 0:
            return python
    raise RuntimeError("harbor needs Python >= 3.12 and none is installed on this machine")


def harbor_venv() -> Path:
    """The venv's bin directory, harbor installed in it (once per checkout)."""
    marker = VENV / ".installed"
    if marker.exists() and marker.read_text() == HARBOR:
        return VENV / "bin"
    VENV.parent.mkdir(parents=True, exist_ok=True)
    with open(VENV.parent / "harbor-venv.lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"waiting for another process installing {HARBOR} into {VENV}", file=sys.stderr)
            fcntl.flock(lock, fcntl.LOCK_EX)
        if not (marker.exists() and marker.read_text() == HARBOR):
            shutil.rmtree(VENV, ignore_errors=True)
            subprocess.run([_base_python(), "-m", "venv", str(VENV)], check=True)
            subprocess.run(
                [str(VENV / "bin" / "pip"), "install", "-q", HARBOR],
                check=True,
                stdout=subprocess.DEVNULL,
            )
            marker.write_text(HARBOR)
    return VENV / "bin"


# the rules whose checks load docker-compose.yaml through `docker compose config`: harbor runs
# them on a task with a compose file, and they need Docker Compose v2, which this machine lacks
COMPOSE_LOADING = (
    "invalid-task-config",
    "invalid-task-files",
    "unpinned-image",
    "compose-privileged",
    "compose-additional-capabilities",
    "compose-writable-bind-mount",
    "compose-external-bind-mount",
    "compose-symlink-bind-mount",
)


def lint(task_dirs: list[Path], ignore: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            str(harbor_venv() / "harbor"),
            "lint",
            *(f"--ignore={rule}" for rule in ignore),
            *map(str, task_dirs),
        ],
        capture_output=True,
        text=True,
    )


def load(task_dir: Path) -> subprocess.CompletedProcess:
    """harbor's own Task model on the directory: its config validated and its files checked."""
    code = "import sys; from harbor.models.task.task import Task; Task(sys.argv[1])"
    return subprocess.run(
        [str(harbor_venv() / "python"), "-c", code, str(task_dir)], capture_output=True, text=True
    )


def _tar(directory: Path) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for path in sorted(directory.rglob("*")):
            tar.add(path, arcname=str(path.relative_to(directory)), recursive=False)
    return buf.getvalue()


def _serve(op: dict[str, Any], sandbox: Any) -> dict[str, Any]:
    if op["op"] == "exec":
        user = "root" if op["user"] in (None, "root", 0) else "pomona"
        r = sandbox.exec(
            op["command"], cwd=op["cwd"], env=op["env"], user=user, timeout=op["timeout"] or 600
        )
        return {"exit_code": r.exit_code, "stdout": r.stdout, "stderr": r.stderr}
    if op["op"] == "upload_dir":
        sandbox.upload_dir(op["target"], _tar(Path(op["source"])))
    elif op["op"] == "download_dir":
        target = Path(op["target"])
        target.mkdir(parents=True, exist_ok=True)
        with tarfile.open(fileobj=io.BytesIO(sandbox.download_dir(op["source"]))) as tar:
            tar.extractall(target, filter="data")
    return {}


def verify(jobs: list[tuple[Path, Path, Any, str | None]]) -> list[dict[str, Any]]:
    """harbor's Verifier.verify() on each (task dir, trial dir, sandbox, step name or None): its
    rewards, or the error it raised, per job."""
    proc = subprocess.Popen(
        [str(harbor_venv() / "python"), str(BRIDGE)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin and proc.stdout
    outcomes: list[dict[str, Any]] = [{} for _ in jobs]
    try:
        proc.stdin.write(
            json.dumps(
                {
                    "jobs": [
                        {"task_dir": str(t), "trial_dir": str(d), "step": s} for t, d, _, s in jobs
                    ]
                }
            )
            + "\n"
        )
        proc.stdin.flush()
        for line in proc.stdout:
            op = json.loads(line)
            if op["op"] == "done":
                break
            if op["op"] in ("result", "error"):
                outcomes[op["job"]] = op
                reply: dict[str, Any] = {}
            else:
                reply = _serve(op, jobs[op["job"]][2])
            proc.stdin.write(json.dumps(reply) + "\n")
            proc.stdin.flush()
    finally:
        proc.stdin.close()
        proc.wait(60)
    return outcomes
