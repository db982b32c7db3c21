"""Terminal-Bench 2.0 tasks in harbor's layout, verified by harbor's reward contract.

    <task>/instruction.md        the agent's input, verbatim
    <task>/task.toml             config: [agent] / [verifier] timeouts, [environment] docker_image...
    <task>/environment/          Dockerfile (harbor builds it), setup.sh (Pomona's offline tasks)
    <task>/tests/test.sh         the verifier, uploaded to /tests only after the agent has run
    <task>/solution/solve.sh     the oracle

After the agent, the verifier deletes stale reward files, uploads tests/ to /tests, runs
/tests/test.sh with its output in /logs/verifier/test-stdout.txt and reads
/logs/verifier/reward.json (a flat {name: number} map) or reward.txt (one float). Neither file
means the trial errored: a `verifier` failure, excluded from scores rather than counted as 0.

Where a task names `docker_image`, it runs there (docker runtime). Pomona's local tasks instead
set `[metadata] pomona_image = "host"`: they run on the host image, `environment/setup.sh`
builds their state in the workdir (the Dockerfile runs the same script, so harbor agrees) and
pytest is installed from Pomona's own environment, so everything works offline.
"""

from __future__ import annotations

import base64
import io
import json
import math
import tarfile
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pomona.benchmarks.pytools import install_pytest
from pomona.benchmarks.task import Environment, Score, Task, VerifierError

DATA = Path(__file__).parent / "data" / "terminal_bench"
LOGS = "/logs/verifier"
DEFAULT_WORKDIR = "/app"


def parse_reward(files: dict[str, str]) -> dict[str, float]:
    """harbor's reward files: reward.json wins over reward.txt; a missing or malformed one is
    the verifier's failure."""
    try:
        if "reward.json" in files:
            data = json.loads(files["reward.json"])
            if not isinstance(data, dict) or not data:
                raise VerifierError("reward.json is not a flat {name: number} map")
            rewards = {str(k): float(v) for k, v in data.items()}
        elif "reward.txt" in files:
            rewards = {"reward": float(files["reward.txt"].strip())}
        else:
            raise VerifierError("RewardFileNotFoundError: the verifier wrote no reward.json or "
                                "reward.txt")
    except (ValueError, TypeError) as e:
        raise VerifierError(f"unreadable reward file: {e}") from e
    if not all(math.isfinite(v) for v in rewards.values()):
        raise VerifierError(f"reward is not finite: {rewards}")
    return rewards


def _tar(directory: Path) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for path in sorted(directory.rglob("*")):
            tar.add(path, arcname=str(path.relative_to(directory)), recursive=False)
    return buf.getvalue()


def _read(sandbox: Any, path: str) -> str | None:
    try:
        return sandbox.read_file(path).decode("utf-8", "replace")
    except Exception:  # noqa: BLE001 - a missing file is an answer here, not an error
        return None


@dataclass(frozen=True)
class TbScorer:
    """harbor's verifier: upload tests/, run test.sh, read the reward file."""

    task_dir: Path
    timeout: float = 900

    def collect(self, task: Task, sandbox: Any) -> dict[str, Any]:
        prep = sandbox.exec(f"rm -rf /tests {LOGS} && mkdir -p /tests {LOGS} && "
                            f"chmod 777 {LOGS}", user="root", timeout=60)
        if prep.exit_code != 0:
            raise VerifierError(f"could not prepare /tests: {prep.stderr.strip()}")
        sandbox.upload_dir("/tests", _tar(self.task_dir / "tests"))
        result = sandbox.exec(f"bash /tests/test.sh > {LOGS}/test-stdout.txt 2>&1",
                              cwd=task.environment.workdir, user="root", timeout=self.timeout)
        files = {name: text for name in ("reward.json", "reward.txt", "test-stdout.txt")
                 if (text := _read(sandbox, f"{LOGS}/{name}")) is not None}
        return {"files": files, "exit_code": result.exit_code, "timed_out": result.timed_out}

    def score(self, task: Task, artifacts: dict[str, Any]) -> Score:
        rewards = parse_reward(artifacts["files"])
        reward = rewards.get("reward", sum(rewards.values()) / len(rewards))
        return Score(reward=reward, resolved=reward == 1.0, details={
            "rewards": rewards, "test_stdout": artifacts["files"].get("test-stdout.txt", "")[-4000:],
            "test_exit_code": artifacts["exit_code"]})


@dataclass(frozen=True)
class TbTask(Task):
    """A harbor task; with a setup script, prepare() builds its state offline."""

    def prepare(self, sandbox: Any) -> None:
        setup = self.metadata.get("setup_script")
        if setup is None:
            return
        sandbox.write_file("/tmp/pomona-setup.sh", setup)
        result = sandbox.exec("bash /tmp/pomona-setup.sh && rm -f /tmp/pomona-setup.sh",
                              cwd=self.environment.workdir, timeout=600)
        if result.exit_code != 0:
            raise RuntimeError(f"task {self.id}: environment setup failed: {result.stderr.strip()}")
        install_pytest(sandbox)


def solve_commands(solve_sh: str) -> list[str]:
    """The oracle's script: solve.sh written to /tmp/solution and run, as one shell command."""
    data = base64.b64encode(solve_sh.encode()).decode()
    return ["mkdir -p /tmp/solution && echo " + data + " | base64 -d > /tmp/solution/solve.sh && "
            "bash /tmp/solution/solve.sh"]


def load_task(task_dir: str | Path, benchmark: str = "terminal-bench") -> TbTask:
    task_dir = Path(task_dir)
    config = tomllib.loads((task_dir / "task.toml").read_text())
    meta, env = config.get("metadata", {}), config.get("environment", {})
    image = meta.get("pomona_image") or env.get("docker_image")
    if not image:
        raise ValueError(f"{task_dir}: no prebuilt image; Pomona does not build Dockerfiles: set "
                         "[environment] docker_image (or [metadata] pomona_image)")
    setup = task_dir / "environment" / "setup.sh"
    solve = task_dir / "solution" / "solve.sh"
    name = config.get("task", {}).get("name") or f"{benchmark}/{task_dir.name}"
    return TbTask(
        id=name, benchmark=benchmark,
        instruction=(task_dir / "instruction.md").read_text(),
        scorer=TbScorer(task_dir, float(config.get("verifier", {}).get("timeout_sec", 900))),
        environment=Environment(image=image, workdir=meta.get("pomona_workdir", DEFAULT_WORKDIR)),
        solution=tuple(solve_commands(solve.read_text())) if solve.is_file() else None,
        metadata={"task_dir": str(task_dir), "config": config,
                  "agent_timeout": float(config.get("agent", {}).get("timeout_sec", 900)),
                  "setup_script": setup.read_text() if setup.is_file() and image == "host" else None})


def tasks(root: str | Path = DATA, benchmark: str = "terminal-bench") -> list[TbTask]:
    """Every task directory (one holding task.toml) under `root`, by name."""
    dirs = sorted(p.parent for p in Path(root).glob("*/task.toml"))
    if not dirs:
        raise FileNotFoundError(f"no harbor tasks (*/task.toml) under {root}")
    return [load_task(d, benchmark) for d in dirs]

