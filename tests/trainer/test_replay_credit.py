"""Record and replay through a real harness, in-process policies in rollouts (groups, BAR), and
credit measured by branching: by replay for a harness episode, by fork for a shell episode."""

from __future__ import annotations

import asyncio
import itertools
import json
import threading

import pytest

import pomona.gym
from pomona import trajectories
from pomona.benchmarks import builtin
from pomona.benchmarks.task import CommandScorer, Task
from pomona.orchestrator.sdk.shared import shared_client
from pomona.proxy import ProxyServer
from pomona.proxy.replay import Replayer
from pomona.trainer.bar import BarConfig
from pomona.trainer.branching import harness_values, sft_examples, shell_values
from pomona.trainer.episodes import load
from pomona.trainer.rollouts import balanced_rollout, group_rollout

# the session fixtures (harness recordings, a tiny model's SFT run) are set up inside the first
# test's time; on a busy shared 2-core machine that can exceed the suite-wide 300 s
pytestmark = pytest.mark.timeout(900)

HELLO = builtin.get("files/create-hello")
# solved after the first command, undone by the second: the critical turn is 1
UNDONE = Task(id="credit/create-then-delete", instruction=HELLO.instruction,
              scorer=CommandScorer("cat hello.txt", "hello"),
              solution=("echo hello > hello.txt", "rm hello.txt"), benchmark="credit")  # fmt: skip


def stop(observation: dict) -> dict:
    """A policy that ends the harness's turn at once."""
    return {"text": "done"}


def solve(observation: dict) -> dict:
    """A policy that runs the hello command through pi's bash tool, then stops."""
    if any(m["role"] == "tool" for m in observation["messages"]):
        return {"text": "done"}
    return {"tool_calls": [{"name": "bash", "arguments": {"command": "echo hello > hello.txt"}}]}


class Alternating:
    """Solves every other episode it meets (first seen, first served), so a group of 2k
    attempts has exactly k successes whatever the order they run in."""

    def __init__(self) -> None:
        self.order: dict[str, int] = {}
        self.lock = threading.Lock()
        self.count = itertools.count()

    def __call__(self, observation: dict) -> dict:
        with self.lock:
            if observation["episode"] not in self.order:
                self.order[observation["episode"]] = next(self.count)
            i = self.order[observation["episode"]]
        return solve(observation) if i % 2 == 0 else stop(observation)


@pytest.fixture
def proxy(gym_proxy: ProxyServer) -> ProxyServer:
    return gym_proxy


def run(tasks, model=None, **kwargs):
    return asyncio.run(
        pomona.gym.rollout(tasks, "pi", model, progress=False, timeout=120, **kwargs)
    )


def calls_of(proxy: ProxyServer, key: str) -> list[dict]:
    return [
        c
        for c in trajectories.read(proxy.config.trajectories, "calls").to_pylist()
        if c["episode"] == key
    ]


def test_replay_reproduces_a_run_and_reports_the_first_divergence(proxy, gym_state):
    (original,) = run([HELLO], "oracle", proxy=proxy, state_dir=gym_state)
    recorded = calls_of(proxy, original.episode)
    replayer = Replayer(recorded)
    (again,) = run([HELLO], policy=replayer, proxy=proxy, state_dir=gym_state)
    report = replayer.report(again.episode)
    assert (again.failure_kind, again.reward) == ("none", 1.0)
    assert report.faithful and report.replayed == report.turns == len(replayer.turns) == 2

    # the same replies to a run on another task: its very first request differs
    (other,) = run([builtin.get("text/replace")], policy=replayer, proxy=proxy, state_dir=gym_state)
    divergence = replayer.report(other.episode).divergence
    assert divergence is not None and divergence.turn == 0
    assert divergence.where.startswith("messages[") and divergence.where.endswith("content")
    assert "config.ini" in str(divergence.replayed) and "hello.txt" in str(divergence.recorded)
    assert other.reward == 0.0  # the replayed command ran, and did not solve the other task


def test_policy_rollouts_groups_and_balanced_rollout(proxy, gym_state):
    groups = asyncio.run(group_rollout([HELLO], "pi", n=2, policy=Alternating(), proxy=proxy,
                                       state_dir=gym_state, concurrency=2, progress=False,
                                       keep_dropped=True, run_id="group-1"))  # fmt: skip
    (group,) = groups
    assert not group.excluded, [(r.failure_kind, r.failure_message) for r in group.excluded]
    assert sorted(group.rewards) == [0.0, 1.0]
    assert sorted(group.advantages) == pytest.approx([-0.70711, 0.70711], abs=1e-4)
    assert all(r.model == "policy" for r in group.members)
    assert sorted(r.attempt for r in group.members) == [0, 1]
    rows = trajectories.read(proxy.config.trajectories, "episodes").to_pylist()
    assert {(r["run"], json.loads(r["metadata"])["attempt"]) for r in rows} == {
        ("group-1", 0),
        ("group-1", 1),
    }

    results = asyncio.run(balanced_rollout([HELLO], "pi", policy=Alternating(), proxy=proxy,
                                           state_dir=gym_state, config=BarConfig(n=2, max_samples=4, stride=2),
                                           concurrency=2))  # fmt: skip
    result = results[HELLO.id]
    seen = [(a.reward, a.status, a.id.failure_message) for a in result.attempts]
    assert (result.how, result.dropped, len(result.attempts)) == ("balanced", None, 2), seen

    def broken(observation: dict) -> dict:
        raise RuntimeError("policy bug")

    (failed,) = run([HELLO], policy=broken, proxy=proxy, state_dir=gym_state)
    assert (failed.failure_kind, failed.reward) == ("upstream", None)
    assert "policy bug" in failed.failure_message
    with pytest.raises(ValueError, match="either a model or a policy"):
        run([HELLO], "oracle", policy=stop, proxy=proxy, state_dir=gym_state)


def test_values_by_replay_find_the_critical_turn(proxy, gym_state):
    (original,) = run([UNDONE], "oracle", proxy=proxy, state_dir=gym_state)
    assert original.reward == 0.0
    values = harness_values(calls_of(proxy, original.episode), UNDONE, "pi", stop, k=2,
                            proxy=proxy, state_dir=gym_state, timeout=120)  # fmt: skip
    # before any turn: stopping leaves nothing; after the echo: solved; after the rm: undone
    assert values.values == [0.0, 1.0, 0.0, 0.0] and values.rewards[1] == [1.0, 1.0]
    assert values.deltas == [1.0, -1.0, 0.0] and values.critical == 1
    assert values.segments() == [(0, 0)] and values.notes == [None] * 4
    (episode,) = [e for e in load(proxy.config.trajectories) if e.key == original.episode]
    (example,) = sft_examples(episode, values)
    assert example["prompt"][-1]["role"] == "user" and example["metadata"]["critical"] == 1
    call = example["completion"][0]["tool_calls"][0]["function"]
    assert "echo hello > hello.txt" in call["arguments"]


def test_values_by_fork_for_a_shell_episode(gym_state):
    task = builtin.get("text/replace")

    def fix(observation: dict) -> str:
        done = any("sed" in h["command"] for h in observation["history"])
        return "submit" if done else "sed -i 's/foo/bar/g' config.ini"

    client = shared_client("local", gym_state)
    values = shell_values(task, ["cat config.ini", "rm config.ini", "ls"], fix, k=2, client=client)
    assert values.values == [1.0, 1.0, 0.0, 0.0] and values.critical == 1
    assert values.segments() == [(0, 0)]
    assert not client.list_sandboxes({"task": task.id[:63]}) and not client.list_snapshots()
