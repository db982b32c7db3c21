"""Batched rollouts: k attempts per task, a bounded number at once, every one recorded.

    records = await rollout(builtin.tasks("text"), "pi", "oracle", n=4, concurrency=8,
                            trajectories="pomona-runs")
    summary(records)   # {"episodes", "ran", "failed": {kind: n}, "mean_reward", "resolved"}

Each attempt is `pomona.gym.episode.run_episode` on a worker thread (harness runs are blocking
sandbox execs, so threads, sized to `concurrency` rather than the default executor's CPU-bound
size). Its `episodes` row is written by the proxy the moment it finishes, linked to its calls by
the episode key, so a rollout killed halfway keeps everything done so far. One attempt's failure
is its record (`failure_kind` set, reward None), never an exception and never a reward of 0.
"""

from __future__ import annotations

import asyncio
import sys
import time
import types
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pomona.benchmarks import builtin
from pomona.benchmarks.task import Task
from pomona.gym.episode import EpisodeRecord, ensure_harness, run_episode
from pomona.gym.proxies import shared_proxy
from pomona.gym.sandboxes import shared_client
from pomona.harnesses.proxy_link import ProxyLink

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


def _tasks(tasks: Sequence[Task | str]) -> list[Task]:
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
    harness: str,
    model: ModelChoice,
    n: int = 1,
    concurrency: int = 8,
    *,
    proxy: Any = None,
    trajectories: str | None = None,
    models: str | None = None,
    runtime: str = "local",
    state_dir: str | None = None,
    timeout: float = 600,
    dialect: str | None = None,
    image: str | None = None,
    run_id: str | None = None,
    progress: bool = True,
    on_episode: Callable[[EpisodeRecord], None] | None = None,
) -> list[EpisodeRecord]:
    """Run `n` attempts of `harness` with `model` (a name, or a function of the task) on each
    task, at most `concurrency` at once. Returns the records in (task, attempt) order."""
    if n < 1 or concurrency < 1:
        raise ValueError("n and concurrency must be at least 1")
    chosen = _tasks(tasks)
    ensure_harness(harness)
    link = ProxyLink.of(proxy or shared_proxy(trajectories, models))
    client = shared_client(runtime, state_dir)
    run_id = run_id or f"rollout-{time.strftime('%Y%m%d-%H%M%S')}"
    jobs = [(task, attempt) for task in chosen for attempt in range(n)]
    bar = Progress(len(jobs), enabled=progress)
    loop = asyncio.get_running_loop()

    def attempt(task: Task, i: int) -> EpisodeRecord:
        name = model(task) if callable(model) else model
        return run_episode(task, harness, name, proxy=link, client=client, timeout=timeout,
                           dialect=dialect, image=image, run_id=run_id, attempt=i)

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


class _CallableModule(types.ModuleType):
    """`pomona.gym.rollout(...)` is the function even once this module has been imported by
    name (which makes the package attribute the module)."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return rollout(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
