"""Credit measured by branching, not inferred: how much each turn of an episode was worth.

V(t) is the mean reward of k continuations by a policy from the state *before* turn t's action;
V(T), after the last turn, is the episode's own outcome. The recorded action at turn t is then
worth D(t) = V(t+1) - V(t): a Monte-Carlo advantage measured by running the task again, not a
discounted guess. The turn with the most negative D is the critical mistake; the runs of turns
with D >= 0 before it are the productive segments, exported as a credit-assignment SFT set.

Two ways to reach the state of turn t:
  harness episodes (the harness owns the loop): replay turns 0..t-1 of the recording to a fresh
      run of the same harness (pomona.proxy.replay), then let the policy continue. Each branch
      is a whole harness run, so an episode of T turns costs T*k + 1 runs.
  ShellEnv-style episodes (the policy owns the loop): run the recorded commands once in one
      sandbox, snapshot before each, and fork k sandboxes from a snapshot (an O(1) overlay
      operation on the local runtime) to continue from there. No replay, no harness start-up.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from pomona.benchmarks.task import Task
from pomona.errors import SandboxError
from pomona.orchestrator.sdk.client import Sandbox, SandboxClient
from pomona.proxy.control import ProxyControl
from pomona.trainer.episodes import Episode

SUBMIT = "submit"
ShellPolicy = Callable[[dict[str, Any]], str]


def _difference(after: float | None, before: float | None) -> float | None:
    return None if after is None or before is None else after - before


@dataclass
class Values:
    """Per-turn values of one episode. `values[t]` is V(t) for t = 0..T; `rewards[t]` the branch
    rewards behind it (None: that branch failed for infrastructure reasons and is not counted)."""

    values: list[float | None]
    rewards: list[list[float | None]]
    notes: list[str | None] = field(default_factory=list)  # e.g. a replay that diverged

    @property
    def turns(self) -> int:
        return len(self.values) - 1

    @property
    def deltas(self) -> list[float | None]:
        """D(t) = V(t+1) - V(t): what the recorded action at turn t was worth."""
        v = self.values
        return [_difference(v[t + 1], v[t]) for t in range(self.turns)]

    @property
    def critical(self) -> int | None:
        """The turn whose action lost the most value (None if no action lost any)."""
        scored = [(d, t) for t, d in enumerate(self.deltas) if d is not None]
        if not scored:
            return None
        worst, turn = min(scored)
        return turn if worst < 0 else None

    def segments(self) -> list[tuple[int, int]]:
        """Maximal runs [first, last] of productive turns (D >= 0) before the critical one (all
        turns when nothing was lost)."""
        end = self.critical if self.critical is not None else self.turns
        runs: list[tuple[int, int]] = []
        start = None
        for t in range(end):
            d = self.deltas[t]
            if d is not None and d >= 0:
                start = t if start is None else start
            elif start is not None:
                runs.append((start, t - 1))
                start = None
        if start is not None:
            runs.append((start, end - 1))
        return runs


def _mean(rewards: list[float | None]) -> float | None:
    scored = [r for r in rewards if r is not None]
    return sum(scored) / len(scored) if scored else None


# --- harness episodes: replay to turn t ---------------------------------------------------------


def harness_values(
    calls: list[dict[str, Any]],
    task: Task,
    harness: str,
    then: Callable[[dict[str, Any]], Any],
    *,
    k: int = 4,
    proxy: ProxyControl,
    runtime: str = "local",
    state_dir: str | None = None,
    timeout: float = 300,
    dialect: str | None = None,
    concurrency: int | None = None,
) -> Values:
    """V(t) for every turn of a recorded harness episode (its `calls` rows): for each t, k runs
    of `harness` on `task` whose first t turns are replayed and the rest answered by `then`
    (any policy: a LocalModel's `act`, a function). `proxy` must hold calls (an in-process ProxyServer)."""
    from pomona.episodes.rollouts import blocking, rollout
    from pomona.proxy.replay import Replayer, recorded_turns

    turns = recorded_turns(calls)
    values: list[float | None] = []
    rewards: list[list[float | None]] = []
    notes: list[str | None] = []
    for t in range(len(turns) + 1):
        replayer = Replayer(turns, upto=t, then=then)
        n = 1 if t == len(turns) else k  # the full replay is the recorded outcome: run it once
        records = blocking(rollout([task], harness, policy=replayer, n=n,
                                      concurrency=concurrency or n, proxy=proxy, runtime=runtime,
                                      state_dir=state_dir, timeout=timeout, dialect=dialect,
                                      progress=False))  # fmt: skip
        rs = [r.reward if r.failure_kind == "none" else None for r in records]
        diverged = [str(replayer.report(r.episode).divergence) for r in records
                    if replayer.report(r.episode).divergence is not None]  # fmt: skip
        rewards.append(rs)
        values.append(_mean(rs))
        notes.append(f"replay diverged: {diverged[0]}" if diverged else None)
    return Values(values, rewards, notes)


def sft_examples(episode: Episode, values: Values) -> list[dict[str, Any]]:
    """The credit-assignment SFT set: one prompt/completion example per productive segment before
    the critical turn (TRL's conversational prompt-completion type: loss on the completion only).
    A segment whose turns do not extend each other's conversation is left out."""
    out = []
    turns = episode.turns
    for first, last in values.segments():
        context = turns[first].messages
        whole = [*turns[last].messages, turns[last].reply]
        if whole[: len(context)] != context:
            continue
        out.append({
            "prompt": context,
            "completion": whole[len(context):],
            "tools": turns[last].tools,
            "metadata": {"episode": episode.key, "task": episode.task, "turns": [first, last],
                         "values": values.values[first : last + 2], "critical": values.critical},
        })  # fmt: skip
    return out


# --- ShellEnv-style episodes: snapshot and fork ------------------------------------------------


def _continue(sandbox: Sandbox, task: Task, history: list[dict[str, Any]], policy: ShellPolicy,
              max_steps: int, step_timeout: float) -> float | None:  # fmt: skip
    """Let `policy` go on from `history` in `sandbox` until it submits, then score."""
    history = list(history)
    try:
        for _ in range(max_steps):
            last = history[-1] if history else {"output": task.instruction, "exit_code": 0}
            command = policy({"instruction": task.instruction, "history": history,
                              "output": last["output"], "exit_code": last["exit_code"]})  # fmt: skip
            if command.strip() == SUBMIT:
                break
            r = sandbox.exec(command, timeout=step_timeout)
            history.append(
                {"command": command, "output": r.stdout + r.stderr, "exit_code": r.exit_code}
            )
        return task.evaluate(sandbox).reward
    except SandboxError:
        return None  # the branch's sandbox failed: not evidence about the state


def shell_values(
    task: Task,
    actions: Sequence[str],
    policy: ShellPolicy,
    *,
    k: int = 4,
    client: SandboxClient,
    image: str | None = None,
    max_steps: int = 30,
    step_timeout: float = 60,
) -> Values:
    """V(t) for an episode the policy played as shell commands (`actions`, without the final
    submit): the commands run once with a snapshot before each; k forks of each snapshot are
    continued by `policy` (observation: instruction, history of {command, output, exit_code},
    the last output and exit code; it answers a command or "submit")."""
    env = task.environment
    main = client.create_sandbox(image or env.image, network="none", workdir=env.workdir,
                                 labels={"task": task.id[:63], "branching": "main"})  # fmt: skip
    snapshots: list[Any] = []
    history: list[dict[str, Any]] = []
    try:
        task.prepare(main)
        for t in range(len(actions) + 1):
            snapshots.append(main.snapshot())
            if t < len(actions):
                r = main.exec(actions[t], timeout=step_timeout)
                history.append(
                    {"command": actions[t], "output": r.stdout + r.stderr, "exit_code": r.exit_code}
                )
        final = task.evaluate(main).reward
    finally:
        with contextlib.suppress(SandboxError):
            main.delete()

    def branch(t: int) -> list[float | None]:
        forks = client.fork(snapshots[t], k, labels={"task": task.id[:63], "branching": str(t)})
        try:
            with ThreadPoolExecutor(max_workers=k) as pool:
                return list(pool.map(lambda sb: _continue(sb, task, history[:t], policy,
                                                          max_steps, step_timeout), forks))  # fmt: skip
        finally:
            for sb in forks:
                with contextlib.suppress(SandboxError):
                    sb.delete()

    try:
        rewards = [branch(t) for t in range(len(actions))] + [[final]]
    finally:
        for snap in snapshots:
            with contextlib.suppress(SandboxError):
                client.delete_snapshot(snap)
    return Values([_mean(r) for r in rewards], rewards, [None] * len(rewards))
