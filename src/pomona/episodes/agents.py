"""Who plays an episode. An Agent picks the stage it plays on (the task's sandbox, or a browser)
and plays one turn of the task there, its model calls going through the attempt's proxy episode.

    CliHarness         a real, unmodified agent CLI in the task's sandbox (pi, claude-code, ...)
    InProcessPolicy    the same, with every model call it makes answered by a Python function
                       (pomona.episodes.policy)
    BuiltinWebVoyager  the WebVoyager loop driving a browser directly (the browser benchmarks')
    BrowsingHarness    an agent CLI in the browser's sandbox, browsing through its MCP tools

`agent_for(name, model, browser=...)` gives the agent `pomona run --harness NAME` means. A new
kind of agent is a class with `name`, `version`, `model`, `stage` and `play` (docs/extending.md).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from pomona.benchmarks.browser import layouts, official, scripts, suite
from pomona.benchmarks.browser import loop as webvoyager
from pomona.benchmarks.browser.stage import BrowserStage, Judging
from pomona.benchmarks.stage import Played, SandboxStage, Stage
from pomona.benchmarks.task import Task, Turn
from pomona.browser_env import image as browser_image
from pomona.browser_env.bridge import PYTHON_HARNESS, McpBridge
from pomona.browser_env.session import SessionOptions
from pomona.episodes.attempt import Attempt
from pomona.errors import EpisodeFailure, UsageError
from pomona.harnesses import payload
from pomona.harnesses.base import Harness
from pomona.harnesses.registry import get as get_harness
from pomona.harnesses.runner import HarnessResult, run, tools_mount
from pomona.orchestrator.sdk.client import SandboxClient
from pomona.proxy.control import ProxyControl, gateway

ORACLE = "oracle"  # the scripted model replaying the task's gold solution
SCRIPTED = "scripted"
WEBVOYAGER = webvoyager.NAME  # the built-in loop's name, as --harness takes it

_installed: set[str] = set()
_install_lock = threading.Lock()


@dataclass(frozen=True)
class StageContext:
    """What an agent needs to set up its stage: the run's sandbox client and proxy, where tasks
    without an image of their own run, how long a sandbox lives, and how browsers are judged."""

    client: SandboxClient
    proxy: ProxyControl
    run_id: str
    image: str | None = None
    ttl: float = 3600
    runtime: str | None = "local"
    judging: Judging = field(default_factory=Judging)


class Agent(Protocol):
    """Who plays (see the module docstring)."""

    @property
    def name(self) -> str:
        """The `harness` column of its episodes."""

    @property
    def version(self) -> str:
        """The `harness_version` column."""

    @property
    def model(self) -> str:
        """The model as the user named it (the `model` column: `oracle` stays `oracle`)."""

    def stage(self, task: Task, ctx: StageContext, attempt: int) -> Stage:
        """Where it plays `task` (not started yet)."""

    def play(self, attempt: Attempt, stage: Stage, turn: Turn, number: int) -> Played:
        """Play turn `number` (0 first) on the started stage, opening the attempt's proxy
        episode on the first. Raises EpisodeFailure (or a SandboxError) when it cannot."""


def ensure_harness(harness: str | Harness) -> Harness:
    """The harness, installed in the tools payload (once per process; cached on disk)."""
    h = get_harness(harness)
    with _install_lock:
        if h.name not in _installed:
            missing = payload.ensure([h.name])
            if missing:
                raise EpisodeFailure(f"harness {h.name} cannot be installed: {missing[h.name]}")
            _installed.add(h.name)
    return h


def model_for(model: str, task: Task, harness: Harness) -> tuple[str, list[str] | None]:
    """The model name the harness is given, and the scripted model's commands if any:
    `oracle` replays the task's gold solution, `scripted` answers with no command."""
    if model == ORACLE:
        if task.solution is None:
            raise EpisodeFailure(f"task {task.id} has no gold solution for the oracle model")
        return SCRIPTED, harness.scripted(list(task.solution))
    if model == SCRIPTED:
        return SCRIPTED, harness.scripted([])
    return model, None


