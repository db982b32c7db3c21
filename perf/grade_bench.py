"""Grading SWE-bench predictions: swebench's own run_evaluation beside `pomona grade` on the docker
and local runtimes, same dataset, same images, same gold predictions.

    .venv/bin/python perf/grade_bench.py [--workers 2] [--repeat 1]

The dataset is the shipped swe-local tasks re-published as official 5.x rows on images in
swebench's layout, built locally (tests/benchmarks/official.py; no registry is reachable here).
Each tool grades every instance from scratch in a fresh directory; the table gives wall seconds
for the whole run, per instance, and whether every instance resolved. With --repeat 2 the second
local run shows a warm image cache (the first unpacks every image into a fresh state
directory). Needs a Docker engine.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from swebench.task.checks import expected_image  # noqa: E402

from pomona.benchmarks import swebench  # noqa: E402
from pomona.benchmarks.swebench import task_sets as swe_tasks  # noqa: E402
from tests.benchmarks import official  # noqa: E402

PYTHON = str(REPO / ".venv" / "bin" / "python")


def dataset(directory: Path) -> tuple[Path, int]:
    rows = []
    for inst in swebench.load_instances(swe_tasks.DATA):
        image = official.build(expected_image(inst["instance_id"]), inst)
        rows.append(official.official_row(inst, image))
    path = directory / "dataset.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path, len(rows)


def run(command: list[str], cwd: Path) -> float:
    t0 = time.monotonic()
    subprocess.run(command, cwd=cwd, check=False, capture_output=True)
    return time.monotonic() - t0


def resolved(report: Path) -> str:
    data = json.loads(report.read_text())
    return f"{data['resolved_instances']}/{data['total_instances']}"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--repeat", type=int, default=1)
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="pomona-grade-bench-"))
    state = tempfile.mkdtemp(prefix="pomona-grade-bench-state-")
    try:
        data, n = dataset(work)
        common = ["-d", str(data), "-p", "gold"]
        pomona = [
            str(REPO / ".venv" / "bin" / "pomona"),
            "grade",
            *common,
            "--run-id",
            "b",
            "--max-workers",
            str(args.workers),
        ]
        tools = {
            "swebench run_evaluation (docker)": [
                PYTHON,
                "-m",
                "swebench.harness.run_evaluation",
                *common,
                "--run_id",
                "b",
                "--max_workers",
                str(args.workers),
            ],
            "pomona grade --runtime docker": [*pomona, "--runtime", "docker"],
            "pomona grade --runtime local": [*pomona, "--state-dir", state],
        }
        print(f"{n} instances, gold patches, {args.workers} workers, load {os.getloadavg()[0]:.1f}")
        print(f"{'tool':36} {'seconds':>8} {'s/instance':>11}  resolved")
        for name, command in tools.items():
            for i in range(args.repeat):
                cwd = work / f"{name.split()[0]}-{name.split()[-1]}-{i}"
                cwd.mkdir()
                seconds = run(command, cwd)
                print(
                    f"{name:36} {seconds:8.1f} {seconds / n:11.1f}  {resolved(cwd / 'gold.b.json')}"
                )
    finally:
        from pomona.orchestrator.runtimes.local import LocalRuntime

        LocalRuntime(state).unmount_store()
        shutil.rmtree(state, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
