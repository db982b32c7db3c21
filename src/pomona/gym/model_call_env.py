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

import contextlib
import copy
import json
import secrets
import threading
import time
from typing import Any

import gymnasium as gym
from gymnasium import spaces

from pomona.benchmarks import builtin
from pomona.benchmarks.task import Task, Turn
from pomona.gym import Transition
from pomona.gym import episode as ep
from pomona.gym.proxies import shared_proxy
from pomona.gym.sandboxes import shared_client
from pomona.gym.shell_env import CHARSET, text_dict
from pomona.harnesses.proxy_link import ProxyLink
from pomona.harnesses.runner import HarnessResult, run
from pomona.orchestrator.sdk.client import Sandbox
from pomona.proxy.neutral import Action
from pomona.proxy.policy import POLICY, CallExpired, HeldCall, Policy

MAX_JSON = 1 << 24
_KILL_HARNESS = (
    "for p in /proc/[0-9]*; do grep -qzE '^POMONA_RUN=' \"$p/environ\" 2>/dev/null && "
    'kill -9 "${p#/proc/}" 2>/dev/null; done; true'
)


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=True)  # printable ASCII: inside the Text space


class _HarnessRun:
    """A harness run in a background thread (a multi-step task's steps, one run each, in turn);
    the policy is closed when it ends, so a step waiting for the next call wakes up."""

    def __init__(self, policy: Policy, task: Task, **kwargs: Any):
        self.policy = policy
        self.result: HarnessResult | None = None
        self.error: BaseException | None = None
        self.failure: tuple[str, str | None] | None = None  # the task could not go on
        self.thread = threading.Thread(
            target=self._main,
            args=(task,),
            kwargs=kwargs,
            daemon=True,
            name="pomona-model-call-env",
        )
        self.thread.start()

    def _main(self, task: Task, task_prompt: str, timeout: float, **kwargs: Any) -> None:
        try:
            turn: Turn | None = Turn(task_prompt, timeout)
            while turn is not None and not self.policy.closed:
                self.result = run(
                    task_prompt=turn.instruction, timeout=turn.timeout or timeout, **kwargs
                )
                if not self.result.ok:
                    break
                turn, kind, message = ep.next_turn(task, kwargs["sandbox"])
                if kind != "none":
                    self.failure = (kind, message)
        except BaseException as e:  # noqa: BLE001 - reported as the episode's failure
            self.error = e
        finally:
            self.policy.close()

    def stop(self, sandbox: Sandbox | None, keep: bool = True) -> None:
        """Stop the harness now and wait for its thread. With `keep` the sandbox survives (to be
        scored): the kill goes through a terminal session, because execs on one sandbox run one
        at a time and the harness's own exec holds the turn."""
        self.policy.close()
        if self.thread.is_alive() and sandbox is not None:
            try:
                if not keep:
                    raise RuntimeError("no need to keep the sandbox")
                with sandbox.pty(["sh", "-c", _KILL_HARNESS]) as term:
                    term.wait(30)
            except Exception:  # noqa: BLE001 - deleting the sandbox ends the run anyway
                ep.delete_sandbox(sandbox)
        self.thread.join(60)


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
        proxy: Any = None,
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
        self.sandbox: Sandbox | None = None
        self.link: ProxyLink | None = None
        self.key: str | None = None
        self._policy: Policy | None = None
        self._run: _HarnessRun | None = None
        self._call: HeldCall | None = None
        self._answered: tuple[HeldCall, Action] | None = None  # the last call and our reply to it
        self._ended: Transition[dict[str, str]] | None = None  # once the episode is over
        self._deadline = 0.0
        self.steps = 0

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
        h = ep.get_harness(self.harness)
        return self.dialect or h.dialects[0]

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
        super().reset(seed=seed)
        self._abandon()
        options = options or {}
        self.harness = options.get("harness", self.harness)
        self.dialect = options.get("dialect", self.dialect)
        self.task = ep.pick_task(self.tasks, options.get("task"), self.np_random)
        h = ep.ensure_harness(self.harness)
        self.link = ProxyLink.of(self._proxy or shared_proxy(self.trajectories))
        if self.link.server is None:
            raise ValueError(
                "ModelCallEnv holds calls in-process: give it a ProxyServer, not a URL"
            )
        self._policy = Policy(timeout=self.policy_timeout)
        attempt = {"attempt": options["attempt"]} if "attempt" in options else {}
        opened = ep.open_episode(
            self.link,
            self.task,
            h,
            POLICY,
            options.get("run") or secrets.token_hex(4),
            policy=self._policy,
            metadata=attempt,
        )
        self.key, self.steps, self._ended, self._call = opened["key"], 0, None, None
        self._deadline = time.monotonic() + self.harness_timeout
        try:
            self.sandbox = ep.start_sandbox(
                shared_client(self.runtime, self.state_dir),
                self.task,
                self.link,
                image=self.image,
                ttl=self.harness_timeout + 600,
            )
        except Exception as e:  # noqa: BLE001 - the episode ends at once, typed
            self._ended = self._end(*ep.failure_of(e))
            return self._obs(None), {**copy.deepcopy(self._ended[4]), "done": True}
        self._run = _HarnessRun(
            self._policy,
            self.task,
            harness=h,
            task_prompt=self.task.instruction,
            sandbox=self.sandbox,
            model=POLICY,
            proxy=self.link,
            timeout=self.harness_timeout,
            dialect=self.dialect,
            episode=opened,
            close=False,
        )
        obs, _, _, _, info = self._next()
        return obs, info if self._ended is None else {**info, "done": True}

    def step(self, action: Action | dict[str, Any] | str) -> Transition[dict[str, str]]:
        if self._ended is not None:  # stepping past the end repeats the end
            return copy.deepcopy(self._ended)
        if self._call is None or self._policy is None:
            raise RuntimeError("call reset() before step()")
        parsed = Action.parse(action)  # a malformed action is the caller's error: raise
        call, self._call = self._call, None
        self.steps += 1
        self._answered = (call, parsed)
        try:
            self._policy.reply(call, parsed)
        except CallExpired:
            if call.sequence in self._policy.expired:
                return self._finish(
                    "timeout",
                    f"the policy did not answer call {call.sequence} "
                    f"within {self.policy_timeout:g} s",
                )
            # the harness ended while the call was held: its end is the episode's end
        return self._next()

    def _next(self) -> Transition[dict[str, str]]:
        """Wait for the harness's next model call, or its end. The last reply the step budget
        allows still takes effect: the harness is stopped only at the call after it."""
        assert self._policy is not None
        while True:
            try:
                call = self._policy.next_call(timeout=max(0.0, self._deadline - time.monotonic()))
            except TimeoutError:
                call = None
                self._ended = self._finish(
                    "timeout", f"the harness outlived {self.harness_timeout:g} s"
                )
            if call is None or self._answered is None or not self._is_retry(call, self._answered):
                break
            # the harness gave up waiting for our answer and asked again: the same answer
            with contextlib.suppress(CallExpired):
                self._policy.reply(call, self._answered[1])
        if call is not None and self.steps >= self.max_steps:
            return copy.deepcopy(self._finish(truncated=True))
        if call is not None:
            self._call = call
            return self._obs(call), 0.0, False, False, self._call_info(call)
        return copy.deepcopy(self._ended or self._finish())

    @staticmethod
    def _is_retry(call: HeldCall, answered: tuple[HeldCall, Action]) -> bool:
        """A call that repeats the one just answered (a client retry after its own timeout), not
        the next turn: same conversation, nothing added. Counting it as a turn would stop a
        harness at its step budget before the last reply took effect."""
        previous = answered[0]
        return call.messages == previous.messages and call.tools == previous.tools

    def _finish(
        self, kind: str | None = None, message: str | None = None, truncated: bool = False
    ) -> Transition[dict[str, str]]:
        """Stop the harness, judge and score the episode, write its row, free the sandbox."""
        if self._run is not None:
            self._run.stop(self.sandbox)
        if kind is None and self._run is not None:
            if self._run.error is not None:
                kind, message = ep.failure_of(self._run.error, self.sandbox)
            elif self._run.failure is not None:
                kind, message = self._run.failure
            elif truncated:
                kind = "none"
            else:
                result = self._run.result
                assert result is not None
                kind, message = result.failure_kind, result.failure_message
                if kind != "none" and ep.sandbox_lost(self.sandbox):
                    kind = "sandbox"
                if self._policy is not None and self._policy.expired and kind == "upstream":
                    kind, message = "timeout", "the policy let a model call time out"
        self._ended = self._end(kind or "none", message, truncated)
        return self._ended

    def _end(
        self, kind: str, message: str | None, truncated: bool = False
    ) -> Transition[dict[str, str]]:
        assert self.task is not None and self.link is not None and self.key is not None
        record = ep.EpisodeRecord(
            self.key,
            self.task.id,
            self.task.benchmark,
            ep.get_harness(self.harness).name,
            POLICY,
            failure_kind=kind,
            failure_message=message,
        )
        result = self._run.result if self._run else None
        if result is not None:
            record.final_answer, record.calls = result.final_answer, result.calls
            record.artifacts = ep.save_artifacts(self.link, self.key, result.artifacts)
        if record.ran and self.sandbox is not None:
            verdict, record.failure_kind, record.failure_message = ep.score(self.task, self.sandbox)
            if verdict is not None:
                record.reward, record.resolved, record.score = (
                    verdict.reward,
                    verdict.resolved,
                    verdict.model_dump(),
                )
        ep.close_episode(self.link, record)
        ep.delete_sandbox(self.sandbox)
        self.sandbox = None
        info = {
            "episode": self.key,
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
        if self._ended is None and self.key is not None and self.link is not None:
            if self._run is not None:
                self._run.stop(self.sandbox, keep=False)
            self.link.close_episode(
                self.key,
                failure_kind="none",
                failure_message="abandoned: reset or closed before the end",
            )
            self.key = None
        ep.delete_sandbox(self.sandbox)
        self.sandbox, self._run, self._call, self._answered = None, None, None, None

    def close(self) -> None:
        self._abandon()
        self._ended = None
        super().close()
