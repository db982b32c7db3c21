"""Batched rollouts: 20 episodes at concurrency 8 through a real harness, some made to fail in
each way a run fails (sandbox killed, harness timeout, upstream error). Every episode has a
record and an `episodes` row, failures are typed, and only episodes that ran carry a reward."""

from __future__ import annotations

import asyncio
import threading

import pytest

import pomona.gym
from pomona import trajectories
from pomona.benchmarks import builtin
from pomona.benchmarks.task import CommandScorer, Task
from pomona.episodes.rollouts import blocking, summary
from pomona.orchestrator.sdk.shared import shared_client

# Only the hanging task has a short budget: it cannot finish in it on any machine, and the
# episodes meant to succeed get a budget no load can exhaust (a busy 2-core box once timed out
# a good episode under a shared 20 s budget).
HANG = Task(
    id="gym-test/hang",
    instruction="Wait.",
    scorer=CommandScorer("true", ""),
    solution=("sleep 120",),
    benchmark="gym-test",
    metadata={"agent_timeout": 10},
)
DOOMED = Task(
    id="gym-test/doomed",
    instruction="Wait.",
    scorer=CommandScorer("true", ""),
    solution=("sleep 120",),
    benchmark="gym-test",
)
BROKEN = Task(
    id="gym-test/broken-upstream",
    instruction="Create hello.txt.",
    scorer=CommandScorer("cat hello.txt", "hello"),
    solution=("echo hello > hello.txt",),
    benchmark="gym-test",
)
GOOD = [builtin.get("files/create-hello"), builtin.get("text/replace")]
EXPECTED = {
    "files/create-hello": "none",
    "text/replace": "none",
    HANG.id: "timeout",
    DOOMED.id: "sandbox",
    BROKEN.id: "upstream",
}


def kill_doomed_sandboxes(state_dir: str, stop: threading.Event) -> None:
    """Delete, from outside, every sandbox of the doomed task as soon as it appears."""
    client = shared_client("local", state_dir)
    while not stop.wait(0.05):
        for info in client.list_sandboxes(labels={"task": DOOMED.id}):
            client.delete_sandbox(info.id)


def test_twenty_episodes_with_failures(gym_state, gym_proxy, runs):
    stop = threading.Event()
    killer = threading.Thread(target=kill_doomed_sandboxes, args=(gym_state, stop), daemon=True)
    killer.start()
    streamed: list[str] = []

    def on_episode(record):  # the row is on disk when the record comes back
        keys = trajectories.read(runs, "episodes").column("episode").to_pylist()
        assert record.episode in keys
        streamed.append(record.episode)

    try:
        records = asyncio.run(
            pomona.gym.rollout(
                [*GOOD, HANG, DOOMED, BROKEN],
                "pi",
                lambda task: "broken" if task is BROKEN else "oracle",
                n=4,
                concurrency=8,
                proxy=gym_proxy,
                state_dir=gym_state,
                timeout=600,
                run_id="rollout-test",
                progress=True,
                on_episode=on_episode,
            )
        )
    finally:
        stop.set()
        killer.join(5)

    assert len(records) == 20 and sorted(streamed) == sorted(r.episode for r in records)
    assert [(r.task, r.attempt) for r in records][:4] == [
        ("files/create-hello", i) for i in range(4)
    ]
    for r in records:
        assert r.failure_kind == EXPECTED[r.task], (r.task, r.failure_kind, r.failure_message)
        if r.failure_kind == "none":
            assert (r.reward, r.resolved) == (1.0, True)
        else:
            assert r.reward is None and r.resolved is None and r.failure_message

    rows = {
        row["episode"]: row
        for row in trajectories.read(runs, "episodes").to_pylist()
        if row["run"] == "rollout-test"
    }
    assert set(rows) == {r.episode for r in records}
    for r in records:
        row = rows[r.episode]
        assert (row["task"], row["failure_kind"], row["reward"]) == (
            r.task,
            r.failure_kind,
            r.reward,
        )
    main_calls = {}
    for call in trajectories.read(runs, "calls").to_pylist():
        if not call["side"]:
            main_calls.setdefault(call["episode"], []).append(call)
    for r in records:
        if r.failure_kind == "none":
            assert len(main_calls[r.episode]) == 2
        if r.failure_kind == "upstream":
            assert main_calls[r.episode][-1]["status"] == "upstream_error"

    s = summary(records)
    assert (s["episodes"], s["ran"], s["mean_reward"], s["resolved"]) == (20, 8, 1.0, 8)
    assert s["failed"] == {"timeout": 4, "sandbox": 4, "upstream": 4}


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError):
        asyncio.run(pomona.gym.rollout(GOOD, "pi", "oracle", n=0))


def test_a_blocking_run_works_where_a_loop_already_runs():
    """run_benchmark and the trainers' rollouts are called from notebooks and from under a sync
    Playwright session, where this thread's loop is running: asyncio.run alone refuses there."""

    async def answer() -> tuple[str, bool]:
        return threading.current_thread().name, asyncio.get_running_loop() is not outer

    async def inside() -> tuple[str, bool]:
        return blocking(answer())

    outer = None
    assert blocking(answer()) == (threading.current_thread().name, True)  # no loop: this thread

    async def nested() -> tuple[str, bool]:
        nonlocal outer
        outer = asyncio.get_running_loop()
        return await inside()

    name, own_loop = asyncio.run(nested())
    assert name.startswith("pomona-blocking") and own_loop
