"""SWE-bench instances as Pomona works with them: the official 5.x row, read from a task repo
(`sweb.yaml`, `tasks/<id>/...`) or from Parquet / JSONL rows (`datasets` reads every other
source and shape), plus the few facts about where an instance runs.

A row names its image (`swebench/sweb.eval.x86_64.<id>`), which holds the repository at
/testbed, owned by root, and the `testbed` conda environment: like swebench's own containers,
the agent and the grader run there as root (inside the sandbox's user namespace). A task
directory may instead carry `repo.bundle` (Pomona's local tasks): it runs on the host image as
the sandbox user.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, NotRequired, TypedDict, TypeVar, cast

from pomona.errors import Unknown, UsageError

TESTBED = "/testbed"
BUNDLE = "repo.bundle"
TASK_DIR_KEY: Final = "_task_dir"  # where an instance loaded from a task repo lives (not official)
# Pomona's own optional instance fields (task.yaml keys or row columns):
TEST_DEPENDENCIES: Final = (
    "test_dependencies"  # Python distributions a host-image task's tests import
)
TOOLCHAINS: Final = "toolchains"  # ["node"]: runtimes a host-image task gets from the payload
CHECKOUT: Final = (
    "pomona_checkout"  # a ref to check out at /testbed first (SWE-smith's bug branches)
)
AGENT_TIMEOUT: Final = "agent_timeout_sec"  # the agent's time budget for this instance


class SweInstance(TypedDict):
    """One SWE-bench instance as Pomona works with it: the official 5.x row (datasets.adapt
    brings every other shape to it) and Pomona's own optional fields. The keys below are the
    ones Pomona reads; a row's other columns ride along untouched to swebench's functions."""

    instance_id: str
    FAIL_TO_PASS: list[str]  # test ids (a JSON string in some sources, a list once normalized)
    PASS_TO_PASS: list[str]
    eval_type: str
    hints_text: str
    repo: NotRequired[str]
    base_commit: NotRequired[str]
    patch: NotRequired[str]  # the gold fix
    test_patch: NotRequired[str]
    problem_statement: NotRequired[str]
    version: NotRequired[str]
    created_at: NotRequired[str]
    environment_setup_commit: NotRequired[str]
    image: NotRequired[str]  # the eval image (a task with a repo bundle runs on the host instead)
    eval_script: NotRequired[str]
    log_parser: NotRequired[str]
    split: NotRequired[str]
    bug_patch: NotRequired[str]  # SWE-smith: the published bug, whose reverse is `patch`
    pomona_shape: NotRequired[str]  # the shape the row was adapted from (datasets.shape_of)
    _task_dir: NotRequired[str]  # TASK_DIR_KEY
    test_dependencies: NotRequired[list[str]]  # TEST_DEPENDENCIES
    toolchains: NotRequired[list[str]]  # TOOLCHAINS
    pomona_checkout: NotRequired[str]  # CHECKOUT
    agent_timeout_sec: NotRequired[float]  # AGENT_TIMEOUT


RowT = TypeVar("RowT", bound=Mapping[str, Any])  # a raw row or a SweInstance


class Prediction(TypedDict):
    """A SWE-bench prediction, in the official shape."""

    instance_id: str
    model_name_or_path: str
    model_patch: str | None


def normalize(row: dict[str, Any]) -> SweInstance:
    """A row with the fields every instance has, in their Python types: the one place where a
    row read from a file or a dataset becomes a SweInstance."""
    row = dict(row)
    if not isinstance(row.get("instance_id"), str):
        raise UsageError(f"a SWE-bench instance needs an instance_id string: {str(row)[:80]!r}")
    for key in ("FAIL_TO_PASS", "PASS_TO_PASS"):
        value = row.get(key) or []
        row[key] = json.loads(value) if isinstance(value, str) else list(value)
    row.setdefault("eval_type", "pass_and_fail")
    row.setdefault("hints_text", "")
    return cast(SweInstance, row)


def load_instances(source: str | Path, instance_ids: list[str] | None = None) -> list[SweInstance]:
    """Rows from a task repo directory, a .parquet, .jsonl or .json file, in the official schema."""
    path = Path(source)
    if path.is_dir():
        from swebench.task.repo import load_task_repo, tasks_root

        rows = load_task_repo(path, instance_ids)
        for row in rows:
            row[TASK_DIR_KEY] = str(tasks_root(path) / row["instance_id"])
        return [normalize(r) for r in rows]
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        rows = pq.read_table(path).to_pylist()
    elif path.suffix == ".jsonl":
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    elif path.suffix == ".json":
        data = json.loads(path.read_text())
        rows = list(data.values()) if isinstance(data, dict) else data
    else:
        raise UsageError(
            f"cannot read SWE-bench instances from {source}: give a task repo "
            "directory or a .parquet, .jsonl or .json file"
        )
    return [normalize(r) for r in select(rows, instance_ids, str(source))]


def select(rows: list[RowT], instance_ids: list[str] | None, source: str) -> list[RowT]:
    """The rows named (all when None); an unknown id is an error, never a quietly smaller run."""
    if instance_ids is None:
        return rows
    missing = set(instance_ids) - {r["instance_id"] for r in rows}
    if missing:
        raise Unknown(f"not in {source}: {' '.join(sorted(missing))}")
    return [r for r in rows if r["instance_id"] in set(instance_ids)]


def bundle_of(instance: SweInstance) -> Path | None:
    task_dir = instance.get(TASK_DIR_KEY)
    path = Path(task_dir) / BUNDLE if task_dir else None
    return path if path is not None and path.is_file() else None


def image_of(instance: SweInstance) -> str:
    return "host" if bundle_of(instance) else instance["image"]


def user_of(instance: SweInstance) -> str:
    """Who runs commands: root in an official image (its /testbed and conda env are root's, and
    swebench's own containers run as root); the sandbox user on the host image."""
    return "pomona" if bundle_of(instance) else "root"


def toolchains(instance: SweInstance) -> list[str]:
    return list(instance.get(TOOLCHAINS) or [])


def base_ref(instance: SweInstance) -> str:
    """What the agent's diff is taken against: the checked-out ref, else the base commit."""
    return instance.get(CHECKOUT) or instance["base_commit"]


def patch_files(patch: str) -> list[str]:
    """Paths a unified diff touches (old and new names)."""
    files: list[str] = []
    for line in patch.splitlines():
        m = re.match(r"^(?:---|\+\+\+) (?:[ab]/)?(\S+)", line)
        if m and m.group(1) != "/dev/null" and m.group(1) not in files:
            files.append(m.group(1))
    return files


def model_name(harness: str, model: str) -> str:
    """`model_name_or_path` for a harness running a model: both matter to the score."""
    return f"{harness}/{model}"


def prediction(instance_id: str, model: str, patch: str | None) -> Prediction:
    return {"instance_id": instance_id, "model_name_or_path": model, "model_patch": patch}
