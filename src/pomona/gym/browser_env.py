"""BrowserEnv: one step is one WebVoyager action in a real Chromium; the reward is the task's.

    env = gym.make("pomona/BrowserEnv-v0", benchmark="miniwob")   # or webvoyager-local, ...
    obs, info = env.reset(seed=0)            # or reset(options={"task": "miniwob/click-button"})
    obs, reward, terminated, truncated, info = env.step("Click [3]")

Observation: {"screenshot": (H, W, 3) uint8 with set-of-marks labels, "url", "text": one line per
numbered element (`[3]: <button> "Search";`), "instruction"}. Text is limited to printable ASCII
(the exact strings are in info). Actions: WebVoyager's grammar (pomona.browser_env.actions); a
malformed one, or one naming no element, changes nothing and the next observation's text starts
with what was wrong. The episode terminates on `ANSWER; ...` or when the page ends it (MiniWoB),
and is truncated after `max_steps`; either way the task's grader gives the reward. A crashed
browser or hung page ends the episode with info["failure"] set (`sandbox`, `timeout`) and reward
0.0, which rollouts must not count as a failed attempt.

Each episode of a local-site task gets a fresh sandbox (so the shop's state starts clean);
MiniWoB's pages hold no server state, so one browser serves all its episodes.
"""

from __future__ import annotations

import contextlib
import string
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from pomona.benchmarks.browser import suite
from pomona.benchmarks.task import Task
from pomona.browser_env import actions
from pomona.browser_env import image as browser_image
from pomona.browser_env.chromium import ChromiumOptions
from pomona.browser_env.errors import ActionError, BrowserInfraError, NavigationFailed
from pomona.browser_env.session import BrowserSession, Observation, SessionOptions
from pomona.gym import Transition
from pomona.gym.sandboxes import shared_client

CHARSET = string.printable
MAX_TEXT = 20_000
MINIWOB_VIEWPORT = (500, 360)


def printable(text: str, limit: int = MAX_TEXT) -> str:
    return "".join(c if c in CHARSET else "?" for c in text)[:limit]


