"""ModelCallEnv: one step is one model call of an unmodified harness running in its sandbox.

    env = gym.make("pomona/ModelCallEnv-v0", harness="pi", dialect="chat")
    obs, info = env.reset(options={"task": "files/create-hello"})   # returns at the first call
                                    # (also "run", "attempt": the episode row's run id, attempt)
    obs, reward, terminated, truncated, info = env.step(
        {"tool_calls": [{"name": "bash", "arguments": {"command": "echo hello > hello.txt"}}]})
    obs, reward, terminated, truncated, info = env.step("done")     # text: the harness finishes

The harness runs in a background thread against a proxy episode served by the `policy` upstream
(pomona.proxy.policy): each main model call it makes is held, and becomes the observation; the
action is the assistant's reply, rendered into the harness's own dialect. Side calls (no tools)
are answered automatically and never become steps.

Observation (Dict of JSON text, printable ASCII, so it lives in a Gymnasium space):
  "dialect":  "chat" | "responses" | "anthropic"
  "messages": JSON list of {"role", "content", "tool_calls"?, "tool_call_id"?}  (pomona.proxy.neutral)
  "tools":    JSON list of {"name", "description", "parameters"}
After the last step both lists are "[]". The decoded forms are in info["messages"], info["tools"].

Action (Text): {"text": ..., "tool_calls": [{"name", "arguments": {...}}]} as a dict or JSON
text; any other text is the assistant's plain reply.

A multi-step task's steps follow one another in the same episode: when the harness finishes a
step, the task checks it and the harness is started again on the next step's instruction (its
calls keep coming as steps).

Reward: the task scorer's, once the harness exits (terminated) or at its first call after
`max_steps` replies (the harness is stopped there, truncated). Failures end the episode with info["failure"] set and reward 0.0,
which must not be counted as an attempt: `timeout` (the policy let a call wait longer than
`policy_timeout`, or the harness outlived `harness_timeout`), `harness` (it exited without
finishing its turn), `sandbox`, `upstream`/`proxy`, `verifier`.
"""

from __future__ import annotations

import copy
import json
import secrets
import time
from typing import Any

import gymnasium as gym
from gymnasium import spaces

from pomona.benchmarks import builtin
from pomona.benchmarks.stage import Played, SandboxStage
from pomona.benchmarks.task import Task, Turn
from pomona.episodes.agents import ensure_harness
from pomona.episodes.attempt import Attempt, RunInfo
from pomona.episodes.engine import failure_of
from pomona.episodes.policy import HeldHarness
from pomona.errors import EpisodeFailure, FailureKind, UsageError
from pomona.gym import ResetNeeded, Transition, refuse_shared_memory
from pomona.gym.shell_env import CHARSET, text_dict
from pomona.gym.tasks import pick_task
from pomona.harnesses.registry import get as get_harness
from pomona.orchestrator.sdk.client import Sandbox
from pomona.orchestrator.sdk.shared import shared_client
from pomona.proxy.control import ProxyControl, proxy_control
from pomona.proxy.neutral import Action
from pomona.proxy.policy import POLICY, HeldCall, Policy
from pomona.proxy.shared import shared_proxy

MAX_JSON = 1 << 24


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=True)  # printable ASCII: inside the Text space


