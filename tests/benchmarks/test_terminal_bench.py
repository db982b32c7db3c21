"""Terminal-Bench 2.0 tasks in harbor's layout: on every local task the oracle (solve.sh) scores
1.0 and doing nothing scores 0.0; a verifier that writes no reward file is a verifier failure;
verification happens where the agent cannot tamper with it, and agrees with harbor's own
verifier code; harbor lint is clean on every local task. Multi-step tasks, MCP servers and
per-phase network policies run for real (tests/benchmarks/test_terminal_bench_features.py)."""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

import pomona  # noqa: F401  (registers the environments)
from pomona.benchmarks import terminal_bench as tb
from pomona.benchmarks.task import VerifierError
from tests.benchmarks import harbor_env

TASKS = tb.tasks()
EXTRAS = tb.DATA / "extras"


def test_local_set_has_harbor_layout() -> None:
    assert len(TASKS) >= 5 and any(t.metadata["steps"] for t in TASKS)
    for task in TASKS:
        d = Path(task.metadata["task_dir"])
        for f in ("task.toml", "environment/Dockerfile"):
            assert (d / f).is_file(), (task.id, f)
        for step in task.metadata["steps"] or [None]:
            base = d / "steps" / step if step else d
            for f in ("instruction.md", "tests/test.sh", "solution/solve.sh"):
                assert (base / f).is_file(), (task.id, step, f)
        assert task.environment.image == "host" and task.solution


def play(
    state_dir: str,
    task: tb.TbTask,
    oracle: bool,
    commands: tuple[str, ...] = (),
    steps: int | None = None,
) -> tuple[float, dict]:
    """A ShellEnv episode: the oracle's (or the given) commands, then "submit", once per step
    (for the first `steps` steps: the rest get no commands)."""
    env = gym.make("pomona/ShellEnv-v0", tasks=[task], state_dir=state_dir)
    try:
        env.reset(options={"task": task.id})
        turn, done = 0, False
        while not done:
            act = steps is None or turn < steps
            for command in (*(task.solution if oracle and act else ()), *(commands if act else ())):
                _, _, _, _, info = env.step(command)
                assert info["exit_code"] == 0, info
            _, reward, done, _, info = env.step("submit")
            turn += 1
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
    if task.metadata["steps"]:  # the first step's gate stops the rest
        assert info["score"]["details"]["stopped_after"] == task.metadata["steps"][0]


def test_no_reward_file_is_a_verifier_failure(state_dir: str, tmp_path: Path) -> None:
    d = copy_task(
        tmp_path, "count-errors", {"tests/test.sh": "#!/bin/bash\necho forgot the reward\n"}
    )
    reward, info = play(state_dir, tb.load_task(d), oracle=True)
    assert info["failure"] == "verifier" and "RewardFileNotFoundError" in info["error"]


def test_reward_files() -> None:
    assert tb.parse_reward({"reward.txt": " 1\n"}) == {"reward": 1.0}
    assert tb.parse_reward({"reward.json": '{"a": 1, "b": 0.5}', "reward.txt": "0"}) == {
        "a": 1.0,
        "b": 0.5,
    }
    for bad in (
        {},
        {"reward.json": "[1]"},
        {"reward.txt": "nan"},
        {"reward.txt": "yes"},
        {"reward.json": '{"a": "b"}'},
    ):
        with pytest.raises(VerifierError):
            tb.parse_reward(bad)
    score = tb.TbScorer(Path(".")).score(
        TASKS[0], {"files": {"reward.json": '{"a": 1, "b": 0}'}, "exit_code": 0}
    )
    assert (score.reward, score.resolved) == (0.5, False)


def test_multi_step_rewards_combine_as_harbors() -> None:
    steps = [{"reward": 1.0, "style": 0.5}, {"reward": 0.0}]
    assert tb.combine(steps, "mean") == {"reward": 0.5, "style": 0.25}
    assert tb.combine(steps, "final") == {"reward": 0.0}
    assert tb.combine([{}, {}], "mean") == {"reward": 0.0}  # steps never reached count 0


def test_a_task_needing_an_image_build_says_so(tmp_path: Path) -> None:
    d = tmp_path / "t"
    shutil.copytree(TASKS[0].metadata["task_dir"], d)
    toml = (d / "task.toml").read_text().replace('pomona_image = "host"\n', "")
    (d / "task.toml").write_text(toml)
    with pytest.raises(ValueError, match="docker_image"):
        tb.load_task(d)
    (d / "task.toml").write_text(
        toml.replace("[environment]\n", '[environment]\ndocker_image = "alexgshaw/x:1"\n')
    )
    task = tb.load_task(d)
    assert task.environment.image == "alexgshaw/x:1" and task.metadata["setup_script"] is None


# --- verification the agent cannot tamper with --------------------------------------------------


