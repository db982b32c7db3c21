"""`pomona grade` as a user of swebench's run_evaluation meets it: a task in swebench's own image
layout (root-owned /testbed, run as root, pytest only in the conda-style env) graded for the gold
patch and every negative fixture, each report equal to swebench's own report functions' on the
same logs; every published dataset shape; and environment failures typed as such, never a 0."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest

from pomona.benchmarks import swebench
from pomona.benchmarks.swebench import datasets as swe_datasets
from pomona.benchmarks.swebench import evaluation as grading
from pomona.benchmarks.swebench import task_sets as swe_tasks
from pomona.cli import main
from tests.benchmarks import official

IID = "jpvanhal__inflection-1"
LOCAL = {i["instance_id"]: i for i in swebench.load_instances(swe_tasks.DATA)}
IMAGE = "swebench/sweb.eval.x86_64.jpvanhal_1776_inflection-1:latest"


@pytest.fixture(scope="module")
def official_row() -> dict[str, Any]:
    return official.official_row(LOCAL[IID], official.build(IMAGE, LOCAL[IID]))


def write_parquet_repo(directory: Path, rows: list[dict[str, Any]], split: str = "test") -> Path:
    """A Hugging Face dataset repository as checked out: data/<split>-00000-of-00001.parquet."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    (directory / "data").mkdir(parents=True)
    pq.write_table(
        pa.Table.from_pylist(rows), directory / "data" / f"{split}-00000-of-00001.parquet"
    )
    return directory


def write_preds(path: Path, iid: str, model: str, patch: str | None) -> Path:
    return swebench.write_predictions(path, [swebench.prediction(iid, model, patch)])


def cli_grade(
    tmp: Path, dataset: Path | str, predictions: Path | str, state_dir: str, run_id: str = "r"
) -> int:
    return main(
        [
            "grade",
            "-d",
            str(dataset),
            "-p",
            str(predictions),
            "--run-id",
            run_id,
            "--log-root",
            str(tmp),
            "--report-dir",
            str(tmp),
            "--state-dir",
            state_dir,
            "--max-workers",
            "2",
        ]
    )


def swebench_run_report(
    tmp: Path, preds: dict[str, Any], rows: list[dict[str, Any]], run_id: str
) -> dict[str, Any]:
    """swebench's make_run_report, called here directly on the same logs."""
    from swebench.harness.reporting import make_run_report

    with contextlib.chdir(tmp), contextlib.redirect_stdout(io.StringIO()):
        path = make_run_report(preds, rows, run_id, client=None, report_dir=str(tmp / "theirs"))
    return json.loads(Path(path).read_text())


def patch_of(name: str, iid: str = IID) -> str:
    return LOCAL[iid]["patch"] if name == "gold" else swe_tasks.fixture(iid, name)


def test_official_layout_grades_like_swebench(
    official_row: dict[str, Any], state_dir: str, tmp_path: Path, capsys: Any
) -> None:
    dataset = write_parquet_repo(
        tmp_path / "verified", [{**official_row, "difficulty": "<15 min fix"}]
    )
    (instance,) = swe_datasets.load(str(dataset)).instances
    assert (instance["pomona_shape"], swebench.user_of(instance)) == ("5.x", "root")
    expected = {  # like run_evaluation, the exit status is 0 once the evaluation ran
        "gold": "resolved_ids",
        "wrong": "unresolved_ids",
        "empty": "empty_patch_ids",
        "nonapplying": "error_ids",
        "spoof": "spoof_ids",
    }
    for name, bucket in expected.items():
        preds = write_preds(tmp_path / f"{name}.jsonl", IID, f"m/{name}", patch_of(name))
        assert cli_grade(tmp_path, dataset, preds, state_dir) == 0, capsys.readouterr()
        ours = json.loads((tmp_path / f"m__{name}.r.json").read_text())
        theirs = swebench_run_report(tmp_path, swebench.load_predictions(preds), [instance], "r")
        # swebench's own run report on the same logs, plus Pomona's verdicts
        assert {k: ours[k] for k in theirs} == theirs and ours[bucket] == [IID], (name, ours)
        assert ours["unresolved_ids"] == ([IID] if name in ("wrong", "spoof") else [])
        log_dir = swebench.log_dir_for(tmp_path, "r", f"m/{name}", IID)
        if name in ("gold", "wrong"):
            written = json.loads((log_dir / "report.json").read_text())
            verdict = written[IID].pop("pomona_verdict")
            assert written == swebench.regrade(instance, log_dir)
            assert verdict == ("resolved" if name == "gold" else "unresolved")
            log = (log_dir / "test_output.txt").read_text()
            assert "conda activate testbed" in log and "PASSED" in log  # the env's pytest ran
            v = json.loads((log_dir / "verification.json").read_text())
            assert v["integrity"]["shown"] and v["witness"]["sites"] == [
                "/opt/miniconda3/envs/testbed/lib/python3.11/site-packages"
            ], v
            assert v["image"] == IMAGE and (v["image_digest"] or "").startswith("sha256:")
    out = capsys.readouterr().out
    assert f"{IID}: unapplied - the patch does not apply" in out
    assert f"{IID}: spoof - " in out and "1 spoof" in out
    assert json.loads((tmp_path / "logs/run_evaluation/r/run.json").read_text())["dataset"] == str(
        dataset
    )
    # like swebench, a graded instance is not graded again under the same run id
    preds = write_preds(tmp_path / "gold.jsonl", IID, "m/gold", patch_of("gold"))
    assert cli_grade(tmp_path, dataset, preds, state_dir) == 0
    assert "already graded in run r" in capsys.readouterr().out


