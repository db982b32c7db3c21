"""ShellEnv: one step is one shell command in a sandbox; the reward is the task's scorer.

    env = gym.make("pomona/ShellEnv-v0", task_set="text")
    obs, info = env.reset(seed=0)            # or reset(options={"task": "text/replace"})
    obs, reward, terminated, truncated, info = env.step("sed -i s/foo/bar/g config.ini")
    obs, reward, terminated, truncated, info = env.step("submit")

Observation: {"output": stdout then stderr of the command, clipped to `output_chars` (head and
tail kept) and limited to printable ASCII (the exact text is in info["output"]), "exit_code"}.
After reset the output is the task's instruction. The episode terminates when the action is
"submit" and is truncated when `max_steps` commands have run; either way the scorer runs (a
multi-step task answers a "submit" with its next step's instruction until its last step). An
infrastructure failure (sandbox lost, scorer crashed) ends the episode with info["failure"]
set to its kind and reward 0.0, which rollouts must not count as a failed attempt.
"""

from __future__ import annotations

import contextlib
import string
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from pomona.benchmarks import builtin
from pomona.benchmarks.task import Task
from pomona.errors import SandboxError
from pomona.gym import ResetNeeded, Transition, refuse_shared_memory
from pomona.orchestrator.sdk.client import Sandbox
from pomona.orchestrator.sdk.shared import shared_client

SUBMIT = "submit"
CHARSET = string.printable  # ASCII letters, digits, punctuation and whitespace
MAX_TEXT = 20_000


def printable(text: str) -> str:
    return "".join(c if c in CHARSET else "?" for c in text)


def clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    half = (limit - 40) // 2
    return f"{text[:half]}\n[... {len(text) - 2 * half} characters cut ...]\n{text[-half:]}"


def text_dict(**fields: spaces.Space[str]) -> spaces.Space[dict[str, str]]:
    """A Dict space of Text spaces, typed as the dicts of strings its elements are."""
    # gymnasium types every Dict space as Space[dict[str, Space]], the spaces, not their values
    return spaces.Dict(fields)  # type: ignore[return-value]


class ShellEnv(gym.Env[dict[str, Any], str]):
    metadata = {"render_modes": []}

    def __init__(
        self,
        task_set: str = "all",
        tasks: list[Task] | None = None,
        runtime: str = "local",
        state_dir: str | None = None,
        image: str | None = None,
        network: str = "none",
        max_steps: int = 30,
        step_timeout: float = 60,
        output_chars: int = 10_000,
    ):
        self.tasks = tasks or builtin.tasks(task_set)
        self.runtime, self.state_dir, self.image, self.network = runtime, state_dir, image, network
        self.max_steps, self.step_timeout = max_steps, step_timeout
        self.output_chars = min(output_chars, MAX_TEXT)
        self.action_space = spaces.Text(max_length=4096, min_length=1, charset=CHARSET)
        self.observation_space = spaces.Dict(
            {
                "output": spaces.Text(max_length=MAX_TEXT, min_length=0, charset=CHARSET),
                "exit_code": spaces.Box(low=-256, high=255, shape=(), dtype=np.int64),
            }
        )
        self.task: Task | None = None
        self.sandbox: Sandbox | None = None
        self.steps = 0

    def _obs(self, output: str, exit_code: int) -> dict[str, Any]:
        return {
            "output": printable(clip(output, self.output_chars)),
            "exit_code": np.array(exit_code, dtype=np.int64),
        }

    def _pick(self, option: Task | str | None) -> Task:
        if isinstance(option, Task):
            return option
        if isinstance(option, str):
            return next((t for t in self.tasks if t.id == option), None) or builtin.get(option)
        return self.tasks[int(self.np_random.integers(len(self.tasks)))]

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        refuse_shared_memory()
        super().reset(seed=seed)
        self._release()
        task = self.task = self._pick((options or {}).get("task"))
        client = shared_client(self.runtime, self.state_dir)
        env = task.environment
        self.sandbox = client.create_sandbox(
            self.image or env.image,
            network=self.network,
            workdir=env.workdir,
            user=env.user,
            env=env.env,
            labels={"task": task.id[:63]},
        )
        task.prepare(self.sandbox)
        self.steps = 0
        return self._obs(task.instruction, 0), {"task_id": task.id, "instruction": task.instruction}

    def step(self, action: str) -> Transition[dict[str, Any]]:
        task, sandbox = self.task, self.sandbox
        if sandbox is None or task is None:
            raise ResetNeeded("call reset() before step()")
        if action.strip() == SUBMIT:
            try:  # a multi-step task checks the step and gives the next one
                turn = task.next_turn(sandbox)
            except SandboxError as e:
                return self._fail("sandbox", str(e))
            except Exception as e:  # noqa: BLE001 - a broken step check is data, not a crash
                return self._fail("verifier", repr(e))
            if turn is not None:
                return (
                    self._obs(turn.instruction, 0),
                    0.0,
                    False,
                    False,
                    {"output": "", "instruction": turn.instruction},
                )
            return self._finish(
                task, sandbox, self._obs("submitted", 0), terminated=True, info={"output": ""}
            )
        self.steps += 1
        try:
            result = sandbox.exec(action, timeout=self.step_timeout)
        except SandboxError as e:
            return self._fail("sandbox", str(e))
        output = result.stdout + result.stderr
        if result.timed_out:
            output += f"\n[command timed out after {self.step_timeout:g} s]"
        info = {"output": output, "exit_code": result.exit_code, "timed_out": result.timed_out}
        obs = self._obs(output, result.exit_code)
        if self.steps >= self.max_steps:
            return self._finish(task, sandbox, obs, terminated=False, info=info)
        return obs, 0.0, False, False, info

    def _finish(
        self,
        task: Task,
        sandbox: Sandbox,
        obs: dict[str, Any],
        terminated: bool,
        info: dict[str, Any],
    ) -> Transition[dict[str, Any]]:
        try:
            score = task.evaluate(sandbox)
        except Exception as e:  # noqa: BLE001 - a broken verifier is data, not a crash
            return self._fail("verifier", repr(e))
        info.update(score=score.model_dump(), failure="none", steps=self.steps)
        return obs, score.reward, terminated, not terminated, info

    def _fail(self, kind: str, message: str) -> Transition[dict[str, Any]]:
        obs = self._obs(f"[{kind} failure] {message}", -1)
        return obs, 0.0, True, False, {"failure": kind, "error": message, "steps": self.steps}

    def _release(self) -> None:
        if self.sandbox is not None:
            with contextlib.suppress(SandboxError):
                self.sandbox.delete()
            self.sandbox = None

    def close(self) -> None:
        self._release()
        super().close()
