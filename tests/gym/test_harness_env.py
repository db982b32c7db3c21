"""HarnessEnv: one step is one whole run of a real harness through the recording proxy; the info
carries the episode record and the recorded calls, and the `episodes` row agrees with it."""

from __future__ import annotations

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import pomona  # noqa: F401  (registers the environments)
from pomona import trajectories
from pomona.benchmarks import builtin


def make(gym_state, runs, **kwargs):
    return gym.make("pomona/HarnessEnv-v0", state_dir=gym_state, trajectories=str(runs), **kwargs)


def test_check_env_passes(gym_state, runs):
    env = make(gym_state, runs, harness="claude-code", task_set="text")
    check_env(env.unwrapped, skip_render_check=True)
    env.close()


@pytest.mark.parametrize("harness", ["pi", "claude-code"])
def test_oracle_run_scores_one_and_is_recorded(gym_state, runs, harness):
    env = make(gym_state, runs, harness=harness, model="oracle")
    obs, info = env.reset(options={"task": "text/sort-names"})
    assert "sorted" in obs["instruction"] and obs["final_answer"] == ""
    obs, reward, terminated, truncated, info = env.step(0)
    assert (reward, terminated, truncated, info["failure"]) == (1.0, True, False, "none")
    assert obs["final_answer"] == "done"
    record = info["record"]
    assert record["harness"] == harness and record["calls"] >= 2
    main = [c for c in info["calls"] if not c["side"]]
    assert [c["sequence"] for c in main] == list(range(len(main))) and len(main) == 2
    assert {c["episode"] for c in info["calls"]} == {record["episode"]}
    (row,) = [
        r
        for r in trajectories.read(runs, "episodes").to_pylist()
        if r["episode"] == record["episode"]
    ]
    assert (row["reward"], row["resolved"], row["task"], row["harness"]) == (
        1.0,
        True,
        "text/sort-names",
        harness,
    )
    assert row["artifacts"] and row["artifacts"][0]["uri"].startswith("file://")
    env.close()


def test_model_without_commands_scores_zero(gym_state, runs):
    env = make(gym_state, runs, harness="pi", model="scripted")
    env.reset(options={"task": "files/rename"})
    _, reward, terminated, _, info = env.step(0)
    assert (reward, terminated, info["failure"]) == (0.0, True, "none")
    assert info["record"]["reward"] == 0.0


def test_failing_upstream_is_a_typed_failure_not_a_zero(gym_state, gym_proxy):
    env = gym.make(
        "pomona/HarnessEnv-v0",
        state_dir=gym_state,
        harness="claude-code",
        model="broken",
        timeout=60,
    ).unwrapped
    env._proxy = gym_proxy  # a proxy object cannot travel through gym.make's deep-copied kwargs
    env.reset(options={"task": "files/create-hello"})
    _, reward, terminated, _, info = env.step(0)
    assert terminated and info["failure"] == "upstream" and info["record"]["reward"] is None
    assert all(c["status"] == "upstream_error" for c in info["calls"] if not c["side"])


def test_step_before_reset_is_an_error(gym_state, runs):
    env = make(gym_state, runs)
    with pytest.raises(RuntimeError, match="reset"):
        env.unwrapped.step(0)


def test_async_vector_env_with_shared_memory_is_refused_in_words(gym_state, runs):
    """Gymnasium's AsyncVectorEnv reads shared Text buffers once, at start: with shared memory
    every text observation would come back as '000...'. Refused, and without it the text is
    the env's own."""
    kwargs = {"state_dir": gym_state, "trajectories": str(runs)}
    shared = gym.vector.AsyncVectorEnv([lambda: make(gym_state, runs)] * 2, shared_memory=True)
    try:
        with pytest.raises(Exception, match="shared_memory=False"):
            shared.reset(options={"task": "files/create-hello"})
    finally:
        shared.close(terminate=True)
    plain = gym.make_vec("pomona/HarnessEnv-v0", 2, vectorization_mode="async",
                         vector_kwargs={"shared_memory": False}, **kwargs)  # fmt: skip
    try:
        obs, _ = plain.reset(options={"task": "files/create-hello"})
        assert list(obs["instruction"]) == [builtin.get("files/create-hello").instruction] * 2
    finally:
        plain.close()
