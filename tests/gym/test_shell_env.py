"""ShellEnv: Gymnasium's own checker, gold solutions score 1, wrong ones 0, failures are typed."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import pomona  # noqa: F401  (registers the environments)
from pomona.benchmarks import builtin


@pytest.fixture(scope="module")
def state_dir():
    path = tempfile.mkdtemp(prefix="pomona-gym-")
    yield path
    from pomona.orchestrator.runtimes.local import LocalRuntime
    from pomona.orchestrator.sdk.shared import close_shared

    close_shared(path)
    LocalRuntime(path).unmount_store()


def make(state_dir, **kwargs):
    return gym.make("pomona/ShellEnv-v0", state_dir=state_dir, **kwargs)


def test_check_env_passes(state_dir):
    env = make(state_dir, max_steps=5)
    check_env(env.unwrapped, skip_render_check=True)
    env.close()


@pytest.mark.parametrize("task", builtin.tasks(), ids=lambda t: t.id)
def test_gold_solution_scores_one(state_dir, task):
    env = make(state_dir)
    obs, info = env.reset(options={"task": task.id})
    assert info["task_id"] == task.id and task.instruction[:20] in obs["output"]
    for command in task.solution:
        obs, reward, terminated, truncated, info = env.step(command)
        assert obs["exit_code"] == 0 and not terminated
    obs, reward, terminated, truncated, info = env.step("submit")
    assert (reward, terminated, truncated, info["failure"]) == (1.0, True, False, "none")
    env.close()


def test_wrong_action_scores_zero(state_dir):
    env = make(state_dir)
    env.reset(options={"task": "files/create-hello"})
    env.step("echo goodbye > hello.txt")
    _, reward, terminated, _, info = env.step("submit")
    assert reward == 0.0 and terminated and info["failure"] == "none"
    assert info["score"]["resolved"] is False
    env.close()


def test_step_budget_truncates_and_still_scores(state_dir):
    env = make(state_dir, max_steps=2)
    env.reset(options={"task": "files/create-hello"})
    assert env.step("true")[3] is False
    _, reward, terminated, truncated, info = env.step("echo hello > hello.txt")
    assert truncated and not terminated and reward == 1.0
    env.close()


def test_lost_sandbox_is_an_infra_failure_not_a_zero(state_dir):
    env = make(state_dir)
    env.reset(options={"task": "files/create-hello"})
    env.unwrapped.sandbox.delete()
    _, reward, terminated, _, info = env.step("echo hello > hello.txt")
    assert terminated and info["failure"] == "sandbox" and "no sandbox" in info["error"]
    env.close()


def test_output_is_clipped_and_printable(state_dir):
    env = make(state_dir, output_chars=1000)
    env.reset(options={"task": "files/create-hello"})
    obs, *_, info = env.step("seq 1 100000; printf '\\303\\251'")
    assert len(obs["output"]) <= 1000 and "characters cut" in obs["output"]
    assert env.observation_space.contains(obs)
    assert info["output"].endswith("é")
    env.close()


def test_step_before_reset_is_an_error(state_dir):
    env = make(state_dir)
    with pytest.raises(RuntimeError, match="reset"):
        env.unwrapped.step("ls")


def _used_bytes(store: Path) -> int:
    st = os.statvfs(store)
    return (st.f_blocks - st.f_bfree) * st.f_frsize


def test_five_hundred_resets_leave_the_process_and_the_store_flat(state_dir):
    """Long runs must be flat: a leaked descriptor pins a deleted sandbox's files (and reset
    failed with EMFILE after a few hundred episodes)."""
    env = make(state_dir)
    env.reset(seed=0)
    env.step("echo warm > warm.txt")
    fds = len(os.listdir("/proc/self/fd"))
    used = _used_bytes(Path(state_dir) / "store")
    for i in range(500):
        env.reset(seed=i)
        env.step("head -c 65536 /dev/urandom > filler.bin")  # what a leak would pin: 64 KiB each
    assert len(os.listdir("/proc/self/fd")) <= fds
    # 500 pinned would be >= 32 MiB
    assert _used_bytes(Path(state_dir) / "store") - used < 4 * 2**20
    env.close()
