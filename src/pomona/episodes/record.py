"""What one attempt came to: the record every agent, benchmark and driver fills in, and the
`episodes` row is written from. `reward` stays None unless the episode ran and was scored, so an
infrastructure failure is never read as a zero."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from pomona.errors import FailureKind


@dataclass
class EpisodeRecord:
    """What one attempt came to. `reward` is None unless the episode ran and was scored."""

    episode: str  # the proxy episode key: joins `calls.episode` and `episodes.episode`
    task: str
    benchmark: str
    harness: str  # who played: a harness, or the name of another agent (webvoyager, policy)
    model: str
    attempt: int = 0
    reward: float | None = None
    resolved: bool | None = None
    failure_kind: FailureKind = "none"
    failure_message: str | None = None
    score: dict[str, Any] | None = None
    final_answer: str | None = None
    calls: int = 0
    artifacts: list[dict[str, str]] = field(default_factory=list)
    started_at: float = 0.0  # wall clock (time.time()) when the attempt began
    harness_started_at: float | None = None  # wall clock when the harness was launched
    # seconds: sandbox, harness, score, total
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def ran(self) -> bool:
        return self.failure_kind == "none"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
