"""A judged browser run's evidence beside its layouts: per attempt the oracle's verdict and the
judge's (with the proxy episode its calls are recorded under), and how often they agree."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pomona.benchmarks.browser import judges


def judge_agreement(records: Sequence[Any]) -> float | None:
    """The share of scored attempts where the judge's label equals the oracle's verdict."""
    pairs = [
        (bool(r.resolved), ((r.score or {}).get("details", {}).get("judge") or {}).get("label"))
        for r in records
        if r.failure_kind == "none" and r.score
    ]
    return judges.agreement(pairs)


def write_judgments(results: Path, records: Sequence[Any]) -> Path:
    """judgments.jsonl (one line per attempt) and agreement.json under `results`."""
    results.mkdir(parents=True, exist_ok=True)
    lines = []
    for r in records:
        details = (r.score or {}).get("details", {})
        lines.append({
            "task": r.task, "attempt": r.attempt, "episode": r.episode,
            "failure_kind": r.failure_kind, "oracle": r.resolved, "judge": details.get("judge"),
        })  # fmt: skip
    (results / "judgments.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    judged = sum(1 for x in lines if (x["judge"] or {}).get("label") is not None)
    summary = {"agreement": judge_agreement(records), "judged": judged, "attempts": len(lines)}
    path = results / "agreement.json"
    path.write_text(json.dumps(summary, indent=1))
    return path
