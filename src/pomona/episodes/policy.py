"""A real harness whose every model call is held for an in-process policy: the machinery under
ModelCallEnv (one step per call, the caller driving) and under the InProcessPolicy agent (a
Python function answering every call, the engine driving).

The harness runs in a background thread against a proxy episode served by the `policy`
upstream (pomona.proxy.policy); each main call it makes waits in the Policy until it is
answered. Side calls (no tools) are answered by the proxy itself and never held.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pomona.benchmarks.stage import Played, Stage, delete_sandbox
from pomona.benchmarks.task import Task, Turn
from pomona.episodes.agents import HarnessAgent, StageContext, played, sandbox_stage
from pomona.episodes.attempt import Attempt
from pomona.errors import EpisodeFailure, FailureKind
from pomona.harnesses.base import Harness
from pomona.harnesses.runner import HarnessResult, run
from pomona.proxy.neutral import Action
from pomona.proxy.policy import POLICY, CallExpired, HeldCall, Policy

PolicyFn = Callable[[dict[str, Any]], Any]
# every process of the harness run carries POMONA_RUN in its environment
KILL_HARNESS = (
    "for p in /proc/[0-9]*; do grep -qzE '^POMONA_RUN=' \"$p/environ\" 2>/dev/null && "
    'kill -9 "${p#/proc/}" 2>/dev/null; done; true'
)


class HeldHarness:
    """The harness on `turn` in the stage's sandbox, its main calls held in `policy`. With
    `follow`, the task's later turns run in the same thread as each one ends (ModelCallEnv: the
    caller only sees calls); the policy is closed when the thread ends, so a waiter wakes."""

    def __init__(
        self,
        attempt: Attempt,
        stage: Stage,
        harness: Harness,
        policy: Policy,
        turn: Turn,
        *,
        dialect: str | None = None,
        timeout: float = 900,
        follow: bool = False,
    ):
        self.attempt, self.stage, self.policy = attempt, stage, policy
        self.result: HarnessResult | None = None
        self.error: BaseException | None = None
        self.failure: EpisodeFailure | None = None  # a later turn could not be set up
        self.answered: tuple[HeldCall, Action] | None = None  # the last call and its reply
        self._harness, self._dialect, self._timeout = harness, dialect, timeout
        self.thread = threading.Thread(
            target=self._main, args=(turn, follow), daemon=True, name="pomona-held-harness"
        )
        self.thread.start()

    def _main(self, turn: Turn | None, follow: bool) -> None:
        assert self.stage.sandbox is not None and self.attempt.opened is not None
        try:
            while turn is not None and not self.policy.closed:
                self.result = run(
                    self._harness,
                    turn.instruction,
                    self.stage.sandbox,
                    POLICY,
                    self.attempt.proxy,
                    timeout=turn.timeout or self._timeout,
                    dialect=self._dialect,
                    episode=self.attempt.opened,
                    close=False,
                )
                if not follow or not self.result.ok:
                    break
                try:
                    turn = self.stage.next_turn()
                except EpisodeFailure as e:
                    self.failure = e
                    break
        except BaseException as e:  # noqa: BLE001 - reported as the episode's failure
            self.error = e
        finally:
            self.policy.close()

    def next_call(self, deadline: float) -> HeldCall | None:
        """The harness's next held call, or None once it has ended. A client retry of the call
        just answered (same conversation, nothing added) gets the same answer, not a turn."""
        while True:
            call = self.policy.next_call(timeout=max(0.0, deadline - time.monotonic()))
            if call is None or self.answered is None or not _repeats(call, self.answered[0]):
                return call
            with contextlib.suppress(CallExpired):
                self.policy.reply(call, self.answered[1])

    def reply(self, call: HeldCall, action: Action) -> bool:
        """Answer `call`. False when the answer came too late: the call had waited longer than
        the policy's timeout (a harness that ended while its call was held is not that)."""
        self.answered = (call, action)
        try:
            self.policy.reply(call, action)
        except CallExpired:
            return call.sequence not in self.policy.expired
        return True

    def stop(self, keep: bool = True) -> None:
        """Stop the harness now and wait for its thread. With `keep` the sandbox survives (to be
        scored): the kill goes through a terminal session, because execs on one sandbox run one
        at a time and the harness's own exec holds the turn."""
        self.policy.close()
        sandbox = self.stage.sandbox
        if self.thread.is_alive() and sandbox is not None:
            try:
                if not keep:
                    raise EpisodeFailure("no need to keep the sandbox")
                with sandbox.pty(["sh", "-c", KILL_HARNESS]) as term:
                    term.wait(30)
            except Exception:  # noqa: BLE001 - deleting the sandbox ends the run anyway
                delete_sandbox(sandbox)
        self.thread.join(60)

    def outcome(self, truncated: bool = False) -> tuple[FailureKind, str | None]:
        """How the run ended, once stopped: an error, a later turn that failed, a step budget
        spent (`truncated`: scored as it stands), or what the harness's own effects say."""
        if self.error is not None:
            if isinstance(self.error, EpisodeFailure):
                return self.error.kind, str(self.error)
            kind: FailureKind = "sandbox" if self.stage.lost() else "harness"
            return kind, f"{type(self.error).__name__}: {self.error}"
        if self.failure is not None:
            return self.failure.kind, str(self.failure)
        if truncated or self.result is None:
            return "none", "truncated: the step budget ran out" if truncated else None
        kind, message = self.result.failure_kind, self.result.failure_message
        if kind != "none" and self.stage.lost():
            kind = "sandbox"
        if self.policy.expired and kind == "upstream":
            kind, message = "timeout", "the policy let a model call time out"
        return kind, message


