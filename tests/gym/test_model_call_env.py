"""ModelCallEnv over real harnesses: a policy written here drives pi and Claude Code call by
call to reward 1 (and a wrong one to 0), and every way an episode can go wrong is typed."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import pomona  # noqa: F401  (registers the environments)
from pomona import trajectories
from pomona.benchmarks import builtin
from tests.gym.conftest import solve_with

TASK = "files/create-hello"


def make(gym_state, runs, **kwargs):
    """Through gym.make with plain kwargs (the spec is deep-copied by gymnasium): the env uses
    the process's shared proxy recording to `runs`."""
    return gym.make("pomona/ModelCallEnv-v0", state_dir=gym_state, trajectories=str(runs), **kwargs)


def drive(env, policy, task: str, limit: int = 10):
    obs, info = env.reset(options={"task": task})
    assert env.observation_space.contains(obs)
    for _ in range(limit):
        obs, reward, terminated, truncated, info = env.step(policy(obs))
        assert env.observation_space.contains(obs)
        if terminated or truncated:
            return reward, terminated, truncated, info
    raise AssertionError("the episode did not end")


def episode_row(runs, key):
    rows = [r for r in trajectories.read(runs, "episodes").to_pylist() if r["episode"] == key]
    assert len(rows) == 1
    return rows[0]


def test_check_env_passes(gym_state, runs):
    env = make(gym_state, runs, harness="pi", task_set="files", max_steps=3)
    check_env(env.unwrapped, skip_render_check=True)
    env.close()


@pytest.mark.parametrize(
    "harness,dialect",
    [("pi", "chat"), ("pi", "responses"), ("claude-code", "anthropic")],
    ids=["pi-chat", "pi-responses", "claude-code-anthropic"],
)
def test_policy_solves_the_task_through_the_real_harness(gym_state, runs, harness, dialect):
    env = make(gym_state, runs, harness=harness, dialect=dialect)
    task = builtin.get("text/replace")
    reward, terminated, truncated, info = drive(env, solve_with(list(task.solution)), task.id)
    assert (reward, terminated, truncated, info["failure"]) == (1.0, True, False, "none")
    assert info["steps"] == 2  # one tool call, one final message
    row = episode_row(runs, info["episode"])
    assert (row["reward"], row["failure_kind"], row["harness"], row["task"]) == (
        1.0,
        "none",
        harness,
        task.id,
    )
    calls = [
        c for c in trajectories.read(runs, "calls").to_pylist() if c["episode"] == info["episode"]
    ]
    main = [c for c in calls if not c["side"]]
    assert [c["upstream"] for c in main] == ["policy", "policy"]
    assert {c["dialect"] for c in calls} == {dialect}
    env.close()


@pytest.mark.parametrize("harness", ["pi", "claude-code"])
def test_wrong_action_scores_zero(gym_state, runs, harness):
    env = make(gym_state, runs, harness=harness)
    reward, terminated, _, info = drive(env, solve_with(["echo goodbye > hello.txt"]), TASK)
    assert (reward, terminated, info["failure"]) == (0.0, True, "none")
    assert info["score"]["resolved"] is False
    env.close()


def test_observation_is_the_held_request(gym_state, runs):
    env = make(gym_state, runs, harness="pi", dialect="anthropic")
    obs, info = env.reset(options={"task": TASK})
    messages = json.loads(obs["messages"])
    assert obs["dialect"] == "anthropic" and info["messages"] == messages
    assert messages[-1]["role"] == "user" and "hello.txt" in messages[-1]["content"]
    assert "bash" in [t["name"] for t in json.loads(obs["tools"])]
    obs, reward, terminated, _, info = env.step("I will not do that.")  # plain text: the turn ends
    assert terminated and reward == 0.0 and json.loads(obs["messages"]) == []
    # stepping past the end repeats the end instead of failing
    assert env.step("again")[2] is True
    env.close()


def test_step_budget_stops_the_harness_and_scores(gym_state, runs):
    env = make(gym_state, runs, harness="pi", max_steps=1)
    env.reset(options={"task": TASK})
    _, reward, terminated, truncated, info = env.step(
        solve_with(["echo hello > hello.txt"])(env.unwrapped._obs(env.unwrapped._call))
    )
    assert (reward, terminated, truncated, info["failure"]) == (1.0, False, True, "none")
    env.close()


def test_policy_that_never_answers_is_a_timeout(gym_state, runs):
    env = make(gym_state, runs, harness="pi", policy_timeout=1)
    env.reset(options={"task": TASK})
    policy = env.unwrapped._policy
    while not policy.expired:  # the proxy gives up on the held call; pi gets a 504
        env.unwrapped._run.thread.join(0.1)
    _, reward, terminated, _, info = env.step("done")
    assert (reward, terminated, info["failure"]) == (0.0, True, "timeout")
    row = episode_row(runs, info["episode"])
    assert row["failure_kind"] == "timeout" and row["reward"] is None
    first = next(
        c
        for c in trajectories.read(runs, "calls").to_pylist()
        if c["episode"] == info["episode"] and c["sequence"] == 0 and not c["side"]
    )
    assert (first["status"], first["status_code"], first["upstream"]) == (
        "upstream_error",
        504,
        "policy",
    )
    env.close()


def test_harness_that_exits_between_calls_is_typed(gym_state, runs):
    env = make(gym_state, runs, harness="pi")
    env.reset(options={"task": TASK})
    kill = (
        "for p in /proc/[0-9]*; do grep -qzE '^POMONA_RUN=' $p/environ && kill -9 ${p#/proc/}; done"
    )
    with env.unwrapped.sandbox.pty(["sh", "-c", kill]) as term:  # the harness dies mid-call
        term.wait(30)
    env.unwrapped._run.thread.join(30)
    _, reward, terminated, _, info = env.step("done")
    assert (reward, terminated, info["failure"]) == (0.0, True, "harness")
    assert episode_row(runs, info["episode"])["failure_kind"] == "harness"
    env.close()


def test_lost_sandbox_is_typed(gym_state, runs):
    env = make(gym_state, runs, harness="pi")
    env.reset(options={"task": TASK})
    env.unwrapped.sandbox.delete()
    _, reward, terminated, _, info = env.step("done")
    assert (reward, terminated, info["failure"]) == (0.0, True, "sandbox")
    env.close()


def test_reset_mid_episode_abandons_and_records_it(gym_state, runs):
    env = make(gym_state, runs, harness="pi")
    _, first = env.reset(options={"task": TASK})
    env.reset(options={"task": TASK})
    row = episode_row(runs, first["episode"])
    assert row["reward"] is None and "abandoned" in row["failure_message"]
    env.close()