def test_the_official_layout_as_the_sandbox_user_is_an_environment_failure(
    official_row: dict[str, Any], client: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What went wrong before: uid 1000 cannot write root's /testbed, and git refuses it."""
    monkeypatch.setattr(swebench.testbed, "user_of", lambda instance: "pomona")
    pred = swebench.prediction(IID, "m", patch_of("gold"))
    g = swebench.grade(client, swebench.normalize(official_row), pred, tmp_path, "r")
    assert not g.resolved and g.infra_failure, g.message
    assert "dubious ownership" in g.infra_failure or "Permission denied" in g.infra_failure


def host_instance(iid: str = "pytoolz__toolz-1", **changes: Any) -> dict[str, Any]:
    return {**LOCAL[iid], **changes}


@pytest.mark.parametrize(
    ("variant", "fault"),
    [
        ("python", None),  # eval scripts written for conda images call `python`: it works
        ("not-found", "the test command could not run (exit 127)"),
        ("no-framework", "the test framework is missing"),
    ],
)
def test_eval_scripts_that_cannot_run_are_environment_failures(
    client: Any, tmp_path: Path, variant: str, fault: str | None
) -> None:
    inst = host_instance()
    script = inst["eval_script"]
    changes: dict[str, Any] = {
        "python": {"eval_script": script.replace("python3 -m pytest", "python -m pytest")},
        "not-found": {"eval_script": script.replace("python3 -m pytest", "nosetests")},
        "no-framework": {swebench.TEST_DEPENDENCIES: ["packaging"]},
    }[variant]
    pred = swebench.prediction(inst["instance_id"], "m", inst["patch"])
    g = swebench.grade(client, {**inst, **changes}, pred, tmp_path, "r")
    if fault is None:
        assert g.resolved and g.infra_failure is None
    else:
        assert not g.resolved and g.infra_failure.startswith(fault), g.infra_failure
        assert (
            grading._grade_one(client, {**inst, **changes}, pred, tmp_path, "r2", 600).status
            == "error"
        )


def test_declared_test_dependencies_come_from_pomonas_environment(
    client: Any, tmp_path: Path
) -> None:
    inst = host_instance(**{swebench.TEST_DEPENDENCIES: ["pytest", "packaging"]})
    inst["eval_script"] = inst["eval_script"].replace(
        "python3 -m pytest", "python3 -c 'import packaging.version' && python3 -m pytest"
    )
    pred = swebench.prediction(inst["instance_id"], "m", inst["patch"])
    assert swebench.grade(client, inst, pred, tmp_path, "r").resolved
    missing = {**inst, swebench.TEST_DEPENDENCIES: ["pytest", "no-such-distribution"]}
    with pytest.raises(swebench.VerifierError, match="not installed in Pomona's environment"):
        swebench.grade(client, missing, pred, tmp_path, "r2")


# --- every dataset shape --------------------------------------------------------------------------


def _shapes(row: dict[str, Any], smith_image: str) -> dict[str, tuple[str, Any]]:
    """The official row re-published in each dataset's shape and storage: name -> (shape, writer)."""
    inst = LOCAL[IID]
    base = {
        k: row[k]
        for k in (
            "instance_id",
            "repo",
            "base_commit",
            "patch",
            "test_patch",
            "problem_statement",
            "hints_text",
            "created_at",
            "version",
        )
    }
    f2p, p2p = inst["FAIL_TO_PASS"], inst["PASS_TO_PASS"]
    four_x = {
        **base,
        "FAIL_TO_PASS": json.dumps(f2p),
        "PASS_TO_PASS": json.dumps(p2p),
        "environment_setup_commit": inst["base_commit"],
    }
    smith_id = "jpvanhal__inflection.a1b2c3d4.func_pm_remove_cond__pomona1"
    smith = {
        "instance_id": smith_id,
        "repo": "swesmith/jpvanhal__inflection.a1b2c3d4",
        "patch": swe_datasets.reverse_patch(inst["patch"]),
        "FAIL_TO_PASS": f2p,
        "PASS_TO_PASS": p2p,
        "created_at": "2026-01-01",
        "image_name": smith_image,
        "problem_statement": inst["problem_statement"],
    }
    rebench = {
        **base,
        "FAIL_TO_PASS": f2p,
        "PASS_TO_PASS": p2p,
        "docker_image": row["image"],
        "install_config": {
            "test_cmd": swe_datasets.PYTEST,
            "log_parser": "parse_log_pytest",
            "python": "3.11",
        },
        "environment_setup_commit": inst["base_commit"],
    }
    lite = {k: v for k, v in row.items() if k != swebench.TEST_DEPENDENCIES}
    return {
        "verified": (
            "5.x",
            lambda d: write_parquet_repo(d, [{**lite, "difficulty": "<15 min fix"}]),
        ),
        "lite": ("5.x", lambda d: _save(d, [lite], as_dict=True)),
        "SWE-Gym": ("4.x", lambda d: _jsonl(d / "SWE-Gym.jsonl", [four_x])),
        "swe-smith": ("swe-smith", lambda d: _parquet(d / "smith.parquet", [smith])),
        "swe-rebench": ("swe-rebench", lambda d: _save(d, [rebench], as_dict=False)),
    }


def _save(directory: Path, rows: list[dict[str, Any]], as_dict: bool) -> Path:
    from datasets import Dataset, DatasetDict

    data = Dataset.from_list(rows)
    (DatasetDict({"test": data}) if as_dict else data).save_to_disk(str(directory))
    return directory


def _jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _parquet(path: Path, rows: list[dict[str, Any]]) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


SMITH_IMAGE = "jyangballin/swesmith.x86_64.jpvanhal_1776_inflection.a1b2c3d4"


@pytest.fixture(scope="module")
def shape_images(official_row: dict[str, Any]) -> None:
    official.tag(IMAGE, swebench_image("xingyaoww"))
    smith_id = "jpvanhal__inflection.a1b2c3d4.func_pm_remove_cond__pomona1"
    official.build(f"{SMITH_IMAGE}:latest", LOCAL[IID], official.smith_branch(LOCAL[IID], smith_id))


def swebench_image(namespace: str) -> str:
    from swebench.task.checks import expected_image

    return expected_image(IID, namespace)


@pytest.mark.parametrize("dataset", ["verified", "lite", "SWE-Gym", "swe-smith", "swe-rebench"])
def test_every_dataset_shape_grades(
    official_row: dict[str, Any], shape_images: None, state_dir: str, tmp_path: Path, dataset: str
) -> None:
    shape, write = _shapes(official_row, SMITH_IMAGE)[dataset]
    path = write(tmp_path / dataset)
    (instance,) = swe_datasets.load(str(path)).instances
    assert instance["pomona_shape"] == shape
    iid = instance["instance_id"]
    preds = write_preds(tmp_path / "gold.jsonl", iid, "gold", instance["patch"])
    assert cli_grade(tmp_path, path, preds, state_dir, run_id="r") == 0, dataset
    log_dir = swebench.log_dir_for(tmp_path, "r", "gold", iid)
    assert official.swebench_report(log_dir) == swebench.regrade(instance, log_dir)
    ours = json.loads((tmp_path / "gold.r.json").read_text())
    theirs = swebench_run_report(tmp_path, swebench.load_predictions(preds), [instance], "r")
    assert {k: ours[k] for k in theirs} == theirs  # swebench's own, plus Pomona's verdicts
    assert ours["resolved_ids"] == [iid]


def test_gold_predictions_and_bad_input(tmp_path: Path, state_dir: str, capsys: Any) -> None:
    dataset = write_parquet_repo(tmp_path / "d", [official.official_row(LOCAL[IID], IMAGE)])
    stray = write_preds(tmp_path / "p.jsonl", "nobody__nothing-1", "m", "diff")
    assert cli_grade(tmp_path, dataset, stray, state_dir) == grading.EXIT_NOT_GRADED
    assert "not in" in capsys.readouterr().err
    (tmp_path / "bad.jsonl").write_text("{not json\n")
    assert (
        cli_grade(tmp_path, dataset, tmp_path / "bad.jsonl", state_dir) == grading.EXIT_NOT_GRADED
    )
    assert "is not valid JSONL" in capsys.readouterr().err
    assert cli_grade(tmp_path, tmp_path / "missing", "gold", state_dir) == grading.EXIT_NOT_GRADED
    assert "cannot load dataset" in capsys.readouterr().err
    missing_image = write_parquet_repo(
        tmp_path / "m",
        [official.official_row(LOCAL[IID], "swebench/sweb.eval.x86_64.no_1776_such-1:latest")],
    )
    assert cli_grade(tmp_path, missing_image, "gold", state_dir, "g") == grading.EXIT_NOT_GRADED
    assert "image failure: " in capsys.readouterr().out
    # the run report carries the typed failure, as the console does
    report = json.loads((tmp_path / "gold.g.json").read_text())
    assert report["infra_failure_ids"] == [IID] and report["error_ids"] == [IID]
    assert report["failure_reasons"][IID].startswith("image: image swebench/sweb.eval")


def test_a_missing_testbed_and_a_missing_engine_are_infrastructure_failures(
    tmp_path: Path, state_dir: str, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """/testbed absent from the image: an environment failure in the console, report.json's
    run report and verification.json alike, never "the patch does not apply". An engine that
    cannot be reached: one line and exit 2."""
    row = {**official.official_row(LOCAL[IID], IMAGE), "image": "host"}
    dataset = write_parquet_repo(tmp_path / "d", [row])
    assert cli_grade(tmp_path, dataset, "gold", state_dir) == grading.EXIT_NOT_GRADED
    out = capsys.readouterr().out
    assert f"{IID}: error - environment failure: /testbed is missing or unreadable" in out
    report = json.loads((tmp_path / "gold.r.json").read_text())
    assert report["infra_failure_ids"] == [IID]
    assert report["failure_reasons"][IID].startswith("environment: /testbed is missing")
    log_dir = swebench.log_dir_for(tmp_path, "r", "gold", IID)
    assert json.loads((log_dir / "verification.json").read_text())["failure"]["kind"] == (
        "environment"
    )
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    code = main(["grade", "-d", str(dataset), "-p", "gold", "--run-id", "e", "--runtime",
                 "docker", "--log-root", str(tmp_path), "--report-dir", str(tmp_path)])  # fmt: skip
    err = capsys.readouterr().err
    assert code == grading.EXIT_NOT_GRADED and "cannot reach the docker engine" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_dataset_labels_tell_datasets_apart(tmp_path: Path) -> None:
    assert swe_datasets.label_of(str(swe_tasks.DATA)) == "pomona/swe-local"
    assert swe_datasets.label_of("SWE-bench/SWE-bench_Verified") == "SWE-bench/SWE-bench_Verified"
    one, two = tmp_path / "a" / "tasks.jsonl", tmp_path / "b" / "tasks.jsonl"
    for p in (one, two):
        _jsonl(p, [])
    assert swe_datasets.label_of(str(one)) != swe_datasets.label_of(str(two))
    assert swe_datasets.label_of(str(one)).startswith("tasks.jsonl@")
    assert swe_datasets.resolve("verified") == "SWE-bench/SWE-bench_Verified"


# --- pomona run on the official layout ---------------------------------------------------------


@pytest.mark.parametrize("harness", ["pi", "claude-code"])
def test_pomona_run_on_the_official_layout(
    official_row: dict[str, Any], state_dir: str, tmp_path: Path, harness: str
) -> None:
    """The agent runs as root at the image's /testbed; its patch is graded there too."""
    from pomona import trajectories
    from pomona.harnesses import payload
    from pomona.run import run_benchmark

    if missing := payload.ensure([harness]):
        pytest.fail(f"harness payload unavailable: {missing}")
    dataset = write_parquet_repo(tmp_path / "verified", [official_row])
    label = f"swebench:{swe_datasets.label_of(str(dataset))}"
    runs = tmp_path / "runs"
    result = run_benchmark(
        f"swebench:{dataset}",
        harness,
        "oracle",
        state_dir=state_dir,
        trajectories=runs,
        progress=False,
    )
    (record,) = result.records
    assert (record.failure_kind, record.resolved) == ("none", True), record.failure_message
    assert result.swe_report["resolved_ids"] == [IID]
    preds = (runs / "swebench" / f"{harness}__oracle.{result.run_id}.predictions.jsonl").read_text()
    assert json.loads(preds)["model_name_or_path"] == f"{harness}/oracle"
    (row,) = trajectories.read(runs, "episodes").to_pylist()
    assert (row["benchmark"], row["harness"], row["model"]) == (label, harness, "oracle")


def test_an_instances_own_agent_timeout_is_the_tasks() -> None:
    task = swebench.to_task({**LOCAL[IID], swebench.AGENT_TIMEOUT: 42})
    assert task.agent_timeout(600) == 42.0
    assert swebench.to_task(LOCAL[IID]).agent_timeout(600) == 600.0


ML = {i["instance_id"]: i for i in swebench.load_instances(swe_tasks.MULTILINGUAL_DATA)}


def test_a_multilingual_dataset_grades(state_dir: str, tmp_path: Path) -> None:
    """Multilingual's shape: 5.x rows without environment_setup_commit, a non-Python log
    parser (TAP), an image holding Node: graded like the Python ones, reports equal swebench's."""
    from swebench.task.checks import expected_image

    inst = ML["fastify__forwarded-1"]
    image = official.build(expected_image(inst["instance_id"]), inst, node=True)
    row = {
        k: v
        for k, v in inst.items()
        if k not in (swebench.TASK_DIR_KEY, swebench.TEST_DEPENDENCIES, swebench.TOOLCHAINS)
    }
    path = _parquet(tmp_path / "multilingual.parquet", [{**row, "image": image}])
    (instance,) = swe_datasets.load(str(path)).instances
    assert instance["log_parser"] == "parse_log_tap" and swebench.user_of(instance) == "root"
    iid = instance["instance_id"]
    preds = write_preds(tmp_path / "gold.jsonl", iid, "gold", inst["patch"])
    assert cli_grade(tmp_path, path, preds, state_dir, run_id="r") == 0
    log_dir = swebench.log_dir_for(tmp_path, "r", "gold", iid)
    assert official.swebench_report(log_dir) == swebench.regrade(instance, log_dir)
    assert "TAP version" in (log_dir / "test_output.txt").read_text()
    ours = json.loads((tmp_path / "gold.r.json").read_text())
    theirs = swebench_run_report(tmp_path, swebench.load_predictions(preds), [instance], "r")
    assert {k: ours[k] for k in theirs} == theirs  # swebench's own, plus Pomona's verdicts


def test_build_images_builds_from_the_task_repos_dockerfile(
    state_dir: str, tmp_path: Path, capsys: Any
) -> None:
    import subprocess

    from swebench.task.checks import check_task_repo, errors, expected_image
    from swebench.task.repo import dump_tests, dump_yaml

    inst = LOCAL["pytoolz__toolz-1"]
    iid, image = inst["instance_id"], expected_image(inst["instance_id"])
    repo = tmp_path / "repo"
    task = repo / "tasks" / iid
    task.mkdir(parents=True)
    official.context(task, inst)  # the task's Dockerfile builds swebench's layout
    (repo / "sweb.yaml").write_text(dump_yaml({"datasets": ["me/built"], "splits": ["test"]}))
    meta = {
        k: inst[k]
        for k in (
            "instance_id",
            "repo",
            "version",
            "base_commit",
            "log_parser",
            "eval_type",
            "created_at",
        )
    }
    (task / "task.yaml").write_text(
        dump_yaml({**meta, "split": "test", "datasets": ["me/built"], "image": image})
    )
    (task / "tests.json").write_text(
        dump_tests({k: inst[k] for k in ("FAIL_TO_PASS", "PASS_TO_PASS")})
    )
    (task / "eval.sh").write_text(official.official_row(inst, image)["eval_script"])
    for name, key in (
        ("gold.patch", "patch"),
        ("test.patch", "test_patch"),
        ("problem_statement.md", "problem_statement"),
    ):
        (task / name).write_text(inst[key])
    assert errors(check_task_repo(repo)) == []
    subprocess.run(["docker", "rmi", "-f", image], capture_output=True)
    assert cli_grade(tmp_path, repo, "gold", state_dir, run_id="nobuild") == grading.EXIT_NOT_GRADED
    assert "pass --build-images to build it from the task repo" in capsys.readouterr().out
    assert (
        main(
            [
                "grade",
                "-d",
                str(repo),
                "-p",
                "gold",
                "--run-id",
                "built",
                "--build-images",
                "--log-root",
                str(tmp_path),
                "--report-dir",
                str(tmp_path),
                "--state-dir",
                state_dir,
            ]
        )
        == 0
    )
    assert f"building {image}" in capsys.readouterr().err
    assert (
        subprocess.run(["docker", "image", "inspect", image], capture_output=True).returncode == 0
    )
