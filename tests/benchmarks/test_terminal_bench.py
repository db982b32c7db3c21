"""Terminal-Bench 2.0 tasks in harbor's layout: on every local task the oracle (solve.sh) scores
1.0 and doing nothing scores 0.0; a verifier that writes no reward file is a verifier failure;
verification happens where the agent cannot tamper with it, and agrees with harbor's own
verifier code; harbor lint is clean on every local task."""

from __future__ import annotations

import asyncio
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


def test_local_set_has_harbor_layout() -> None:
    assert len(TASKS) >= 4
    for task in TASKS:
        d = Path(task.metadata["task_dir"])
        for f in ("instruction.md", "task.toml", "environment/Dockerfile", "tests/test.sh",
                  "solution/solve.sh"):
            assert (d / f).is_file(), (task.id, f)
        assert task.environment.image == "host" and task.solution


def play(state_dir: str, task: tb.TbTask, oracle: bool,
         commands: tuple[str, ...] = ()) -> tuple[float, dict]:
    env = gym.make("pomona/ShellEnv-v0", tasks=[task], state_dir=state_dir)
    try:
        env.reset(options={"task": task.id})
        for command in (*(task.solution if oracle else ()), *commands):
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


# --- verification the agent cannot tamper with --------------------------------------------------


def test_harbor_lint_is_clean_on_every_local_task() -> None:
    result = harbor_env.lint([Path(t.metadata["task_dir"]) for t in TASKS])
    assert result.returncode == 0 and "[" not in result.stdout, result.stdout + result.stderr
    assert all(t.scorer.resolved_mode() == "separate" for t in TASKS)


def copy_task(tmp_path: Path, name: str, files: dict[str, str] | None = None) -> Path:
    src = next(Path(t.metadata["task_dir"]) for t in TASKS if t.id.endswith("/" + name))
    dst = tmp_path / name
    shutil.copytree(src, dst)
    for rel, text in (files or {}).items():
        (dst / rel).write_text(text)
    return dst


FAKE_PYTEST = ("d=$(python3 -c 'import os, pytest; print(os.path.dirname(pytest.__file__))') && "
               "echo 'raise SystemExit(0)' > \"$d/__main__.py\"")
SHRUNK_CSV = ("printf 'date,region,product,amount\\n2026-02-01,north,p1,1.00\\n' > sales.csv && "
              "printf 'region,total\\nnorth,1.00\\n' > totals.csv")


@pytest.mark.parametrize(("name", "tamper", "mode", "reward"), [
    ("count-errors", FAKE_PYTEST, "shared", 1.0),  # the hole: the agent's pytest says all passed
    ("count-errors", FAKE_PYTEST, "fork", 0.0),  # a fork: the tests' tools come fresh
    ("csv-totals", SHRUNK_CSV, "fork", 1.0),  # a fork keeps the agent's files, inputs included
    ("csv-totals", SHRUNK_CSV, None, 0.0),  # the task's own separate mode: inputs rebuilt fresh
])
def test_an_agent_tampering_with_what_the_tests_read(state_dir: str, name: str, tamper: str,
                                                     mode: str | None, reward: float) -> None:
    task = next(t for t in TASKS if t.id.endswith("/" + name))
    task = tb.load_task(task.metadata["task_dir"], task.benchmark, verifier_mode=mode)
    got, info = play(state_dir, task, oracle=False, commands=(tamper,))
    assert (got, info["failure"]) == (reward, "none"), info
    assert info["score"]["details"]["verifier_mode"] == (mode or "separate")


def test_results_agree_with_harbors_own_verifier(client: Any, tmp_path: Path) -> None:
    """On every local task, solved and not: harbor's Verifier, run in the verifier sandbox
    Pomona builds from the agent's final state, finds the rewards Pomona's verifier finds."""
    jobs, ours = [], []
    with contextlib.ExitStack() as stack:
        for i, task in enumerate(TASKS):
            for solved in (True, False)[: 2 if i % 2 == 0 else 1]:  # every task solved, half not
                env = task.environment
                agent = stack.enter_context(client.create_sandbox(
                    env.image, workdir=env.workdir, user=env.user, network="none"))
                task.prepare(agent)
                for command in task.solution if solved else ():
                    assert agent.exec(command, timeout=300).exit_code == 0
                ours.append(task.evaluate(agent).details["rewards"])
                target = stack.enter_context(task.scorer._verifier_sandbox(
                    task, agent, client, task.scorer.resolved_mode()))
                jobs.append((Path(task.metadata["task_dir"]), tmp_path / f"trial{len(jobs)}", target))
        theirs = harbor_env.verify(jobs)
    assert [t.get("rewards", t.get("error")) for t in theirs] == ours
    assert sorted(r["reward"] for r in ours) == [0.0] * (len(TASKS) // 2) + [1.0] * len(TASKS)


def test_task_toml_schema(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    d = copy_task(tmp_path, "count-errors")
    text = (d / "task.toml").read_text()
    cfg = tb.read_config(d)
    assert (cfg.mode, cfg.agent_timeout, cfg.verifier_timeout, cfg.verifier_network) == (
        "separate", 600.0, 300.0, "none")
    assert [a.source for a in cfg.artifacts] == ["/app/report.json"]
    shared = text.replace('environment_mode = "separate"', 'environment_mode = "shared"')
    (d / "task.toml").write_text(shared)
    assert tb.read_config(d).mode == "fork"  # Pomona never verifies in the agent's own sandbox
    (d / "task.toml").write_text(shared.replace("[verifier]\n", '[verifier]\nuser = "agent"\n'
                                                "env = { TOKEN = \"${POMONA_TEST_TOKEN:-none}\" }\n")
                                 + '\n[[verifier.collect]]\ncommand = "echo collected"\n')
    cfg = tb.read_config(d)
    assert (cfg.verifier_user, cfg.collect[0].command) == ("pomona", "echo collected")
    monkeypatch.setenv("POMONA_TEST_TOKEN", "t0k")
    assert tb.resolve_env(cfg.verifier_env) == {"TOKEN": "t0k"}
    for bad, message in ((text + '\n[[steps]]\nname = "one"\n', "multi-step"),
                         (text.replace('artifacts = ["/app/report.json"]',
                                       'artifacts = [{ source = "/x", service = "db" }]'), "sidecar"),
                         ("not [ toml", "not valid TOML")):
        (d / "task.toml").write_text(bad)
        with pytest.raises(ValueError, match=message):
            tb.read_config(d)


def test_the_tasks_own_agent_timeout_is_applied(state_dir: str, tmp_path: Path) -> None:
    from pomona.gym.rollout import rollout
    from pomona.harnesses import payload

    if missing := payload.ensure(["pi"]):
        pytest.fail(f"harness payload unavailable: {missing}")
    d = copy_task(tmp_path, "nested-archive", {"solution/solve.sh": "#!/bin/bash\nsleep 300\n"})
    toml = (d / "task.toml").read_text().replace("[agent]\ntimeout_sec = 600.0", "[agent]\ntimeout_sec = 5.0")
    (d / "task.toml").write_text(toml)
    task = tb.load_task(d)
    assert task.agent_timeout(600) == 5.0
    (record,) = asyncio.run(rollout([task], "pi", "oracle", state_dir=state_dir, timeout=600,
                                    progress=False))
    assert record.failure_kind == "timeout", record.failure_message
