"""Batched rollouts: k attempts per task, a bounded number at once, every one recorded.

    records = await rollout(builtin.tasks("text"), "pi", "oracle", n=4, concurrency=8,
                            trajectories="pomona-runs")
    summary(records)   # {"episodes", "ran", "failed": {kind: n}, "mean_reward", "resolved"}

Each attempt is `pomona.gym.episode.run_episode` on a worker thread (harness runs are blocking
sandbox execs, so threads, sized to `concurrency` rather than the default executor's CPU-bound
size). Its `episodes` row is written by the proxy the moment it finishes, linked to its calls by
the episode key, so a rollout killed halfway keeps everything done so far. One attempt's failure
is its record (`failure_kind` set, reward None), never an exception and never a reward of 0.

An in-process policy instead of a model: `rollout(tasks, "pi", policy=fn)` runs each attempt as a
ModelCallEnv episode and answers every model call of the harness with `fn(observation)`, the
observation being {"dialect", "messages", "tools", "episode", "sequence", "task_id"} in the
dialect-neutral form (pomona.proxy.neutral) and the answer an Action, its dict or plain text.

For RL: `group_rollout` returns the attempts grouped by task with group-normalised advantages
(zero-variance groups dropped, pomona.trainer.advantages); `balanced_rollout` samples each task
in strides until a balanced group forms (Balanced Adaptive Rollout, pomona.trainer.bar).
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections import Counter
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pomona.benchmarks import builtin
from pomona.benchmarks.task import Task
from pomona.gym.episode import EpisodeRecord, ensure_harness, run_episode
from pomona.gym.proxies import shared_proxy
from pomona.gym.sandboxes import shared_client
from pomona.harnesses.proxy_link import ProxyLink

ModelChoice = str | Callable[[Task], str]
PolicyFn = Callable[[dict[str, Any]], Any]


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
    model: ModelChoice | None = None,
    n: int = 1,
    concurrency: int = 8,
    *,
    proxy: Any = None,
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
    only: Collection[tuple[str, int]] | None = None,
) -> list[EpisodeRecord]:
    """Run `n` attempts of `harness` with `model` (a name, or a function of the task) or with an
    in-process `policy` on each task, at most `concurrency` at once (`only`: just these
    (task id, attempt) of them, what a resumed run still needs). Returns the records in
    (task, attempt) order."""
    if n < 1 or concurrency < 1:
        raise ValueError("n and concurrency must be at least 1")
    if (model is None) == (policy is None):
        raise ValueError("give either a model or a policy")
    chosen = _tasks(tasks)
    ensure_harness(harness)
    link = ProxyLink.of(proxy or shared_proxy(trajectories, models))
    client = shared_client(runtime, state_dir)
    run_id = run_id or f"rollout-{time.strftime('%Y%m%d-%H%M%S')}"
    jobs = [(t, i) for t in chosen for i in range(n) if only is None or (t.id, i) in only]
    bar = Progress(len(jobs), enabled=progress)
    loop = asyncio.get_running_loop()

    def attempt(task: Task, i: int) -> EpisodeRecord:
        if policy is not None:
            return run_policy_episode(
                task,
                harness,
                policy,
                proxy=link,
                runtime=runtime,
                state_dir=state_dir,
                timeout=timeout,
                dialect=dialect,
                image=image,
                max_steps=max_steps,
                run_id=run_id,
                attempt=i,
            )
        assert model is not None  # one of model and policy is given (checked above)
        name = model(task) if callable(model) else model
        return run_episode(
            task,
            harness,
            name,
            proxy=link,
            client=client,
            timeout=timeout,
            dialect=dialect,
            image=image,
            run_id=run_id,
            attempt=i,
        )

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


def run_policy_episode(
    task: Task,
    harness: str,
    policy: PolicyFn,
    *,
    proxy: Any,
    runtime: str | None = "local",  # None: the service at POMONA_URL
    state_dir: str | None = None,
    timeout: float = 600,
    dialect: str | None = None,
    image: str | None = None,
    max_steps: int = 30,
    run_id: str | None = None,
    attempt: int = 0,
) -> EpisodeRecord:
    """One attempt with an in-process policy, as a ModelCallEnv episode (its row carrying
    `run_id` and `attempt`). A policy that raises fails its attempt as the model would
    (`upstream`), never the rollout."""
    from pomona.gym.model_call_env import ModelCallEnv

    link = ProxyLink.of(proxy)
    env = ModelCallEnv(
        harness=harness,
        dialect=dialect,
        tasks=[task],
        runtime=runtime,
        state_dir=state_dir,
        image=image,
        proxy=link.server,
        max_steps=max_steps,
        harness_timeout=timeout,
    )
    try:
        obs, info = env.reset(options={"task": task, "run": run_id, "attempt": attempt})
        ended = bool(info.get("done"))
        truncated = False
        while not ended:
            observation = {
                "dialect": obs["dialect"],
                **{k: info.get(k) for k in ("messages", "tools", "episode", "sequence", "task_id")},
            }
            try:
                action = policy(observation)
            except Exception as e:  # noqa: BLE001 - the policy's failure is this attempt's
                message = f"the policy raised {type(e).__name__}: {e}"
                link.close_episode(
                    info["episode"], failure_kind="upstream", failure_message=message
                )
                return EpisodeRecord(
                    info["episode"],
                    task.id,
                    task.benchmark,
                    harness,
                    "policy",
                    attempt,
                    failure_kind="upstream",
                    failure_message=message,
                )
            obs, _, terminated, truncated, info = env.step(action)
            ended = terminated or truncated
        record = EpisodeRecord(**{**info["record"], "attempt": attempt})
        if truncated and record.failure_kind == "none":
            record.failure_message = "truncated: the step budget ran out"
        return record
    finally:
        env.close()


async def group_rollout(
    tasks: Sequence[Task | str],
    harness: str,
    model: ModelChoice | None = None,
    n: int = 4,
    *,
    scale: bool = True,
    keep_dropped: bool = False,
    **kwargs: Any,
) -> list[Any]:
    """`n` attempts per task grouped by task, each group with its members' group-normalised
    advantages (pomona.trainer.advantages.Group). Groups whose rewards do not vary are dropped
    unless `keep_dropped`; attempts with an infra failure are never members."""
    from pomona.trainer.advantages import groups

    records = await rollout(tasks, harness, model, n=n, **kwargs)
    found = groups(records, key="task", scale=scale)
    return found if keep_dropped else [g for g in found if not g.dropped]


async def balanced_rollout(
    tasks: Sequence[Task | str],
    harness: str,
    model: ModelChoice | None = None,
    *,
    config: Any = None,
    **kwargs: Any,
) -> dict[str, Any]:
    """Balanced Adaptive Rollout over each task (pomona.trainer.bar): attempts run in strides
    until a group with a balanced share of positives can be chosen. Returns {task id: BarResult}
    whose attempts hold the EpisodeRecords."""
    from pomona.trainer.bar import Attempt, BalancedRollout

    async def one(task: Task) -> Any:
        bar = BalancedRollout(config)
        while k := bar.need():
            records = await rollout([task], harness, model, n=k, **{"progress": False, **kwargs})
            bar.add([Attempt.of_record(r) for r in records])
        return bar.result()

    chosen = _tasks(tasks)
    results = await asyncio.gather(*(one(t) for t in chosen))
    return {t.id: r for t, r in zip(chosen, results, strict=True)}


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
