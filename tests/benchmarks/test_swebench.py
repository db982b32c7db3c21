"""SWE-bench grading on the shipped local tasks: the gold patch resolves with the witness's
integrity shown, every negative fixture (empty, wrong, non-applying, conftest spoof) does not,
swebench's own report functions agree with Pomona's verdict on the written logs, and a broken
grading sandbox is a verifier failure. The reward hacks are in test_hacks.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

import pomona  # noqa: F401  (registers the environments)
from pomona.benchmarks import swebench
from pomona.benchmarks.swebench import task_sets

INSTANCES = swebench.load_instances(task_sets.DATA)
IDS = [i["instance_id"] for i in INSTANCES]
BY_ID = {i["instance_id"]: i for i in INSTANCES}
NEGATIVE = ("empty", "wrong", "nonapplying", "spoof")


def test_task_set_is_a_well_formed_swebench_repo() -> None:
    from swebench.task.checks import check_task_repo, errors

    assert errors(check_task_repo(task_sets.DATA)) == []
    assert len(IDS) >= 6
    assert len({BY_ID[i]["repo"] for i in IDS}) >= 4
    for inst in INSTANCES:
        assert inst["FAIL_TO_PASS"] and inst["PASS_TO_PASS"]
        assert swebench.bundle_of(inst) is not None


def test_parquet_and_jsonl_rows_load_like_the_task_repo(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [{k: v for k, v in i.items() if k != swebench.TASK_DIR_KEY} for i in INSTANCES]
    old_style = [{**r, "FAIL_TO_PASS": json.dumps(r["FAIL_TO_PASS"])} for r in rows]
    (tmp_path / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in old_style))
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "d.parquet")
    for name in ("d.jsonl", "d.parquet"):
        loaded = swebench.load_instances(tmp_path / name, IDS[:2])
        assert [r["FAIL_TO_PASS"] for r in loaded] == [BY_ID[i]["FAIL_TO_PASS"] for i in IDS[:2]]
        assert all(swebench.image_of(r).startswith("swebench/") for r in loaded)
    with pytest.raises(KeyError):
        swebench.load_instances(tmp_path / "d.jsonl", ["nope__nope-1"])


def _grade(client: Any, root: Path, iid: str, name: str) -> swebench.Grade:
    inst = BY_ID[iid]
    patch = inst["patch"] if name == "gold" else task_sets.fixture(iid, name)
    pred = swebench.prediction(iid, f"test/{name}", patch)
    return swebench.grade(client, inst, pred, root, "r1", timeout=600)


@pytest.mark.parametrize("iid", IDS)
def test_gold_resolves_and_every_negative_fixture_does_not(
    client: Any, tmp_path: Path, iid: str
) -> None:
    inst = BY_ID[iid]
    preds = []
    for name in ("gold", *NEGATIVE):
        g = _grade(client, tmp_path, iid, name)
        preds.append(
            swebench.prediction(iid, f"test/{name}", (g.log_dir / "patch.diff").read_text())
        )
        assert g.resolved == (name == "gold"), (name, g.log_dir)
        assert g.infra_failure is None
        verification = json.loads((g.log_dir / "verification.json").read_text())
        assert verification["verdict"] == g.verdict
        if name in ("empty", "nonapplying"):
            # like swebench's run_instance: no report.json, so its run report counts an error
            assert g.report is None and not (g.log_dir / "report.json").exists()
            assert g.empty_patch == (name == "empty") and not g.applied
            continue
        written = json.loads((g.log_dir / "report.json").read_text())
        assert written == g.report and written[iid]["resolved"] == g.resolved
        assert written[iid]["pomona_verdict"] == g.verdict
        if name == "spoof":  # never run: the conftest reaches into the testing
            assert g.verdict == "spoof" and not (g.log_dir / "test_output.txt").exists()
            assert [f["path"] for f in verification["spoof"]] == ["conftest.py"]
            continue
        # swebench's own report functions, on the logs Pomona wrote, agree with Pomona
        assert swebench.regrade(inst, g.log_dir)[iid] == {
            k: v for k, v in written[iid].items() if k != "pomona_verdict"
        }
        assert verification["integrity"]["shown"], verification
        assert verification["command"] == "/bin/bash /eval.sh 2>&1"
        assert verification["image_digest"].startswith("sha256:")
    # ...and so does swebench's run report, per model, with Pomona's verdicts on it
    for pred in preds:
        report = swebench.run_report([pred], [inst], "r1", tmp_path)
        name = pred["model_name_or_path"].removeprefix("test/")
        assert report["resolved_ids"] == ([iid] if name == "gold" else [])
        assert report["error_ids"] == ([iid] if name == "nonapplying" else [])
        assert report["spoof_ids"] == ([iid] if name == "spoof" else [])
        assert report["total_instances"] == 1


def test_a_fix_with_test_infrastructure_is_a_spoof(client: Any, tmp_path: Path) -> None:
    iid = "tkem__cachetools-1"  # has setup.cfg and tox.ini at base
    inst = BY_ID[iid]
    spoof_ini = (
        "diff --git a/pytest.ini b/pytest.ini\nnew file mode 100644\n--- /dev/null\n"
        "+++ b/pytest.ini\n@@ -0,0 +1,2 @@\n+[pytest]\n+addopts = -p no:terminal\n"
    )
    patch = inst["patch"] + spoof_ini + task_sets.fixture(iid, "spoof")
    pred = swebench.prediction(iid, "test/mixed", patch)
    g = swebench.grade(client, inst, pred, tmp_path, "r2", timeout=600)
    assert g.verdict == "spoof" and not g.resolved  # a real fix does not buy the spoof a pass
    assert sorted(f.path for f in g.verification.spoof) == ["conftest.py", "pytest.ini"]


class _Crashing:
    """A client whose grading sandboxes are lost right after creation."""

    def __init__(self, client: Any):
        self.client = client

    def create_sandbox(self, *args: Any, **kwargs: Any) -> Any:
        sb = self.client.create_sandbox(*args, **kwargs)
        sb.delete()
        return sb


def test_a_grading_sandbox_that_crashes_is_a_verifier_failure(
    client: Any, state_dir: str, tmp_path: Path
) -> None:
    with pytest.raises(swebench.VerifierError):
        _grade(_Crashing(client), tmp_path, IDS[0], "gold")
    # through an environment: the episode ends as a verifier failure, not as a reward of 0
    task = swebench.to_task(BY_ID[IDS[0]], root=str(tmp_path), client=_Crashing(client))
    env = gym.make("pomona/ShellEnv-v0", tasks=[task], state_dir=state_dir)
    env.reset(options={"task": task.id})
    for command in task.solution or ():
        env.step(command)
    _, _, terminated, _, info = env.step("submit")
    env.close()
    assert terminated and info["failure"] == "verifier"


def test_predictions_round_trip(tmp_path: Path) -> None:
    preds = [swebench.prediction(i, "m/x", BY_ID[i]["patch"]) for i in IDS]
    path = swebench.write_predictions(tmp_path / "preds.jsonl", preds)
    assert swebench.load_predictions(path) == {p["instance_id"]: p for p in preds}
    (tmp_path / "preds.json").write_text(json.dumps({p["instance_id"]: p for p in preds}))
    assert swebench.load_predictions(tmp_path / "preds.json") == swebench.load_predictions(path)


@pytest.mark.parametrize("actor", ["oracle", "noop"])
def test_shell_env_runs_a_swe_task_end_to_end(state_dir: str, tmp_path: Path, actor: str) -> None:
    """The agent sandbox path: base checkout, the agent's diff, grading in a fresh sandbox."""
    task = swebench.to_task(BY_ID["pytoolz__toolz-1"], root=str(tmp_path), model="shell")
    env = gym.make("pomona/ShellEnv-v0", tasks=[task], state_dir=state_dir)
    env.reset(options={"task": task.id})
    if actor == "oracle":
        for command in task.solution or ():
            _, _, _, _, info = env.step(command)
            assert info["exit_code"] == 0, info
    _, reward, terminated, _, info = env.step("submit")
    env.close()
    assert terminated and info["failure"] == "none"
    assert reward == (1.0 if actor == "oracle" else 0.0)
    assert info["score"]["details"]["empty_patch"] == (actor == "noop")
