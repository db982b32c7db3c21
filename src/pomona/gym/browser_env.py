"""BrowserEnv: one step is one action in a real Chromium; the reward is the task's.

    env = gym.make("pomona/BrowserEnv-v0", benchmark="miniwob")   # or webvoyager-local, ...
    obs, info = env.reset(seed=0)            # or reset(options={"task": "miniwob/click-button"})
    obs, reward, terminated, truncated, info = env.step("Click [3]")

    # a BrowserGym agent: its observation keys and action strings
    env = gym.make("pomona/BrowserEnv-v0", task="miniwob/click-button", interface="browsergym")
    obs, reward, terminated, truncated, info = env.step('click("12")')

Two interfaces (browser_interfaces.py): `webvoyager` (set-of-marks screenshot, URL, text view,
instruction; WebVoyager's grammar) and `browsergym` (BrowserGym's observation keys with bids;
its high-level actions). A malformed action, or one that cannot be done, changes nothing and the
next observation says what was wrong. The episode terminates on an answer or when the page ends
it (MiniWoB), and is truncated after `max_steps`; either way the task's grader gives the reward.

Nothing hangs: every reset and step runs under the session's watchdog (`step_timeout`). A
browser that crashed, a page that hung, a start page that never loaded end the episode with
info["failure"] set (`sandbox`, `timeout`) and reward 0.0, which rollouts must not count as a
failed attempt; reset reports them the same way (it does not raise), and the next reset starts
afresh. Each episode of a local-site task gets a fresh sandbox (so the shop's state starts
clean); MiniWoB's pages hold no server state, so one browser serves all its episodes.
"""

from __future__ import annotations

import contextlib
import copy
from typing import Any

import gymnasium as gym
from gymnasium import spaces

from pomona.benchmarks.browser import suite
from pomona.benchmarks.task import Task
from pomona.browser_env import image as browser_image
from pomona.browser_env.chromium import ChromiumOptions
from pomona.browser_env.errors import BrowserInfraError
from pomona.browser_env.highlevel import DEFAULT_SUBSETS
from pomona.browser_env.session import BrowserSession, SessionOptions
from pomona.browser_env.tabs import Limits
from pomona.errors import PomonaError
from pomona.gym import ResetNeeded, Transition, refuse_shared_memory
from pomona.gym.browser_interfaces import (
    CHARSET,
    BrowserGymInterface,
    Outcome,
    WebVoyagerInterface,
)
from pomona.orchestrator.sdk.shared import shared_client

MINIWOB_VIEWPORT = (500, 360)
INTERFACES = ("webvoyager", "browsergym")


class BrowserEnvError(PomonaError, ValueError):
    """BrowserEnv was asked for something it does not have (a task, an interface)."""


