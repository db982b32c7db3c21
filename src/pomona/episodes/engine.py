"""One episode on one task, from stage to `episodes` row: the unit every driver plays (`pomona
run`, rollouts, HarnessEnv, the trainer's group rollouts), whoever the agent and wherever the
stage.

    the agent picks its stage (the task's sandbox, or a browser) and the stage starts
    turn after turn (most tasks ask once; a multi-step task's steps follow in the same stage),
        the agent plays it, heartbeats keeping the stage alive through long turns
    the stage gives the verdict (the task's scorer), and everything is taken down
    the attempt writes its row, typed: a failed start, a lost sandbox, a broken verifier are
    failure kinds with a reason and no reward, never an exception and never a 0
"""

from __future__ import annotations

import contextlib
import secrets
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any

from pomona.benchmarks.browser.stage import Judging
from pomona.benchmarks.stage import Played, Stage
from pomona.benchmarks.task import Score, Task, Turn
from pomona.episodes.agents import (
    ORACLE,
    SCRIPTED,
    Agent,
    StageContext,
    agent_for,
    ensure_harness,
)
from pomona.episodes.attempt import Attempt, RunInfo
from pomona.episodes.record import EpisodeRecord
from pomona.episodes.rows import grading_artifacts
from pomona.errors import EpisodeFailure, FailureKind, PomonaError, SandboxError
from pomona.harnesses.base import Harness
from pomona.orchestrator.sdk.client import Sandbox, SandboxClient
from pomona.proxy.control import ProxyControl, proxy_control

__all__ = ["ORACLE", "SCRIPTED", "ensure_harness", "run_episode"]


@contextlib.contextmanager
def kept_alive(sandbox: Sandbox | None, ttl: float, budget: float) -> Iterator[None]:
    """Heartbeats while a turn longer than the sandbox's TTL allows runs (a later step of a
    multi-step task may have more time than the first, which set the TTL)."""
    if sandbox is None:
        yield
        return
    sandbox.heartbeat()
    if budget + 600 <= ttl:
        yield
        return
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(ttl / 3):
            with contextlib.suppress(Exception):
                sandbox.heartbeat()

    beater = threading.Thread(target=beat, daemon=True, name="pomona-heartbeat")
    beater.start()
    try:
        yield
    finally:
        stop.set()
        beater.join()


def failure_of(error: BaseException, stage: Stage | None = None) -> tuple[FailureKind, str]:
    """The failure kind of an exception raised while playing: a sandbox that vanished under the
    agent shows up as odd harness errors, so its loss is checked first."""
    if isinstance(error, EpisodeFailure):
        return error.kind, str(error)
    if isinstance(error, SandboxError) or (stage is not None and stage.lost()):
        return "sandbox", f"the sandbox was lost: {type(error).__name__}: {error}"
    return "harness", f"{type(error).__name__}: {error}"


def _play(attempt: Attempt, agent: Agent, stage: Stage, ttl: float, budget: float) -> Played:
    """Every turn of the task; the last one played."""
    turn: Turn | None = Turn(stage.instruction, budget)
    number, last = 0, None
    while turn is not None:
        with attempt.timed("harness"), kept_alive(stage.sandbox, ttl, turn.timeout or budget):
            last = agent.play(attempt, stage, turn, number)
        attempt.record.final_answer, attempt.record.calls = last.answer, last.calls
        attempt.fail(last.failure, last.message)
        if not attempt.ran or last.every_turn:
            break
        turn, number = stage.next_turn(), number + 1
    assert last is not None
    return last


def _scored(attempt: Attempt, verdict: Score) -> None:
    record = attempt.record
    record.reward, record.resolved = verdict.reward, verdict.resolved
    record.score = verdict.model_dump()
    record.artifacts += grading_artifacts(verdict.details.get("log_dir"))


def play_episode(agent: Agent, task: Task, ctx: StageContext, run: RunInfo, number: int = 0,
                 timeout: float = 600) -> EpisodeRecord:  # fmt: skip
    """`agent` plays `task` to the end and it is scored. Never raises for a failed episode: the
    record (and the `episodes` row) says what failed."""
    attempt = Attempt(task, agent.name, agent.version, agent.model, ctx.proxy, run, number)
    stage: Stage | None = None
    try:
        with attempt.timed("sandbox"):
            stage = agent.stage(task, ctx, number)
            stage.start()
        attempt.record.harness_started_at = time.time()
        last = _play(attempt, agent, stage, ctx.ttl, timeout)
        if not attempt.ran and stage.lost():
            attempt.record.failure_kind = "sandbox"
        if attempt.ran:
            with attempt.timed("score"):
                _scored(attempt, stage.score(last, attempt.key))
    except Exception as e:  # noqa: BLE001 - one episode's failure is its record, not a crash
        attempt.fail(*failure_of(e, stage))
    finally:
        if stage is not None:
            with attempt.timed("sandbox"):
                stage.close()
    return attempt.close()


def run_episode(
    task: Task,
    agent: Agent | Harness | str,
    model: str | None = None,
    *,
    proxy: ProxyControl | str,
    client: SandboxClient,
    timeout: float = 600,
    dialect: str | None = None,
    image: str | None = None,
    run_id: str | None = None,
    attempt: int = 0,
    columns: Mapping[str, Any] | None = None,
    runtime: str | None = "local",
    judging: Judging | None = None,
) -> EpisodeRecord:
    """Attempt `attempt` of `task` by `agent` (an Agent, or a harness and its `model`) with
    `proxy` recording and `client` giving sandboxes; `columns` go into the row beside the run
    id. Never raises for a failed episode."""
    control = proxy_control(proxy)
    run = RunInfo(run_id or secrets.token_hex(4), columns or {})
    budget = task.agent_timeout(timeout)
    if isinstance(agent, str | Harness):
        try:
            agent = agent_for(
                agent if isinstance(agent, str) else agent.name,
                model or ORACLE,
                browser=task.environment.browser,
                dialect=dialect,
                timeout=budget,
            )
        except PomonaError as e:  # no agent to play, but the attempt still leaves its row
            name = agent if isinstance(agent, str) else agent.name
            unplayed = Attempt(task, name, "", model or ORACLE, control, run, attempt)
            unplayed.fail("harness", str(e))
            return unplayed.close()
    ctx = StageContext(client, control, run.id, image, budget + 600, runtime, judging or Judging())
    return play_episode(agent, task, ctx, run, attempt, budget)
