"""Batched rollouts: k attempts per task, a bounded number at once, every one recorded.

    records = await rollout(builtin.tasks("text"), "pi", "oracle", n=4, concurrency=8,
                            trajectories="pomona-runs")
    summary(records)   # {"episodes", "ran", "failed": {kind: n}, "mean_reward", "resolved"}

Each attempt is `pomona.episodes.run_episode` on a worker thread (harness runs are blocking
sandbox execs, so threads, sized to `concurrency` rather than the default executor's CPU-bound
size). Its `episodes` row is written by the proxy the moment it finishes, linked to its calls by
the episode key, so a rollout killed halfway keeps everything done so far. One attempt's failure
is its record (`failure_kind` set, reward None), never an exception and never a reward of 0.

An in-process policy instead of a model: `rollout(tasks, "pi", policy=fn)` answers every model
call of the harness with `fn(observation)` (pomona.episodes.policy.InProcessPolicy), the
observation being {"dialect", "messages", "tools", "episode", "sequence", "task_id"} in the
dialect-neutral form (pomona.proxy.neutral) and the answer an Action, its dict or plain text.
Any other Agent (pomona.episodes.agents) plays when given in place of the harness name.

For RL, pomona.trainer.rollouts groups these attempts by task (`group_rollout`,
`balanced_rollout`).
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections import Counter
from collections.abc import Callable, Collection, Coroutine, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from pomona.benchmarks import builtin
from pomona.benchmarks.browser.stage import Judging
from pomona.benchmarks.task import Task
from pomona.episodes.agents import Agent, agent_for, ensure_harness
from pomona.episodes.engine import run_episode
from pomona.episodes.policy import InProcessPolicy, PolicyFn
from pomona.episodes.record import EpisodeRecord
from pomona.errors import UsageError
from pomona.orchestrator.sdk.shared import shared_client
from pomona.proxy.control import ProxyControl, proxy_control
from pomona.proxy.shared import shared_proxy

ModelChoice = str | Callable[[Task], str]


class Progress:
    """Live counts as episodes finish: passed of scored, mean reward, infra failures (never
    counted as a 0). A tqdm bar when tqdm is installed, else one stderr line rewritten in place."""

    def __init__(self, total: int, label: str = "rollout", enabled: bool = True):
        self.total, self.label, self.enabled = total, label, enabled
        self.done = self.passed = self.scored = self.infra = 0
        self.rewards: list[float] = []
        self._bar: Any = None
        if enabled:
            try:
                from tqdm.auto import tqdm
            except ImportError:
                return
            self._bar = tqdm(total=total, desc=label, unit="ep", file=sys.stderr)

    def update(self, record: EpisodeRecord) -> None:
        self.done += 1
        if record.failure_kind == "none" and record.reward is not None:
            self.scored += 1
            self.passed += bool(record.resolved)
            self.rewards.append(record.reward)
        else:
            self.infra += 1
        if not self.enabled:
            return
        mean = sum(self.rewards) / len(self.rewards) if self.rewards else float("nan")
        status = f"pass {self.passed}/{self.scored}  reward {mean:.2f}  infra-fail {self.infra}"
        if self._bar is not None:
            self._bar.set_postfix_str(status, refresh=False)
            self._bar.update(1)
        else:
            sys.stderr.write(f"\r{self.label} {self.done}/{self.total}  {status}")
            sys.stderr.flush()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
        elif self.enabled:
            sys.stderr.write("\n")


def tasks_of(tasks: Sequence[Task | str]) -> list[Task]:
    """Tasks, built-in task ids, or built-in task set names."""
    out: list[Task] = []
    for t in tasks:
        if isinstance(t, Task):
            out.append(t)
        elif t in builtin.TASK_SETS or t == "all":
            out += builtin.tasks(t)
        else:
            out.append(builtin.get(t))
    return out


async def rollout(
    tasks: Sequence[Task | str],
    harness: str | Agent,
    model: ModelChoice | None = None,
    n: int = 1,
    concurrency: int = 8,
    *,
    proxy: ProxyControl | str | None = None,
    trajectories: str | None = None,
    models: str | None = None,
    runtime: str | None = "local",  # None: the service at POMONA_URL
    state_dir: str | None = None,
    timeout: float = 600,
    dialect: str | None = None,
    image: str | None = None,
    run_id: str | None = None,
    progress: bool = True,
    on_episode: Callable[[EpisodeRecord], None] | None = None,
    policy: PolicyFn | None = None,
    max_steps: int = 30,
    columns: Mapping[str, Any] | None = None,
    judging: Judging | None = None,
    only: Collection[tuple[str, int]] | None = None,
) -> list[EpisodeRecord]:
    """Run `n` attempts on each task, at most `concurrency` at once, by `harness` (an Agent, or a
    harness name) with `model` (a name, or a function of the task) or with an in-process
    `policy`. `columns` go into every row beside the run id; `only`: just these (task id,
    attempt) of them, what a resumed run still needs. Returns the records in (task, attempt)
    order."""
    if n < 1 or concurrency < 1:
        raise UsageError("n and concurrency must be at least 1")
    if isinstance(harness, str) and (model is None) == (policy is None):
        raise UsageError("give either a model or a policy")
    chosen = tasks_of(tasks)
    if isinstance(harness, str):  # a harness that cannot play these tasks is said before any
        for browser in {t.environment.browser for t in chosen}:
            agent_for(harness, "oracle", browser=browser, dialect=dialect)
    control = proxy_control(proxy or shared_proxy(trajectories, models))
    client = shared_client(runtime, state_dir)
    run_id = run_id or f"rollout-{time.strftime('%Y%m%d-%H%M%S')}"
    jobs = [(t, i) for t in chosen for i in range(n) if only is None or (t.id, i) in only]
    bar = Progress(len(jobs), enabled=progress)
    loop = asyncio.get_running_loop()

    def player(task: Task) -> Agent | str:
        if not isinstance(harness, str):
            return harness
        if policy is not None:
            return InProcessPolicy(ensure_harness(harness), policy, dialect, timeout, max_steps)
        return harness

    def attempt(task: Task, i: int) -> EpisodeRecord:
        name = model(task) if callable(model) else model
        return run_episode(
            task, player(task), name, proxy=control, client=client, timeout=timeout,
            dialect=dialect, image=image, run_id=run_id, attempt=i, columns=columns,
            runtime=runtime, judging=judging,
        )  # fmt: skip

    async def one(pool: ThreadPoolExecutor, task: Task, i: int) -> EpisodeRecord:
        record = await loop.run_in_executor(pool, attempt, task, i)
        bar.update(record)
        if on_episode is not None:
            on_episode(record)
        return record

    with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="pomona-rollout") as pool:
        try:
            return list(await asyncio.gather(*(one(pool, t, i) for t, i in jobs)))
        finally:
            bar.close()


def summary(records: Sequence[EpisodeRecord]) -> dict[str, Any]:
    """Rewards over the episodes that ran; failures counted by kind, apart."""
    ran = [r for r in records if r.reward is not None]
    failed = Counter(r.failure_kind for r in records if r.reward is None)
    return {
        "episodes": len(records),
        "ran": len(ran),
        "failed": dict(failed),
        "mean_reward": sum(r.reward for r in ran) / len(ran) if ran else None,  # type: ignore[misc]
        "resolved": sum(bool(r.resolved) for r in ran),
    }


T = TypeVar("T")


def blocking(coroutine: Coroutine[Any, Any, T]) -> T:
    """asyncio.run, also where this thread already runs a loop (a notebook, a sync Playwright
    session): then the coroutine gets a thread and a loop of its own."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    with ThreadPoolExecutor(1, thread_name_prefix="pomona-blocking") as pool:
        return pool.submit(asyncio.run, coroutine).result()
