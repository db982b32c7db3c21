"""Where an attempt is played, as the episode engine sees it: a Stage starts what the task needs,
says what the task asks, checks between turns, gives the verdict and takes everything down.

    SandboxStage   the task's own sandbox: its image, files and setup, reaching only the proxy
                   (or the whole network where the task asks), the harness payload mounted
    BrowserStage   a browser in a sandbox serving the task's web (pomona.benchmarks.browser.stage)

A stage raises EpisodeFailure (with its kind) for what ends an attempt without a verdict: a
sandbox lost, a broken verifier. The verdict itself is the task's scorer, unchanged.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from pomona.benchmarks.task import Score, Task, Turn
from pomona.errors import EpisodeFailure, FailureKind, SandboxError
from pomona.harnesses.runner import HarnessResult, tools_mount
from pomona.orchestrator.sdk.client import Sandbox, SandboxClient
from pomona.proxy.control import ProxyControl, gateway

if TYPE_CHECKING:
    from pomona.orchestrator.types import Mount


@dataclass
class Played:
    """What an agent's turn came to: its answer, how many model calls it made, how it ended
    (`failure`, judged from its effects), and its own record of the turn (a CLI harness's
    HarnessResult; a browsing agent's steps, observations and messages)."""

    answer: str | None
    calls: int
    failure: FailureKind = "none"
    message: str | None = None
    result: HarnessResult | None = None
    steps: Any = None  # a browser agent's trajectory (pomona.benchmarks.browser.loop.AgentResult)
    every_turn: bool = False  # the agent went through the task's later turns itself


class Stage(Protocol):
    """Where one attempt plays (see the module docstring)."""

    @property
    def sandbox(self) -> Sandbox | None:
        """The sandbox a harness runs in (the browser's own, for a browser stage)."""

    @property
    def instruction(self) -> str:
        """What the task asks first (known once the stage has started)."""

    def start(self) -> None:
        """Bring up what the task needs; raises EpisodeFailure or a SandboxError."""

    def next_turn(self) -> Turn | None:
        """The task's next instruction once the agent is done, or None: time for the verdict."""

    def score(self, played: Played, key: str) -> Score:
        """The verdict on the attempt whose proxy episode is `key`."""

    def lost(self) -> bool:
        """Whether the sandbox went away under the agent (which then looks like its failure)."""

    def close(self) -> None:
        """Take everything down; safe to call more than once and after a failed start."""


def sandbox_lost(sandbox: Sandbox | None) -> bool:
    """Whether the sandbox is gone (deleted, expired, its runtime lost)."""
    if sandbox is None:
        return False
    try:
        sandbox.refresh()
    except SandboxError:
        return True
    return False


def delete_sandbox(sandbox: Sandbox | None) -> None:
    if sandbox is not None:
        with contextlib.suppress(SandboxError):
            sandbox.delete()


@dataclass
class SandboxStage:
    """The task's sandbox, reaching `proxy` (the gateway) and nothing else unless the task asks
    for the whole network; the payload mounted; the task's files and setup laid out."""

    task: Task
    client: SandboxClient
    proxy: ProxyControl
    image: str | None = None
    ttl: float = 3600
    labels: Mapping[str, str] = field(default_factory=dict)
    mounts: tuple[Mount, ...] = ()
    _sandbox: Sandbox | None = None

    @property
    def sandbox(self) -> Sandbox | None:
        return self._sandbox

    @property
    def instruction(self) -> str:
        return self.task.instruction

    def start(self) -> None:
        env = self.task.environment
        self._sandbox = self.client.create_sandbox(
            self.image or env.image,
            network=env.network,
            gateway=gateway(self.proxy) if env.network == "gateway" else None,
            mounts=[tools_mount(), *self.mounts],
            workdir=env.workdir,
            user=env.user,
            env=env.env,
            timeout=self.ttl,
            labels={"task": self.task.id[:63], **self.labels},
        )
        self.task.prepare(self._sandbox)

    def next_turn(self) -> Turn | None:
        assert self._sandbox is not None
        try:
            return self.task.next_turn(self._sandbox)
        except SandboxError as e:
            raise EpisodeFailure(f"the sandbox was lost between two turns: {e}", "sandbox") from e
        except Exception as e:  # noqa: BLE001 - a broken step check is data, not a crash
            raise EpisodeFailure(
                f"the task could not go on to its next turn: {e!r}", "verifier"
            ) from e

    def score(self, played: Played, key: str) -> Score:
        assert self._sandbox is not None
        try:
            return self.task.evaluate(self._sandbox, run=played.result, proxy=self.proxy)
        except SandboxError as e:
            raise EpisodeFailure(f"the sandbox was lost before scoring: {e}", "sandbox") from e
        except Exception as e:  # noqa: BLE001 - a broken verifier is data, not a crash
            raise EpisodeFailure(f"the scorer failed: {e!r}", "verifier") from e

    def lost(self) -> bool:
        return sandbox_lost(self._sandbox)

    def close(self) -> None:
        delete_sandbox(self._sandbox)
        self._sandbox = None
