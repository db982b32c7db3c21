"""Predictions files and swebench's own run report, in the official formats."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

from pomona.benchmarks.swebench.instances import Prediction, SweInstance


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
        raise ValueError(
            f"{path} is not valid JSON{'L' if str(path).endswith('.jsonl') else ''}: {e}"
        ) from None
    for row in rows:
        if not isinstance(row, dict) or "instance_id" not in row:
            raise ValueError(
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
        path = make_run_report(by_id, instances, run_id, client=None, report_dir=str(report_dir))
        return json.loads(Path(path).read_text())