class ModelCallEnv(gym.Env[dict[str, str], str]):
    metadata = {"render_modes": []}

    def __init__(
        self,
        harness: str = "pi",
        dialect: str | None = None,
        task_set: str = "all",
        tasks: list[Task] | None = None,
        runtime: str | None = "local",  # None: the service at POMONA_URL
        state_dir: str | None = None,
        image: str | None = None,
        trajectories: str | None = None,
        proxy: ProxyControl | str | None = None,
        max_steps: int = 30,
        policy_timeout: float = 300,
        harness_timeout: float = 900,
    ):
        self.tasks = tasks or builtin.tasks(task_set)
        self.harness, self.dialect = harness, dialect
        self.runtime, self.state_dir, self.image = runtime, state_dir, image
        self.trajectories, self._proxy = trajectories, proxy
        self.max_steps = max_steps
        self.policy_timeout, self.harness_timeout = policy_timeout, harness_timeout
        text = spaces.Text(max_length=MAX_JSON, min_length=0, charset=CHARSET)
        self.observation_space = text_dict(
            dialect=spaces.Text(max_length=16, min_length=0, charset=CHARSET),
            messages=text,
            tools=text,
        )
        self.action_space = spaces.Text(max_length=1 << 16, min_length=0, charset=CHARSET)
        self.task: Task | None = None
        self._attempt: Attempt | None = None  # the episode's row, from reset to its end
        self._stage: SandboxStage | None = None
        self._policy: Policy | None = None
        self._run: HeldHarness | None = None
        self._call: HeldCall | None = None
        self._ended: Transition[dict[str, str]] | None = None  # once the episode is over
        self._deadline = 0.0
        self.steps = 0

    @property
    def sandbox(self) -> Sandbox | None:
        return self._stage.sandbox if self._stage else None

    @property
    def key(self) -> str | None:
        return self._attempt.key if self._attempt else None

    # --- observations -------------------------------------------------------------------------
    def _obs(self, call: HeldCall | None) -> dict[str, str]:
        if call is None:
            return {"dialect": self._dialect_name(), "messages": "[]", "tools": "[]"}
        return {
            "dialect": call.dialect,
            "messages": _json(call.messages),
            "tools": _json(call.tools),
        }

    def _dialect_name(self) -> str:
        return self.dialect or get_harness(self.harness).dialects[0]

    def _call_info(self, call: HeldCall) -> dict[str, Any]:
        return {
            "episode": self.key,
            "task_id": self.task.id if self.task else None,
            "sequence": call.sequence,
            "stream": call.stream,
            "model": call.model,
            "messages": json.loads(_json(call.messages)),
            "tools": json.loads(_json(call.tools)),
        }

    # --- the episode ----------------------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, str], dict[str, Any]]:
        refuse_shared_memory()
        super().reset(seed=seed)
        self._abandon()
        options = options or {}
        self.harness = options.get("harness", self.harness)
        self.dialect = options.get("dialect", self.dialect)
        self.task = pick_task(self.tasks, options.get("task"), self.np_random)
        h = ensure_harness(self.harness)
        control = proxy_control(self._proxy or shared_proxy(self.trajectories))
        if not control.holds_calls:
            raise UsageError(
                "ModelCallEnv holds calls in-process: give it a ProxyServer, not a URL"
            )
        self._policy = Policy(timeout=self.policy_timeout)
        run = RunInfo(options.get("run") or secrets.token_hex(4))
        attempt = Attempt(
            self.task, h.name, h.version, POLICY, control, run, options.get("attempt", 0)
        )
        self._attempt, self.steps, self._ended, self._call = attempt, 0, None, None
        attempt.open(POLICY, policy=self._policy)
        self._deadline = time.monotonic() + self.harness_timeout
        self._stage = SandboxStage(
            self.task,
            shared_client(self.runtime, self.state_dir),
            control,
            image=self.image,
            ttl=self.harness_timeout + 600,
        )
        try:
            self._stage.start()
        except Exception as e:  # noqa: BLE001 - the episode ends at once, typed
            self._ended = self._end(*failure_of(e))
            return self._obs(None), {**copy.deepcopy(self._ended[4]), "done": True}
        turn = Turn(self.task.instruction, self.harness_timeout)
        self._run = HeldHarness(
            attempt, self._stage, h, self._policy, turn,
            dialect=self.dialect, timeout=self.harness_timeout, follow=True,
        )  # fmt: skip
        obs, _, _, _, info = self._next()
        return obs, info if self._ended is None else {**info, "done": True}

    def step(self, action: Action | dict[str, Any] | str) -> Transition[dict[str, str]]:
        if self._ended is not None:  # stepping past the end repeats the end
            return copy.deepcopy(self._ended)
        if self._call is None or self._run is None:
            raise ResetNeeded("call reset() before step()")
        parsed = Action.parse(action)  # a malformed action is the caller's error: raise
        call, self._call = self._call, None
        self.steps += 1
        if not self._run.reply(call, parsed):
            return self._finish(
                "timeout",
                f"the policy did not answer call {call.sequence} within {self.policy_timeout:g} s",
            )
        return self._next()

    def _next(self) -> Transition[dict[str, str]]:
        """Wait for the harness's next model call, or its end. The last reply the step budget
        allows still takes effect: the harness is stopped only at the call after it."""
        assert self._run is not None
        try:
            call = self._run.next_call(self._deadline)
        except TimeoutError:
            call = None
            self._ended = self._finish(
                "timeout", f"the harness outlived {self.harness_timeout:g} s"
            )
        if call is not None and self.steps >= self.max_steps:
            return copy.deepcopy(self._finish(truncated=True))
        if call is not None:
            self._call = call
            return self._obs(call), 0.0, False, False, self._call_info(call)
        return copy.deepcopy(self._ended or self._finish())

    def _finish(
        self, kind: FailureKind | None = None, message: str | None = None, truncated: bool = False
    ) -> Transition[dict[str, str]]:
        """Stop the harness, judge and score the episode, write its row, free the sandbox."""
        if self._run is not None:
            self._run.stop()
            if kind is None:
                kind, message = self._run.outcome(truncated)
        self._ended = self._end(kind or "none", message, truncated)
        return self._ended

    def _end(
        self, kind: FailureKind, message: str | None, truncated: bool = False
    ) -> Transition[dict[str, str]]:
        attempt, stage = self._attempt, self._stage
        assert self.task is not None and attempt is not None and stage is not None
        record = attempt.record
        attempt.fail(kind, message)
        result = self._run.result if self._run else None
        if result is not None:
            record.final_answer, record.calls = result.final_answer, result.calls
            attempt.keep(result.artifacts)
        if attempt.ran and stage.sandbox is not None:
            played = Played(record.final_answer, record.calls, result=result)
            try:
                verdict = stage.score(played, attempt.key)
                record.reward, record.resolved = verdict.reward, verdict.resolved
                record.score = verdict.model_dump()
            except EpisodeFailure as e:
                attempt.fail(e.kind, str(e))
        stage.close()
        attempt.close()
        info = {
            "episode": attempt.key,
            "task_id": self.task.id,
            "failure": record.failure_kind,
            "error": record.failure_message,
            "score": record.score,
            "steps": self.steps,
            "record": record.to_dict(),
        }
        reward = record.reward if record.reward is not None else 0.0
        return self._obs(None), float(reward), not truncated, truncated, info

    def _abandon(self) -> None:
        """A reset or close mid-episode: stop the harness, record the episode as unscored."""
        if self._ended is None and self._attempt is not None:
            if self._run is not None:
                self._run.stop(keep=False)
            self._attempt.fail("none", "abandoned: reset or closed before the end")
            self._attempt.close()
        if self._stage is not None:
            self._stage.close()
        self._attempt, self._stage, self._run, self._call = None, None, None, None

    def close(self) -> None:
        self._abandon()
        self._ended = None
        super().close()
