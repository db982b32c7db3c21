"""A browser task's stage (pomona.benchmarks.stage.Stage): a fresh browser sandbox serving the
task's web, the start page open (for MiniWoB, the instance drawn with the attempt's seed), and
the verdict: the task's state-log oracle or page reward and, when the run names a judge model,
the benchmark's own judge on the trajectory, with its calls recorded as their own episode.
Results are also written in the official layouts under the run's results directory.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pomona.benchmarks.browser import judges, layouts, official, suite
from pomona.benchmarks.browser import loop as webvoyager
from pomona.benchmarks.stage import Played, sandbox_lost
from pomona.benchmarks.task import Score, Task, Turn, VerifierError
from pomona.browser_env.session import BrowserSession, SessionOptions
from pomona.harnesses.base import API_KEY
from pomona.orchestrator.sdk.client import Sandbox, SandboxClient
from pomona.proxy.control import ProxyControl


@dataclass(frozen=True)
class Judging:
    """How a run's browser attempts are judged besides their oracle: the judge's model (None:
    the oracle only), its prompts, and where the official layouts and judgments go."""

    model: str | None = None
    prompts: dict[str, str] = field(default_factory=lambda: dict(judges.PROMPTS))
    results: Path | None = None


@dataclass(frozen=True)
class JudgeChat:
    """A judge's chat function, over its own recorded proxy episode (`key`)."""

    base_url: str
    model: str
    key: str

    def __call__(self, messages: list[dict[str, Any]], **params: Any) -> str:
        return webvoyager.chat(self.base_url, self.model, messages, **params)


def judge_chat(
    proxy: ProxyControl, task: Task, run_id: str, agent_key: str, judge: str, model: str
) -> JudgeChat:
    """The chat of one judge of one trajectory, recorded as its own proxy episode."""
    ep = proxy.open_episode(
        model=model,
        metadata={
            "run": run_id,
            "benchmark": task.benchmark,
            "task": task.id,
            "role": "judge",
            "judge": judge,
            "judged_episode": agent_key,
        },
    )
    return JudgeChat(ep["base_url"], model, ep["key"])


def write_layouts(results: Path | None, task: Task, steps: webvoyager.AgentResult) -> None:
    if results is None or "webvoyager" not in task.metadata:
        return
    layouts.write_webvoyager(results / "webvoyager", task.id, steps.messages, steps.screenshots)
    layouts.write_mind2web(
        results / "mind2web",
        task.metadata["mind2web"],
        steps.steps,
        steps.screenshots,
        steps.answer,
    )


@dataclass
class BrowserStage:
    """The browser stage of one attempt (`seed`: its number, which draws MiniWoB's instance)."""

    task: Task
    client: SandboxClient
    proxy: ProxyControl
    run_id: str
    seed: int = 0
    options: SessionOptions = field(default_factory=SessionOptions)
    judging: Judging = field(default_factory=Judging)
    session: BrowserSession | None = None
    _instruction: str = ""

    @property
    def sandbox(self) -> Sandbox | None:
        return self.session.sandbox if self.session else None

    @property
    def instruction(self) -> str:
        return self._instruction

    def start(self) -> None:
        self.session = BrowserSession(
            self.client,
            web=suite.web_for(self.task),
            options=self.options,
            labels={"run": self.run_id, "task": self.task.id[:63]},
        )
        self.session.start()
        self._instruction = suite.begin(self.session, self.task, seed=self.seed)

    def next_turn(self) -> Turn | None:
        return None

    def ended(self) -> bool:
        """Whether the page itself ended the episode (MiniWoB does; the sites await an answer)."""
        return self.session is not None and suite.ended(self.session, self.task)

    def score(self, played: Played, key: str) -> Score:
        assert self.session is not None
        if self.task.metadata.get("official"):
            return self._official(played, key)
        score = suite.grade(self.session, self.task, played.answer)
        details = dict(score.details)
        judge = judges.JUDGE_OF.get(self.task.benchmark)
        if self.judging.model and judge and played.steps is not None:
            chat = judge_chat(self.proxy, self.task, self.run_id, key, judge, self.judging.model)
            steps = played.steps
            verdict = judges.run_judge(
                self.task.benchmark,
                chat,
                self.task,
                played.answer,
                steps.steps,
                steps.screenshots,
                self.judging.prompts,
            )
            details["judge"] = {**(verdict or {}), "episode": chat.key}
        if played.steps is not None:
            write_layouts(self.judging.results, self.task, played.steps)
        return Score(reward=score.reward, resolved=score.resolved, details=details)

    def _official(self, played: Played, key: str) -> Score:
        """An official set's verdict: its own judge code from the checkout, over the trajectory
        written in its layout, through a recorded proxy episode of its own."""
        task, results = self.task, self.judging.results
        if not self.judging.model or results is None or played.steps is None:
            raise VerifierError(f"{task.benchmark} is graded by its own judge only: name --judge M")
        write_layouts(results, task, played.steps)
        chat = judge_chat(self.proxy, task, self.run_id, key, "webvoyager-official",
                          self.judging.model)  # fmt: skip
        client = official.JudgeClient(chat.base_url, API_KEY)
        folder = results / "webvoyager" / f"task{task.id}"
        verdict = official.judge_webvoyager_layout(task.metadata["checkout"], folder, client,
                                                   chat.model)  # fmt: skip
        if verdict["label"] is None:
            raise VerifierError(
                f"the judge gave no verdict (neither SUCCESS nor NOT SUCCESS) for {task.id}"
            )
        label = int(verdict["label"])
        return Score(reward=float(label), resolved=label == 1,
                     details={"judge": {**verdict, "episode": chat.key}})  # fmt: skip

    def lost(self) -> bool:
        return sandbox_lost(self.sandbox)

    def close(self) -> None:
        if self.session is not None:
            self.session.close()
