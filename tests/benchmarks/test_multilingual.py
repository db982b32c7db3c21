"""SWE-bench Multilingual's path, for real, on the shipped JavaScript tasks: built from npm
tarballs like the Python set, tested with Node's own test runner and graded by swebench's TAP
parser. The gold patch resolves and a wrong patch does not, graded directly and through
`pomona run` with a real harness."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from pomona.benchmarks import swebench
from pomona.benchmarks.swebench import datasets as swe_datasets
from pomona.benchmarks.swebench import task_sets as swe_tasks
from pomona.harnesses import payload
from pomona.run import run_benchmark
from tests.benchmarks import official

DATA = swe_tasks.MULTILINGUAL_DATA
INSTANCES = swebench.load_instances(DATA)
IDS = [i["instance_id"] for i in INSTANCES]


def test_the_set_is_a_well_formed_non_python_task_repo() -> None:
    from swebench.task.checks import check_task_repo, errors

    assert errors(check_task_repo(DATA)) == []
    assert len(IDS) >= 2 and swe_datasets.label_of(str(DATA)) == "pomona/swe-multilingual-local"
    for inst in INSTANCES:
        assert inst["log_parser"] == "parse_log_tap" and "node --test" in inst["eval_script"]
        assert inst["FAIL_TO_PASS"] and inst["PASS_TO_PASS"]
        assert "environment_setup_commit" not in inst  # as Multilingual rows have it


@pytest.mark.parametrize("iid", IDS)
def test_gold_resolves_and_wrong_does_not(client: Any, tmp_path: Path, iid: str) -> None:
    inst = next(i for i in INSTANCES if i["instance_id"] == iid)
    for name in ("gold", "wrong", "nonapplying"):
        patch = inst["patch"] if name == "gold" else swe_tasks.fixture(iid, name)
        g = swebench.grade(client, inst, swebench.prediction(iid, name, patch), tmp_path, "r")
        assert (g.resolved, g.infra_failure) == (name == "gold", None), (name, g.message)
        if g.report is not None:
            assert official.swebench_report(g.log_dir) == swebench.regrade(inst, g.log_dir)
            assert "TAP version" in (g.log_dir / "test_output.txt").read_text()
            # the witness heard Node's test runner and every test file's process
            v = json.loads((g.log_dir / "verification.json").read_text())
            assert v["integrity"]["shown"] and v["integrity"]["runners"] == ["node-test"], v


def test_pomona_run_resolves_with_gold_and_not_with_a_wrong_patch(
    state_dir: str, tmp_path: Path
) -> None:
    if missing := payload.ensure(["pi"]):
        pytest.fail(f"harness payload unavailable: {missing}")
    runs = tmp_path / "runs"
    gold = run_benchmark(
        "swe-multilingual-local",
        "pi",
        "oracle",
        state_dir=state_dir,
        trajectories=runs,
        progress=False,
    )
    assert [(r.task, r.failure_kind, r.resolved) for r in gold.records] == [
        (iid, "none", True) for iid in IDS
    ]
    # the same tasks, with a wrong patch where the gold one was: the oracle replays it
    wrong = tmp_path / "wrong-set"
    shutil.copytree(DATA, wrong)
    for iid in IDS:
        (wrong / "tasks" / iid / "gold.patch").write_text(swe_tasks.fixture(iid, "wrong"))
    result = run_benchmark(
        f"swebench:{wrong}", "pi", "oracle", state_dir=state_dir, trajectories=runs, progress=False
    )
    assert [(r.failure_kind, r.resolved) for r in result.records] == [("none", False)] * len(IDS)
    assert result.swe_report["unresolved_ids"] == IDS
