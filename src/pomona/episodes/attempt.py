"""One attempt's bookkeeping, from its first proxy call to its `episodes` row.

Every attempt leaves exactly one row with a typed failure kind, even one whose sandbox never
started: the agent opens the proxy episode when it knows its model and script (the oracle's
script may need the first page of a browser), and `close` opens one for the row if nothing did.
The row carries the run's columns (run id, attempt, the model as the user named it, ...) and
the task's and agent's, whoever opened the episode.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from pomona.benchmarks.task import Task
from pomona.episodes.record import EpisodeRecord
from pomona.episodes.rows import close_episode, save_artifacts
from pomona.errors import FailureKind
from pomona.proxy.control import ProxyControl

if TYPE_CHECKING:
    from pomona.proxy.policy import Policy


@dataclass(frozen=True)
class RunInfo:
    """What every attempt of one run shares: its id, and the columns each of its rows gets
    (`model` as the user named it, where the proxy records `scripted` for the oracle; `runtime`;
    `role` for a judge's episodes ...)."""

    id: str
    columns: Mapping[str, Any] = field(default_factory=dict)


class Attempt:
    """One attempt of `task` by the agent named `agent`/`version` in `run`."""

    def __init__(
        self,
        task: Task,
        agent: str,
        version: str,
        model: str,
        proxy: ProxyControl,
        run: RunInfo,
        number: int = 0,
    ):
        self.task, self.proxy, self.run = task, proxy, run
        self.agent, self.version = agent, version
        self.record = EpisodeRecord(
            "", task.id, task.benchmark, agent, model, number, started_at=time.time()
        )
        self.opened: dict[str, str] | None = None  # the proxy episode: key and base URLs
        self.served: str | None = None  # the model name the proxy serves it with
        self._t0 = time.monotonic()

    # -- the proxy episode ----------------------------------------------------------------------

    def metadata(self, **extra: Any) -> dict[str, Any]:
        return {
            "run": self.run.id,
            "benchmark": self.task.benchmark,
            "task": self.task.id,
            "harness": self.agent,
            "harness_version": self.version,
            "attempt": self.record.attempt,
            **self.run.columns,
            **extra,
        }

    def open(
        self,
        model: str,
        script: Sequence[str | Sequence[str]] | None = None,
        *,
        tool_less_calls: Literal["side", "main"] = "side",
        policy: Policy | None = None,
    ) -> dict[str, str]:
        """Open the attempt's proxy episode (once), served by `model` (`scripted` with `script`
        for the oracle): its key and the base URLs for the agent."""
        assert self.opened is None, f"attempt {self.record.episode} is open already"
        self.opened = self.proxy.open_episode(
            model=model,
            metadata=self.metadata(),
            script=script,
            tool_less_calls=tool_less_calls,
            policy=policy,
        )
        self.served, self.record.episode = model, self.opened["key"]
        return self.opened

    @property
    def key(self) -> str:
        return self.record.episode

    # -- what the agent did --------------------------------------------------------------------

    def fail(self, kind: FailureKind, message: str | None) -> None:
        self.record.failure_kind, self.record.failure_message = kind, message

    @property
    def ran(self) -> bool:
        return self.record.ran

    def keep(self, files: Mapping[str, bytes], prefix: str = "") -> None:
        """Save files of the attempt (a transcript, screenshots) beside the trajectories."""
        self.record.artifacts += save_artifacts(
            self.proxy, self.key, {prefix + k: v for k, v in files.items()}
        )

    @contextlib.contextmanager
    def timed(self, phase: str) -> Any:
        """Add the seconds the block takes to `timings[phase]` (sandbox, harness, score)."""
        t = time.monotonic()
        try:
            yield
        finally:
            timings = self.record.timings
            timings[phase] = timings.get(phase, 0.0) + time.monotonic() - t

    # -- the row --------------------------------------------------------------------------------

    def close(self) -> EpisodeRecord:
        """Write the `episodes` row (opening the episode first if no agent did)."""
        self.record.timings["total"] = time.monotonic() - self._t0
        if self.opened is None:
            try:
                self.open(self.record.model)
            except Exception as e:  # noqa: BLE001 - no episode, so no row: the record says why
                self.fail("proxy", f"could not open an episode: {e!r}")
                return self.record
        close_episode(self.proxy, self.record)
        return self.record