def _repeats(call: HeldCall, previous: HeldCall) -> bool:
    return call.messages == previous.messages and call.tools == previous.tools


def observation(call: HeldCall, attempt: Attempt) -> dict[str, Any]:
    """What a policy function is given: the held request in the dialect-neutral form."""
    return {
        "dialect": call.dialect,
        "messages": call.messages,
        "tools": call.tools,
        "episode": attempt.key,
        "sequence": call.sequence,
        "task_id": attempt.task.id,
    }


@dataclass
class InProcessPolicy(HarnessAgent):
    """A real harness with every model call answered by `fn(observation)` (an Action, its dict
    or plain text): the observation is {"dialect", "messages", "tools", "episode", "sequence",
    "task_id"}. A function that raises fails its attempt as a model would (`upstream`); at
    `max_steps` replies the harness is stopped and the attempt scored as it stands."""

    fn: PolicyFn
    dialect: str | None = None
    timeout: float = 600
    max_steps: int = 30
    policy_timeout: float = 300
    model: str = POLICY

    def stage(self, task: Task, ctx: StageContext, attempt: int) -> Stage:
        return sandbox_stage(task, ctx)

    def play(self, attempt: Attempt, stage: Stage, turn: Turn, number: int) -> Played:
        """Every turn of the task in one go (the harness goes on to the task's later turns in
        its own thread, as ModelCallEnv's does)."""
        policy = Policy(timeout=self.policy_timeout)
        attempt.open(POLICY, policy=policy)
        held = HeldHarness(
            attempt, stage, self.harness, policy, turn,
            dialect=self.dialect, timeout=self.timeout, follow=True,
        )  # fmt: skip
        deadline, steps = time.monotonic() + (turn.timeout or self.timeout), 0
        try:
            while (call := held.next_call(deadline)) is not None:
                if steps >= self.max_steps:
                    held.stop()
                    return self._ended(held, truncated=True)
                try:
                    action = Action.parse(self.fn(observation(call, attempt)))
                except Exception as e:  # noqa: BLE001 - the policy's failure is this attempt's
                    raise EpisodeFailure(
                        f"the policy raised {type(e).__name__}: {e}", "upstream"
                    ) from e
                steps += 1
                if not held.reply(call, action):
                    raise EpisodeFailure(
                        f"the policy did not answer call {call.sequence} within "
                        f"{self.policy_timeout:g} s",
                        "timeout",
                    )
            if time.monotonic() >= deadline and held.thread.is_alive():
                raise EpisodeFailure(f"the harness outlived {turn.timeout or self.timeout:g} s",
                                     "timeout")  # fmt: skip
        finally:
            held.stop()
        return self._ended(held)

    @staticmethod
    def _ended(held: HeldHarness, truncated: bool = False) -> Played:
        kind, message = held.outcome(truncated)
        if held.result is None:
            calls = held.attempt.proxy.call_count(held.attempt.key)
            return Played(None, calls, kind, message, every_turn=True)
        done = played(held.result)
        done.failure, done.message, done.every_turn = kind, message, True
        return done
