"""HarnessEnv: one episode is one run of a chosen harness with a chosen model on a task.

    env = gym.make("pomona/HarnessEnv-v0", harness="claude-code", model="oracle")
    obs, info = env.reset(options={"task": "text/replace"})    # picks the task; starts nothing
    obs, reward, terminated, truncated, info = env.step(0)     # the whole run, through the proxy

For comparing models and harnesses, and for recording trajectories from harnesses that cannot
be modified, the unit of interaction is a whole run; `reset(options={"harness", "model"})`
switches either per episode. `model` is a name in the proxy's model list, `scripted`, or
`oracle` (the scripted model replaying the task's gold solution).

Observation: {"instruction": the task's instruction, "final_answer": the harness's last message
("" before the run or when it gave none)}, printable ASCII, clipped.
Action: Discrete(1), "run".
Reward: the task's scorer; terminated after the one step. info["record"] is the episode record
(pomona.episodes.engine.EpisodeRecord, also the `episodes` row), info["calls"] the recorded calls.
An infrastructure failure gives reward 0.0 with info["failure"] set: not an attempt.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from pomona.benchmarks import builtin
from pomona.benchmarks.task import Task
from pomona.episodes import engine as ep
from pomona.gym import ResetNeeded, Transition, refuse_shared_memory
from pomona.gym.shell_env import CHARSET, MAX_TEXT, clip, printable, text_dict
from pomona.gym.tasks import pick_task
from pomona.orchestrator.sdk.shared import shared_client
from pomona.proxy.control import ProxyControl, calls_of, proxy_control
from pomona.proxy.shared import shared_proxy


class HarnessEnv(gym.Env[dict[str, str], int | np.integer[Any]]):
    metadata = {"render_modes": []}

    def __init__(
        self,
        harness: str = "pi",
        model: str = ep.ORACLE,
        dialect: str | None = None,
        task_set: str = "all",
        tasks: list[Task] | None = None,
        runtime: str = "local",
        state_dir: str | None = None,
        image: str | None = None,
        trajectories: str | None = None,
        models: str | None = None,
        proxy: ProxyControl | str | None = None,
        timeout: float = 600,
    ):
        self.tasks = tasks or builtin.tasks(task_set)
        self.harness, self.model, self.dialect = harness, model, dialect
        self.runtime, self.state_dir, self.image = runtime, state_dir, image
        self.trajectories, self.models, self._proxy = trajectories, models, proxy
        self.timeout = timeout
        text = spaces.Text(max_length=MAX_TEXT, min_length=0, charset=CHARSET)
        self.observation_space = text_dict(instruction=text, final_answer=text)
        self.action_space = spaces.Discrete(1)
        self.task: Task | None = None
        self._done = True

    def _obs(self, answer: str | None = None) -> dict[str, str]:
        assert self.task is not None
        return {
            "instruction": printable(clip(self.task.instruction, MAX_TEXT)),
            "final_answer": printable(clip(answer or "", MAX_TEXT)),
        }

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, str], dict[str, Any]]:
        refuse_shared_memory()
        super().reset(seed=seed)
        options = options or {}
        self.harness = options.get("harness", self.harness)
        self.model = options.get("model", self.model)
        self.dialect = options.get("dialect", self.dialect)
        self.task = pick_task(self.tasks, options.get("task"), self.np_random)
        ep.ensure_harness(self.harness)
        self._done = False
        return self._obs(), {"task_id": self.task.id, "harness": self.harness, "model": self.model}

    def step(self, action: int | np.integer[Any] = 0) -> Transition[dict[str, str]]:
        if self.task is None or self._done:
            raise ResetNeeded("call reset() before step()")
        self._done = True
        link = proxy_control(self._proxy or shared_proxy(self.trajectories, self.models))
        record = ep.run_episode(
            self.task,
            self.harness,
            self.model,
            proxy=link,
            client=shared_client(self.runtime, self.state_dir),
            timeout=self.timeout,
            dialect=self.dialect,
            image=self.image,
        )
        info = {
            "task_id": self.task.id,
            "failure": record.failure_kind,
            "error": record.failure_message,
            "score": record.score,
            "record": record.to_dict(),
            "calls": calls_of(link, record.episode) or [],
        }
        reward = record.reward if record.reward is not None else 0.0
        return self._obs(record.final_answer), float(reward), True, False, info