def played(result: HarnessResult, answer: str | None = None) -> Played:
    """A harness run as a played turn (its failure kind judged from its effects)."""
    return Played(
        result.final_answer if answer is None else answer,
        result.calls,
        result.failure_kind,
        result.failure_message,
        result=result,
    )


def sandbox_stage(task: Task, ctx: StageContext) -> SandboxStage:
    if task.environment.browser:
        raise UsageError(
            f"task {task.id} plays in a browser: give it a browsing agent "
            f"({WEBVOYAGER}, or a harness that takes MCP)"
        )
    return SandboxStage(
        task, ctx.client, ctx.proxy, image=ctx.image, ttl=ctx.ttl, labels={"run": ctx.run_id}
    )


@dataclass
class HarnessAgent:
    """An agent that is a harness (whatever it plays on, and whoever answers its model calls):
    its episodes carry the harness's name and version."""

    harness: Harness

    @property
    def name(self) -> str:
        return self.harness.name

    @property
    def version(self) -> str:
        return self.harness.version


@dataclass
class CliHarness(HarnessAgent):
    """A real agent CLI with a model, in the task's sandbox (the task's MCP servers given)."""

    model: str
    dialect: str | None = None
    timeout: float = 600

    def stage(self, task: Task, ctx: StageContext, attempt: int) -> Stage:
        return sandbox_stage(task, ctx)

    def play(self, attempt: Attempt, stage: Stage, turn: Turn, number: int) -> Played:
        assert stage.sandbox is not None, "the stage has started"
        if attempt.opened is None:
            attempt.open(*model_for(self.model, attempt.task, self.harness))
        assert attempt.served is not None
        result = run(
            self.harness,
            turn.instruction,
            stage.sandbox,
            attempt.served,
            attempt.proxy,
            timeout=turn.timeout or self.timeout,
            dialect=self.dialect,
            episode=attempt.opened,
            close=False,
            mcp=attempt.task.environment.mcp,
        )
        attempt.keep(result.artifacts, prefix=f"turn-{number}/" if number else "")
        return played(result)


def browser_stage(
    task: Task, ctx: StageContext, attempt: int, options: SessionOptions
) -> BrowserStage:
    if not task.environment.browser:
        raise UsageError(f"task {task.id} has no browser: give it a harness, not a browser")
    return BrowserStage(task, ctx.client, ctx.proxy, ctx.run_id, attempt, options, ctx.judging)


def browser_options(ctx: StageContext) -> SessionOptions:
    """A browser sandbox in the image (and disk) the runtime needs."""
    return SessionOptions(
        image=browser_image.for_runtime(ctx.runtime), disk=browser_image.disk_for(ctx.runtime)
    )


def _session(stage: Stage) -> BrowserStage:
    assert isinstance(stage, BrowserStage) and stage.session is not None, "a started browser"
    return stage


@dataclass
class BuiltinWebVoyager:
    """The WebVoyager loop on the browser; its model is the oracle's script or a real one."""

    model: str
    max_steps: int = 15
    name: str = WEBVOYAGER
    version: str = webvoyager.VERSION

    def stage(self, task: Task, ctx: StageContext, attempt: int) -> Stage:
        options = browser_options(ctx)
        if task.environment.network == "full":  # an official set's live web
            options = dataclasses.replace(options, network="full")
        return browser_stage(task, ctx, attempt, options)

    def play(self, attempt: Attempt, stage: Stage, turn: Turn, number: int) -> Played:
        browser = _session(stage)
        session, task = browser.session, attempt.task
        assert session is not None
        script, model = None, self.model
        if self.model == ORACLE:
            marks = session.observe().marks
            actions = suite.oracle_actions(task, turn.instruction, marks)
            script, model = [scripts.oracle_reply(a) for a in actions], SCRIPTED
        # the loop's calls carry no tools: with a script they are the policy's turns
        opened = attempt.open(model, script, tool_less_calls="main" if script else "side")
        attempt.record.harness_started_at = time.time()
        loop = webvoyager.WebVoyagerAgent(opened["base_url"], model, max_iter=self.max_steps)
        if task.metadata.get("official") == official.WEBVOYAGER:  # the checkout's own prompt
            checkout = official.WebVoyagerCheckout(Path(task.metadata["checkout"]))
            loop.system_prompt = checkout.system_prompt()
        result = loop.run(session, turn.instruction, task.metadata["web"], ended=browser.ended)
        return Played(result.answer, result.turns, steps=result)