class BrowserEnv(gym.Env[dict[str, Any], str]):
    metadata = {"render_modes": ["rgb_array"]}

    def __init__(
        self,
        benchmark: str = "miniwob",
        tasks: list[Task] | None = None,
        runtime: str = "local",
        state_dir: str | None = None,
        viewport: tuple[int, int] | None = None,
        max_steps: int = 15,
        page_timeout: float = 30.0,
        image: str | None = None,  # default: the host on `local`, the browser image on docker
        render_mode: str | None = None,
    ):
        self.tasks = tasks or suite.load(benchmark)
        miniwob_only = all(suite.is_miniwob(t) for t in self.tasks)
        self.viewport = viewport or (MINIWOB_VIEWPORT if miniwob_only else (1024, 768))
        self.runtime, self.state_dir, self.max_steps = runtime, state_dir, max_steps
        self.options = SessionOptions(
            chromium=ChromiumOptions(viewport=self.viewport),
            page_timeout=page_timeout,
            image=image or browser_image.for_runtime(runtime),
        )
        self.render_mode = render_mode
        width, height = self.viewport
        self.action_space = spaces.Text(max_length=4096, min_length=1, charset=CHARSET)
        self.observation_space = spaces.Dict({
            "screenshot": spaces.Box(0, 255, (height, width, 3), np.uint8),
            "url": spaces.Text(max_length=2048, min_length=0, charset=CHARSET),
            "text": spaces.Text(max_length=MAX_TEXT, min_length=0, charset=CHARSET),
            "instruction": spaces.Text(max_length=4096, min_length=0, charset=CHARSET),
        })  # fmt: skip
        self.session: BrowserSession | None = None
        self.task: Task | None = None
        self.instruction = ""
        self.last: Observation | None = None
        self.steps = 0

    # --- helpers -----------------------------------------------------------------------------

    def _pick(self, option: Task | str | None) -> Task:
        if isinstance(option, Task):
            return option
        if isinstance(option, str):
            found = next((t for t in self.tasks if t.id == option), None)
            if found is None:
                raise KeyError(
                    f"no task {option!r} in this env; it has {[t.id for t in self.tasks]}"
                )
            return found
        return self.tasks[int(self.np_random.integers(len(self.tasks)))]

    def _session_for(self, task: Task) -> BrowserSession:
        session, previous = self.session, self.task
        reusable = previous is not None and suite.is_miniwob(task) and suite.is_miniwob(previous)
        if session is not None and reusable:
            session.new_page()
            return session
        self._release()
        client = shared_client(self.runtime, self.state_dir)
        self.session = BrowserSession(
            client, web=suite.web_for(task), options=self.options, labels={"task": task.id[:63]}
        ).start()
        return self.session

    def _obs(self, observation: Observation, note: str = "") -> dict[str, Any]:
        pixels = observation.pixels()
        height, width = self.viewport[1], self.viewport[0]
        if pixels.shape != (height, width, 3):  # a page can resize nothing, but be exact anyway
            canvas = np.zeros((height, width, 3), np.uint8)
            h, w = min(height, pixels.shape[0]), min(width, pixels.shape[1])
            canvas[:h, :w] = pixels[:h, :w]
            pixels = canvas
        text = (note + "\n" if note else "") + observation.text
        return {
            "screenshot": pixels,
            "url": printable(observation.url, 2048),
            "text": printable(text),
            "instruction": printable(self.instruction, 4096),
        }

    def _blank(self, note: str) -> dict[str, Any]:
        width, height = self.viewport
        return {
            "screenshot": np.zeros((height, width, 3), np.uint8),
            "url": "",
            "text": printable(note),
            "instruction": printable(self.instruction, 4096),
        }

    # --- the Gymnasium API -------------------------------------------------------------------

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        super().reset(seed=seed)
        task = self._pick((options or {}).get("task"))
        instance_seed = int(self.np_random.integers(2**31))
        session = self._session_for(task)
        self.task, self.steps = task, 0
        self.instruction = suite.begin(session, task, instance_seed)
        self.last = session.observe()
        info = {
            "task_id": task.id,
            "instruction": self.instruction,
            "url": self.last.url,
            "marks": self.last.marks,
        }
        return self._obs(self.last), info

    def step(self, action: str) -> Transition[dict[str, Any]]:
        session, task = self.session, self.task
        if session is None or task is None or self.last is None:
            raise RuntimeError("call reset() before step()")
        self.steps += 1
        try:
            try:
                parsed = actions.parse(action)
                if parsed.kind == "answer":
                    return self._finish(
                        session, task, self._obs(self.last), parsed.text, terminated=True
                    )
                session.act(parsed, self.last.marks)
                note = ""
            except NavigationFailed as e:  # carried out; the page is the browser's error page
                note = f"[navigation error] {e}"
            except ActionError as e:
                parsed, note = None, f"[invalid action] {e}"
            self.last = session.observe()
            obs = self._obs(self.last, note)
            if parsed is not None and suite.ended(session, task):
                return self._finish(session, task, obs, None, terminated=True)
        except BrowserInfraError as e:
            return self._fail(e)
        if self.steps >= self.max_steps:
            return self._finish(session, task, obs, None, terminated=False)
        info = {"url": self.last.url, "marks": self.last.marks, "error": note or None}
        return obs, 0.0, False, False, info

    def _finish(
        self,
        session: BrowserSession,
        task: Task,
        obs: dict[str, Any],
        answer: str | None,
        terminated: bool,
    ) -> Transition[dict[str, Any]]:
        try:
            score = suite.grade(session, task, answer)
        except BrowserInfraError as e:
            return self._fail(e)
        except Exception as e:  # noqa: BLE001 - a broken grader is data, not a crash
            return (
                obs,
                0.0,
                True,
                False,
                {"failure": "verifier", "error": repr(e), "steps": self.steps},
            )
        info = {
            "score": score.model_dump(),
            "failure": "none",
            "steps": self.steps,
            "answer": answer,
        }
        return obs, score.reward, terminated, not terminated, info

    def _fail(self, error: BrowserInfraError) -> Transition[dict[str, Any]]:
        self._release()  # a crashed or hung browser is not reused
        obs = self._blank(f"[{error.kind} failure] {error}")
        return (
            obs,
            0.0,
            True,
            False,
            {"failure": error.kind, "error": str(error), "steps": self.steps},
        )

    def render(self) -> np.ndarray | None:
        return None if self.last is None else self.last.pixels()

    def _release(self) -> None:
        if self.session is not None:
            with contextlib.suppress(Exception):
                self.session.close()
            self.session = None

    def close(self) -> None:
        self._release()
        super().close()