def test_harbor_lint_is_clean_on_every_local_task() -> None:
    dirs = [Path(t.metadata["task_dir"]) for t in TASKS] + sorted(
        p.parent for p in EXTRAS.glob("*/task.toml")
    )
    plain = [d for d in dirs if not (d / "environment" / "docker-compose.yaml").exists()]
    result = harbor_env.lint(plain)
    assert result.returncode == 0 and "[" not in result.stdout, result.stdout + result.stderr
    assert all(t.scorer.resolved_mode() == "separate" for t in TASKS)
    # a task with sidecars: every rule but those needing Docker Compose v2, and harbor's own
    # model of the task (what the config and file rules check) loads it
    composed = [d for d in dirs if d not in plain]
    assert composed
    result = harbor_env.lint(composed, ignore=harbor_env.COMPOSE_LOADING)
    assert result.returncode == 0 and "[" not in result.stdout, result.stdout + result.stderr
    for d in composed:
        assert harbor_env.load(d).returncode == 0, harbor_env.load(d).stderr


def copy_task(
    tmp_path: Path, name: str, files: dict[str, str] | None = None, root: Path = tb.DATA
) -> Path:
    dst = tmp_path / name
    shutil.copytree(root / name, dst)
    for rel, text in (files or {}).items():
        (dst / rel).write_text(text)
    return dst


FAKE_PYTEST = (
    "d=$(python3 -c 'import os, pytest; print(os.path.dirname(pytest.__file__))') && "
    "echo 'raise SystemExit(0)' > \"$d/__main__.py\""
)
SHRUNK_CSV = (
    "printf 'date,region,product,amount\\n2026-02-01,north,p1,1.00\\n' > sales.csv && "
    "printf 'region,total\\nnorth,1.00\\n' > totals.csv"
)


@pytest.mark.parametrize(
    ("name", "tamper", "mode", "reward"),
    [
        ("count-errors", FAKE_PYTEST, "shared", 1.0),  # the hole: the agent's pytest says passed
        ("count-errors", FAKE_PYTEST, None, 0.0),  # a fresh verifier: the tests' tools are its own
        ("csv-totals", SHRUNK_CSV, None, 0.0),  # inputs rebuilt fresh, only the output copied
    ],
)
def test_an_agent_tampering_with_what_the_tests_read(
    state_dir: str, name: str, tamper: str, mode: str | None, reward: float
) -> None:
    task = next(t for t in TASKS if t.id.endswith("/" + name))
    task = tb.load_task(task.metadata["task_dir"], task.benchmark, verifier_mode=mode)
    got, info = play(state_dir, task, oracle=False, commands=(tamper,))
    assert (got, info["failure"]) == (reward, "none"), info
    assert info["score"]["details"]["verifier_mode"] == (mode or "separate")


def test_results_agree_with_harbors_own_verifier(client: Any, tmp_path: Path) -> None:
    """On every local task, solved and not, on every step of a multi-step one, and on tasks
    with an MCP server and a sidecar service (whose state reaches the verifier through a collect
    hook and an artifact): harbor's Verifier, run in the verifier sandbox Pomona builds from the
    agent's state, finds the rewards Pomona's verifier finds."""
    jobs, ours = [], []
    every = TASKS + [tb.load_task(EXTRAS / name) for name in ("mcp-release", "ticket-triage")]
    with contextlib.ExitStack() as stack:
        for i, task in enumerate(every):
            steps = task.steps or (None,)
            for solved in (True, False)[: 2 if i % 2 == 0 else 1]:  # every task solved, half not
                env = task.environment
                agent = stack.enter_context(
                    client.create_sandbox(
                        env.image, workdir=env.workdir, user=env.user, network="none"
                    )
                )
                task.prepare(agent)
                for k, step in enumerate(steps):
                    if k:  # the agent goes on to the next step only when the last one passed
                        assert task.next_turn(agent) is not None
                    for command in task.solution if solved else ():
                        assert agent.exec(command, timeout=300).exit_code == 0
                    ours.append(
                        tb.parse_reward(task.scorer.verify_phase(task, agent, step)["files"])
                    )
                    target = stack.enter_context(
                        task.scorer.verifier_sandbox(
                            task, agent, client, task.scorer.resolved_mode(step), step
                        )
                    )
                    jobs.append(
                        (
                            Path(task.metadata["task_dir"]),
                            tmp_path / f"trial{len(jobs)}",
                            target,
                            step.name if step else None,
                        )
                    )
                    if not solved:
                        break
        theirs = harbor_env.verify(jobs)
    assert [t.get("rewards", t.get("error")) for t in theirs] == ours
    assert any(step for *_, step in jobs)
    unsolved = (len(every) + 1) // 2
    assert sorted(r["reward"] for r in ours) == [0.0] * unsolved + [1.0] * (len(ours) - unsolved)