@dataclass
class BrowsingHarness(HarnessAgent):
    """A real agent CLI in the browser's sandbox, browsing through the browser's MCP tools:
    the sandbox reaches the proxy through its gateway, and this thread serves the tool calls
    while another waits for the harness."""

    model: str
    timeout: float = 600

    def stage(self, task: Task, ctx: StageContext, attempt: int) -> Stage:
        ensure_harness(PYTHON_HARNESS)  # the MCP server's CPython
        options = dataclasses.replace(
            browser_options(ctx),
            network="gateway",
            gateway=gateway(ctx.proxy),
            mounts=(tools_mount(),),
        )
        return browser_stage(task, ctx, attempt, options)

    def play(self, attempt: Attempt, stage: Stage, turn: Turn, number: int) -> Played:
        browser = _session(stage)
        assert browser.session is not None and browser.sandbox is not None
        task = attempt.task
        bridge = McpBridge(browser.session, ended=browser.ended)
        outcome: dict[str, Any] = {}
        try:
            server = bridge.install()
            first = bridge.tools.observe()
            script, model = None, self.model
            if self.model == ORACLE:
                reference = suite.oracle_actions(task, turn.instruction, first.marks)
                script = self.harness.scripted(scripts.oracle_tool_steps(reference))
                model = SCRIPTED
            opened = attempt.open(model, script)
            prompt = scripts.harness_prompt(turn.instruction, task.metadata["web"])
            sandbox = browser.sandbox

            def play() -> None:
                try:
                    outcome["result"] = run(
                        self.harness, prompt, sandbox, model, attempt.proxy, timeout=self.timeout,
                        episode=opened, close=False, mcp=[server],
                    )  # fmt: skip
                except BaseException as e:  # noqa: BLE001 - reported on the serving thread
                    outcome["error"] = e

            attempt.record.harness_started_at = time.time()
            player = threading.Thread(target=play, name=f"pomona-harness-{task.id}", daemon=True)
            player.start()
            bridge.serve_while(player.is_alive)
            player.join()
        finally:
            bridge.close()
        if "error" in outcome:
            raise outcome["error"]
        if bridge.failure is not None:
            raise bridge.failure
        result: HarnessResult = outcome["result"]
        attempt.keep(result.artifacts)
        steps = bridge.tools.steps
        answer = scripts.final_answer(result.final_answer)
        trajectory = webvoyager.AgentResult(
            messages=layouts.webvoyager_messages(
                turn.instruction, task.metadata["web"], steps, answer
            ),
            screenshots=bridge.tools.screenshots,
            steps=steps,
            answer=answer,
            turns=result.main_calls if result.main_calls is not None else result.calls,
        )
        done = played(result, answer)
        done.calls, done.steps = trajectory.turns, trajectory
        return done


def agent_for(
    name: str,
    model: str,
    *,
    browser: bool = False,
    dialect: str | None = None,
    timeout: float = 600,
) -> Agent:
    """The agent `--harness NAME` means on a benchmark that plays in a browser or not: the
    built-in WebVoyager loop, or a harness (installed first) in a sandbox or a browser."""
    if name == WEBVOYAGER:
        if not browser:
            raise UsageError(f"{WEBVOYAGER} plays browser tasks only; give a harness")
        return BuiltinWebVoyager(model)
    harness = ensure_harness(name)
    if not browser:
        return CliHarness(harness, model, dialect, timeout)
    if not harness.takes_mcp:
        raise UsageError(
            f"{harness.name} has no MCP client Pomona can configure, so it cannot browse; use "
            f"{WEBVOYAGER} or a harness that takes MCP (claude-code, opencode, ...)"
        )
    return BrowsingHarness(harness, model, timeout)
