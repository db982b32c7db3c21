"""The Task and Scorer contract, shared by the gym environments and every benchmark.

A task knows its environment (image and setup), its instruction, its gold solution where one
exists, and its scorer. Scoring is two steps so the verdict stays a pure function: `collect` runs
in the sandbox and gathers artifacts (files, test output, a diff); `score` maps (task, artifacts)
to a Score without touching anything. An infrastructure failure while collecting is a
`verifier` failure, never a reward of 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import BaseModel, Field

from pomona.errors import EpisodeFailure, FailureKind
from pomona.harnesses.mcp import McpServer
from pomona.orchestrator.sdk.client import Sandbox

if TYPE_CHECKING:  # the harness layer runs tasks: it imports this module, not the reverse
    from pomona.harnesses.runner import HarnessResult
    from pomona.proxy.control import ProxyControl


class Score(BaseModel):
    reward: float
    resolved: bool
    details: dict[str, Any] = Field(default_factory=dict)


class VerifierError(EpisodeFailure, RuntimeError):
    """A scorer could not reach a trustworthy verdict (grading sandbox lost, no reward file):
    the episode is a `verifier` failure, never a reward of 0."""

    kind: FailureKind = "verifier"


class TaskSetupFailed(EpisodeFailure, RuntimeError):
    """A task's own set-up commands failed in a fresh sandbox: the environment's fault, so the
    attempt is a `sandbox` failure, never the agent's."""

    kind: FailureKind = "sandbox"


class Scorer(Protocol):
    def collect(self, task: Task, sandbox: Sandbox) -> dict[str, Any]:
        """Gather what the verdict needs from the sandbox (may run commands there)."""

    def score(self, task: Task, artifacts: dict[str, Any]) -> Score:
        """A pure function of the task and the artifacts."""


@dataclass(frozen=True)
class Environment:
    image: str = "host"
    files: dict[str, str] = field(default_factory=dict)  # path (relative to workdir) -> content
    setup: tuple[str, ...] = ()  # shell commands run before the agent starts
    workdir: str = "/workspace"
    mcp: tuple[McpServer, ...] = ()  # MCP servers the harness gets (assistant benchmarks' tools)
    user: str = "pomona"  # who runs commands: "root" where the image expects it (SWE-bench images)
    network: str = "gateway"  # a harness episode's sandbox: the model proxy only, or "full"
    env: dict[str, str] = field(default_factory=dict)  # variables every command in it sees
    # the task plays in a browser session (pomona.benchmarks.browser.stage), not a bare sandbox
    browser: bool = False


@dataclass(frozen=True)
class Turn:
    """What the agent is asked next in the same sandbox (a multi-step task's next step), and
    the time it has for it (None: the episode's budget)."""

    instruction: str
    timeout: float | None = None


@dataclass(frozen=True)
class Task:
    id: str
    instruction: str
    scorer: Scorer
    environment: Environment = field(default_factory=Environment)
    solution: tuple[str, ...] | None = None  # gold: shell commands that solve it
    benchmark: str = "builtin"
    metadata: dict[str, Any] = field(default_factory=dict)

    def agent_timeout(self, default: float) -> float:
        """The agent's time budget: the task's own (task.toml, an instance field), else `default`."""
        return float(self.metadata.get("agent_timeout") or default)

    def prepare(self, sandbox: Sandbox) -> None:
        """Lay out the task's files and run its setup in a fresh sandbox."""
        for path, content in self.environment.files.items():
            sandbox.write_file(path, content)
        for command in self.environment.setup:
            result = sandbox.exec(command, timeout=600)
            if result.exit_code != 0:
                raise TaskSetupFailed(
                    f"task {self.id}: setup {command!r} failed: {result.stderr.strip()}"
                )

    def next_turn(self, sandbox: Sandbox) -> Turn | None:
        """Called when the agent has finished what it was asked: the next instruction, or None
        when the task is done and evaluate() gives the verdict. Most tasks ask once; a multi-step
        task (harbor's [[steps]]) checks the step just finished and sets up the next one."""
        return None

    def evaluate(
        self, sandbox: Sandbox, run: HarnessResult | None = None, proxy: ProxyControl | None = None
    ) -> Score:
        """The verdict. `run` (the HarnessResult) and `proxy` (its ProxyControl) are there for tasks
        that grade the agent's own words or ask a judge model; most only look at the sandbox."""
        return self.scorer.score(self, self.scorer.collect(self, sandbox))


@dataclass(frozen=True)
class CommandScorer:
    """Reward 1 when a check command prints what it should: enough for file and text tasks."""

    check: str
    expected: str
    normalize_whitespace: bool = True

    def collect(self, task: Task, sandbox: Sandbox) -> dict[str, Any]:
        result = sandbox.exec(self.check, timeout=120)
        return {"check": self.check, "exit_code": result.exit_code, "output": result.stdout}

    def score(self, task: Task, artifacts: dict[str, Any]) -> Score:
        output, expected = artifacts["output"], self.expected
        if self.normalize_whitespace:
            output, expected = " ".join(output.split()), " ".join(expected.split())
        resolved = artifacts["exit_code"] == 0 and output == expected
        return Score(reward=1.0 if resolved else 0.0, resolved=resolved, details=artifacts)
