"""Predictions files and swebench's own run report, in the official formats.

The run report is swebench's `make_run_report` over the logs, and then carries what the logs'
verification.json files say and swebench cannot read: the instances whose verdict is `spoof` or
`suspect` (`spoof_ids`, `suspect_ids`: unresolved in swebench's counts too, as their report.json
says), and every infrastructure failure with its kind and reason in `infra_failure_ids` and
`failure_reasons`, as the console prints them.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

from pomona.benchmarks.swebench.grading import log_dir_for
from pomona.benchmarks.swebench.instances import Prediction, SweInstance
from pomona.benchmarks.verification import record
from pomona.errors import UsageError


def write_predictions(path: str | Path, predictions: list[Prediction]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(p) + "\n" for p in predictions))
    return path


def load_predictions(path: str | Path) -> dict[str, Prediction]:
    """Predictions from .jsonl, or .json as a list or an {instance_id: prediction} dict."""
    text = Path(path).read_text()
    try:
        if str(path).endswith(".jsonl"):
            rows = [json.loads(line) for line in text.splitlines() if line.strip()]
        else:
            data = json.loads(text)
            rows = list(data.values()) if isinstance(data, dict) else data
    except json.JSONDecodeError as e:
        raise UsageError(
            f"{path} is not valid JSON{'L' if str(path).endswith('.jsonl') else ''}: {e}"
        ) from None
    for row in rows:
        if not isinstance(row, dict) or "instance_id" not in row:
            raise UsageError(
                f"{path}: every prediction must be an object with an instance_id "
                f"(got {str(row)[:80]!r})"
            )
        row.setdefault("model_name_or_path", "None")
        row.setdefault("model_patch", None)
    return {r["instance_id"]: r for r in rows}


def run_report(
    predictions: list[Prediction],
    instances: list[SweInstance],
    run_id: str,
    root: str | Path,
    report_dir: str | Path = ".",
) -> dict[str, Any]:
    """swebench's own run report (`<model>.<run_id>.json` in `report_dir`, relative to `root`),
    from the logs written under `root`."""
    from swebench.harness.reporting import make_run_report

    by_id = {p["instance_id"]: p for p in predictions}
    Path(root).mkdir(parents=True, exist_ok=True)
    with contextlib.chdir(root), contextlib.redirect_stdout(io.StringIO()):
        path = Path(
            make_run_report(by_id, instances, run_id, client=None, report_dir=str(report_dir))
        ).resolve()
    report = json.loads(path.read_text())
    _with_verdicts(report, by_id, run_id, Path(root))
    path.write_text(json.dumps(report, indent=4) + "\n")
    return report


def _with_verdicts(
    report: dict[str, Any], predictions: dict[str, Prediction], run_id: str, root: Path
) -> None:
    """Pomona's verdicts and typed failures, added to swebench's run report in place."""
    spoof, suspect = set(), set()
    infra = set(report["infra_failure_ids"])
    reasons = dict(report["failure_reasons"])
    for iid, pred in predictions.items():
        found = record.read(log_dir_for(root, run_id, pred["model_name_or_path"], iid))
        if found is None:
            continue
        verdict, failure = found.get("verdict"), found.get("failure")
        if verdict == record.SPOOF:
            spoof.add(iid)
        elif verdict == record.SUSPECT:
            suspect.add(iid)
        if failure:
            infra.add(iid)
            reasons[iid] = f"{failure['kind']}: {failure['reason']}"
    report |= {
        "spoof_instances": len(spoof),
        "suspect_instances": len(suspect),
        "spoof_ids": sorted(spoof),
        "suspect_ids": sorted(suspect),
        "infra_failure_instances": len(infra),
        "infra_failure_ids": sorted(infra),
        "failure_reasons": dict(sorted(reasons.items())),
    }