class BrowserEnv(gym.Env[dict[str, Any], str]):
    metadata = {"render_modes": ["rgb_array"]}

    def __init__(
        self,
        benchmark: str = "miniwob",
        tasks: list[Task] | None = None,
        task: str | None = None,  # one task of the benchmark, e.g. "miniwob/click-button"
        interface: str = "webvoyager",
        runtime: str = "local",
        state_dir: str | None = None,
        viewport: tuple[int, int] | None = None,
        max_steps: int = 15,
        page_timeout: float = 30.0,
        step_timeout: float = 120.0,
        action_subsets: tuple[str, ...] = DEFAULT_SUBSETS,  # BrowserGym's, for `browsergym`
        multiaction: bool = True,
        limits: Limits | None = None,  # open tabs and downloads (tabs.py's defaults)
        image: str | None = None,  # default: the host on `local`, the browser image on docker
        render_mode: str | None = None,
    ):
        if interface not in INTERFACES:
            raise BrowserEnvError(f"no interface {interface!r}: choose {', '.join(INTERFACES)}")
        self.tasks = tasks or suite.load(benchmark)
        if task is not None:
            self.tasks = [self._named(task)]
        miniwob_only = all(suite.is_miniwob(t) for t in self.tasks)
        self.viewport = viewport or (MINIWOB_VIEWPORT if miniwob_only else (1024, 768))
        self.runtime, self.state_dir, self.max_steps = runtime, state_dir, max_steps
        self.options = SessionOptions(
            chromium=ChromiumOptions(viewport=self.viewport),
            page_timeout=page_timeout,
            step_timeout=step_timeout,
            image=image or browser_image.for_runtime(runtime),
            disk=browser_image.disk_for(runtime),
            limits=limits or Limits(),
        )
        self.render_mode = render_mode
        self.view: WebVoyagerInterface | BrowserGymInterface = (
            WebVoyagerInterface(self.viewport)
            if interface == "webvoyager"
            else BrowserGymInterface(self.viewport, tuple(action_subsets), multiaction)
        )
        self.action_space = spaces.Text(max_length=4096, min_length=1, charset=CHARSET)
        self.observation_space = self.view.observation_space
        self.session: BrowserSession | None = None
        self.task: Task | None = None
        self.instruction = ""
        self.failed: BrowserInfraError | None = None
        self.steps = 0
        self._last: dict[str, Any] | None = None

    # --- helpers -----------------------------------------------------------------------------

    def _named(self, task_id: str) -> Task:
        found = next((t for t in self.tasks if t.id == task_id), None)
        if found is None:
            raise BrowserEnvError(
                f"no task {task_id!r} in this env; it has {[t.id for t in self.tasks][:20]}..."
            )
        return found

    def _pick(self, option: Task | str | None) -> Task:
        if isinstance(option, Task):
            return option
        if isinstance(option, str):
            return self._named(option)
        return self.tasks[int(self.np_random.integers(len(self.tasks)))]

    def _session_for(self, task: Task, previous: Task | None) -> BrowserSession:
        session = self.session
        reusable = previous is not None and suite.stateless(task) and suite.stateless(previous)
        if session is not None and reusable and session.usable():
            session.new_page()
            return session
        self._release()
        client = shared_client(self.runtime, self.state_dir)
        self.session = BrowserSession(
            client, web=suite.web_for(task), options=self.options, labels={"task": task.id[:63]}
        ).start()
        return self.session

    def _info(self, **more: Any) -> dict[str, Any]:
        return {
            **self.view.info(),
            "task_id": self.task.id if self.task else "",
            "steps": self.steps,
            **more,
        }

    # --- the Gymnasium API -------------------------------------------------------------------

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        refuse_shared_memory()
        super().reset(seed=seed)
        task = self._pick((options or {}).get("task"))
        instance_seed = int(self.np_random.integers(2**31))
        previous, self.task = self.task, task
        self.steps, self.failed = 0, None
        try:
            session = self._session_for(task, previous)
            with session.limit(f"starting {task.id}"):
                self.instruction = suite.begin(session, task, instance_seed)
                self.view.begin(session, self.instruction)
                if isinstance(self.view, BrowserGymInterface):
                    self.view.answer_ends = not suite.is_miniwob(task)
                obs = self.view.observe(session)
        except BrowserInfraError as e:
            self.failed = e
            if self.session is not None and not self.session.usable():
                self._release()  # the next reset starts a new browser
            note = f"[{e.kind} failure] {e}"
            return self.view.blank(note), self._info(failure=e.kind, error=str(e))
        self._last = obs
        return obs, self._info(instruction=self.instruction)

    def step(self, action: str) -> Transition[dict[str, Any]]:
        session, task = self.session, self.task
        if self.failed is not None:
            return self._fail(self.failed)
        if session is None or task is None:
            raise ResetNeeded("call reset() before step()")
        self.steps += 1
        try:
            with session.limit(f"the step {action[:80]!r}"):
                outcome = self.view.act(session, action)
                if outcome.finished:
                    return self._finish(session, task, outcome, terminated=True)
                obs = self.view.observe(session, outcome.error)
                ended = not outcome.error and suite.ended(session, task)
        except BrowserInfraError as e:
            return self._fail(e)
        self._last = obs
        if ended:
            return self._finish(session, task, outcome, terminated=True, obs=obs)
        if self.steps >= self.max_steps:
            return self._finish(session, task, outcome, terminated=False, obs=obs)
        return obs, 0.0, False, False, self._info(error=outcome.error or None)

    def _finish(
        self,
        session: BrowserSession,
        task: Task,
        outcome: Outcome,
        terminated: bool,
        obs: dict[str, Any] | None = None,
    ) -> Transition[dict[str, Any]]:
        try:
            if obs is None:  # an answer: the page is as the agent last saw it
                obs = copy.deepcopy(self._last) if self._last else self.view.blank("")
            score = suite.grade(session, task, outcome.answer)
        except BrowserInfraError as e:
            return self._fail(e)
        except Exception as e:  # noqa: BLE001 - a broken grader is data, not a crash
            return (
                obs or self.view.blank(""),
                0.0,
                True,
                False,
                self._info(failure="verifier", error=repr(e)),
            )
        info = self._info(score=score.model_dump(), failure="none", answer=outcome.answer)
        return obs, score.reward, terminated, not terminated, info

    def _fail(self, error: BrowserInfraError) -> Transition[dict[str, Any]]:
        self.failed = error
        if self.session is not None and not self.session.usable():
            self._release()  # a browser that died is not reused; a hung page's browser is
        obs = self.view.blank(f"[{error.kind} failure] {error}")
        return obs, 0.0, True, False, self._info(failure=error.kind, error=str(error))

    def render(self) -> Any:
        return None if self._last is None else self._last["screenshot"]

    def _release(self) -> None:
        if self.session is not None:
            with contextlib.suppress(Exception):
                self.session.close()
            self.session = None

    def close(self) -> None:
        self._release()
        super().close()
