"""A verdict with its evidence: what ran, where, on what, and why the verdict is what it is.

Saved as `verification.json` (and the witness's own record as `witness.jsonl`) in the grading
log directory, so every episode carries it among its artifacts and the viewer shows it. The
verdicts:

    resolved    the tests say so, and the witness shows they could not have been made to
    unresolved  the tests say not
    spoof       the output reaches into how it is tested (spoof.py): never run, never resolved
    suspect     the tests say resolved, but integrity is not shown (integrity.py)
    empty       no output to verify
    unapplied   the output cannot be applied (a patch that does not apply)
    timeout     the tests ran out of time
    error       the verifier could not reach a verdict: `failure` says why and whose fault
Only `resolved` counts as solved; `error` is an infrastructure failure, never a 0.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pomona.benchmarks.verification.integrity import Integrity
from pomona.benchmarks.verification.spoof import Finding

RESOLVED, UNRESOLVED, SPOOF, SUSPECT = "resolved", "unresolved", "spoof", "suspect"
EMPTY, UNAPPLIED, TIMEOUT, ERROR = "empty", "unapplied", "timeout", "error"
VERDICTS = (RESOLVED, UNRESOLVED, SPOOF, SUSPECT, EMPTY, UNAPPLIED, TIMEOUT, ERROR)
FILE = "verification.json"
WITNESS_FILE = "witness.jsonl"
# the kinds of infrastructure failure, as the console, report.json and the run report name them
ENVIRONMENT, IMAGE, ENGINE, VERIFIER = "environment", "image", "engine", "verifier"


@dataclass
class Verification:
    verdict: str
    reason: str = ""
    mode: str = "fresh"  # fresh: a new sandbox of the pristine image; shared: the agent's own
    command: str | None = None  # exactly what ran the tests
    environment: dict[str, str] = field(default_factory=dict)  # the variables it ran with
    image: str | None = None
    image_digest: str | None = None  # what the image name stood for (None: not known)
    sandbox: dict[str, Any] = field(default_factory=dict)  # runtime, user, network
    spoof: list[Finding] = field(default_factory=list)
    integrity: Integrity | None = None
    witness: dict[str, Any] | None = None  # what the witness found in the image
    restored: list[str] = field(default_factory=list)
    failure_kind: str | None = None  # environment, image, engine, verifier (verdict error)
    records: list[dict[str, Any]] = field(default_factory=list)  # the witness's, as received

    @property
    def resolved(self) -> bool:
        return self.verdict == RESOLVED

    def to_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "reason": self.reason,
            "mode": self.mode,
            "command": self.command,
            "environment": self.environment,
            "image": self.image,
            "image_digest": self.image_digest,
            "sandbox": self.sandbox,
            "spoof": [f.to_dict() for f in self.spoof],
            "integrity": self.integrity.to_dict() if self.integrity else None,
            "witness": self.witness,
            "failure": {"kind": self.failure_kind, "reason": self.reason}
            if self.failure_kind
            else None,
        }

    def write(self, log_dir: Path) -> Path:
        """verification.json (and witness.jsonl when the witness recorded anything)."""
        log_dir.mkdir(parents=True, exist_ok=True)
        if self.records:
            (log_dir / WITNESS_FILE).write_text(
                "".join(json.dumps(r, default=str) + "\n" for r in self.records)
            )
        path = log_dir / FILE
        path.write_text(json.dumps(self.to_dict(), indent=2, default=str) + "\n")
        return path


def read(log_dir: Path) -> dict[str, Any] | None:
    """A log directory's verification.json, or None (none written, or unreadable)."""
    try:
        data = json.loads((log_dir / FILE).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
