"""Terminal-Bench 2.0 tasks in harbor's layout: on every local task the oracle (solve.sh) scores
1.0 and doing nothing scores 0.0; a verifier that writes no reward file is a verifier failure."""

from __future__ import annotations

import shutil
from pathlib import Path

import gymnasium as gym
import pytest

import pomona  # noqa: F401  (registers the environments)
from pomona.benchmarks import terminal_bench as tb
from pomona.benchmarks.task import VerifierError

TASKS = tb.tasks()


def test_local_set_has_harbor_layout() -> None:
    assert len(TASKS) >= 4
    for task in TASKS:
        d = Path(task.metadata["task_dir"])
        for f in ("instruction.md", "task.toml", "environment/Dockerfile", "tests/test.sh",
                  "solution/solve.sh"):
            assert (d / f).is_file(), (task.id, f)
        assert task.environment.image == "host" and task.solution


def play(state_dir: str, task: tb.TbTask, oracle: bool) -> tuple[float, dict]:
    env = gym.make("pomona/ShellEnv-v0", tasks=[task], state_dir=state_dir)
    try:
        env.reset(options={"task": task.id})
        for command in task.solution if oracle else ():
            _, _, _, _, info = env.step(command)
            assert info["exit_code"] == 0, info
        _, reward, _, _, info = env.step("submit")
        return reward, info
    finally:
        env.close()


@pytest.mark.parametrize("task", TASKS, ids=[t.id for t in TASKS])
def test_oracle_scores_one_and_noop_scores_zero(state_dir: str, task: tb.TbTask) -> None:
    reward, info = play(state_dir, task, oracle=True)
    assert (reward, info["failure"]) == (1.0, "none"), info
    assert info["score"]["resolved"]
    reward, info = play(state_dir, task, oracle=False)
    assert (reward, info["failure"]) == (0.0, "none"), info


def test_no_reward_file_is_a_verifier_failure(state_dir: str, tmp_path: Path) -> None:
    src = Path(TASKS[0].metadata["task_dir"])
    shutil.copytree(src, tmp_path / src.name)
    (tmp_path / src.name / "tests" / "test.sh").write_text("#!/bin/bash\necho forgot the reward\n")
    task = tb.load_task(tmp_path / src.name)
    reward, info = play(state_dir, task, oracle=True)
    assert info["failure"] == "verifier" and "RewardFileNotFoundError" in info["error"]


def test_reward_files() -> None:
    assert tb.parse_reward({"reward.txt": " 1\n"}) == {"reward": 1.0}
    assert tb.parse_reward({"reward.json": '{"a": 1, "b": 0.5}', "reward.txt": "0"}) == {
        "a": 1.0, "b": 0.5}
    for bad in ({}, {"reward.json": "[1]"}, {"reward.txt": "nan"}, {"reward.txt": "yes"},
                {"reward.json": '{"a": "b"}'}):
        with pytest.raises(VerifierError):
            tb.parse_reward(bad)
    score = tb.TbScorer(Path(".")).score(TASKS[0], {"files": {"reward.json": '{"a": 1, "b": 0}'},
                                                    "exit_code": 0})
    assert (score.reward, score.resolved) == (0.5, False)


def test_a_task_needing_an_image_build_says_so(tmp_path: Path) -> None:
    d = tmp_path / "t"
    shutil.copytree(TASKS[0].metadata["task_dir"], d)
    toml = (d / "task.toml").read_text().replace('pomona_image = "host"\n', "")
    (d / "task.toml").write_text(toml)
    with pytest.raises(ValueError, match="docker_image"):
        tb.load_task(d)
    (d / "task.toml").write_text(toml.replace("[environment]\n", '[environment]\ndocker_image = "alexgshaw/x:1"\n'))
    task = tb.load_task(d)
    assert task.environment.image == "alexgshaw/x:1" and task.metadata["setup_script"] is None
