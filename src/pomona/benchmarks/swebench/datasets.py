"""SWE-bench-format datasets from wherever they live, in whichever shape they were published, as
the 5.x instance rows Pomona grades (`image`, `eval_script`, `log_parser`, `eval_type`).

Sources, tried in this order for a dataset name:
    a task repo directory (sweb.yaml, tasks/<id>/)       swebench's 5.x on-disk format
    a .parquet, .jsonl or .json file                     rows, one per instance
    a directory written by `datasets` save_to_disk       (a Dataset, or a DatasetDict by split)
    a directory with <split>.parquet                     swebench's own local convention
    any other directory                                  a Hugging Face dataset repo checkout
                                                         (data/<split>-*.parquet, *.jsonl ...)
    anything else                                        a Hugging Face dataset name, loaded with
                                                         `datasets.load_dataset` (hub or its cache)
Short names: full, verified, lite, multilingual, multimodal, swe-gym, swe-smith, swe-rebench.

Shapes, told apart by their columns:
    5.x rows (SWE-bench, Verified, Lite, Multilingual today) carry their eval script: used as is.
    SWE-rebench rows carry `install_config` (its test command and log parser) and `docker_image`.
    SWE-smith rows carry `image_name` and no test patch: the bug lives on a branch named like the
    instance, whose parent commit still has the tests (swesmith's harness checks it out), and
    their `patch` introduces the bug, so the gold fix is its reverse.
    4.x rows (SWE-Gym, older dumps) carry neither.
For the last three Pomona writes the eval script the way swebench 4.x wrote Python ones (activate
the testbed env, reset the test files, apply the test patch, run the test command on them between
the markers, reset again) with the row's test command, or the standard pytest one. Rows whose
repository needs another runner must bring their own `eval_script` column.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pomona.benchmarks import swebench
from pomona.errors import NoData, Unknown, UsageError

ALIASES = {
    "full": "SWE-bench/SWE-bench",
    "verified": "SWE-bench/SWE-bench_Verified",
    "lite": "SWE-bench/SWE-bench_Lite",
    "multilingual": "SWE-bench/SWE-bench_Multilingual",
    "multimodal": "SWE-bench/SWE-bench_Multimodal",
    "swe-gym": "SWE-Gym/SWE-Gym",
    "swe-smith": "SWE-bench/SWE-smith",
    "swe-rebench": "nebius/SWE-rebench",
}
PYTEST = (
    "pytest --no-header -rA --tb=no -p no:cacheprovider"  # swebench 4.x's default for pytest repos
)
SWESMITH_PYTEST = "pytest --disable-warnings --color=no --tb=no --verbose -rA"
HEREDOC = "EOF_114329324912"
ACTIVATE = ("source /opt/miniconda3/bin/activate", "conda activate testbed")
NON_TEST = (
    ".json",
    ".png",
    "csv",
    ".txt",
    ".md",
    ".jpg",
    ".jpeg",
    ".pkl",
    ".yml",
    ".yaml",
    ".toml",
)


@dataclass
class SweDataset:
    name: str  # what was asked for, short names expanded
    label: str  # how leaderboards name it: the dataset's own name, or <dir>@<hash of its path>
    split: str
    instances: list[swebench.SweInstance]


def resolve(name: str) -> str:
    return ALIASES.get(name.strip().lower(), name)


def label_of(name: str) -> str:
    """A dataset's name for leaderboards: what a task repo's sweb.yaml publishes, a hub name as
    is, else the file's name with a short hash of its absolute path (two local sets never merge)."""
    path = Path(name)
    if not path.exists():
        return name
    config = path / "sweb.yaml"
    if config.is_file():
        from swebench.task.repo import load_config

        published = load_config(path).get("datasets") or []
        if published:
            return str(published[0])
    digest = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:8]
    return f"{path.resolve().name}@{digest}"


def _is_task_repo(path: Path) -> bool:
    return (path / "sweb.yaml").is_file() or (path / "tasks").is_dir()


def _from_disk(path: Path, split: str) -> list[dict[str, Any]] | None:
    """Rows of a directory `datasets` saved, or of swebench's <split>.parquet; None otherwise."""
    from datasets import load_dataset, load_from_disk

    if (path / "dataset_dict.json").is_file():
        saved = load_from_disk(str(path))
        if split not in saved:
            raise Unknown(f"{path} has no split {split!r}; it has {', '.join(saved)}")
        return list(saved[split])
    if (path / "state.json").is_file() and (path / "dataset_info.json").is_file():
        return list(load_from_disk(str(path)))
    if (path / split / "dataset_info.json").is_file():
        return list(load_from_disk(str(path / split)))
    if (path / f"{split}.parquet").is_file():
        return list(
            load_dataset("parquet", data_files=str(path / f"{split}.parquet"), split="train")
        )
    return None


def read_rows(name: str, split: str = "test") -> list[dict[str, Any]]:
    """The raw rows of a dataset, before any shape is adapted."""
    from datasets import disable_progress_bars, load_dataset

    disable_progress_bars()

    path = Path(name)
    if path.is_file():
        if path.suffix not in (".parquet", ".jsonl", ".json"):
            raise UsageError(
                f"cannot read SWE-bench instances from {name}: give a task repo, a "
                ".parquet, .jsonl or .json file, a saved dataset or a dataset name"
            )
        return [dict(r) for r in swebench.load_instances(path)]
    if path.is_dir():
        if _is_task_repo(path):
            rows = swebench.load_instances(path)
            return [dict(r) for r in rows if r.get("split", split) == split]
        saved = _from_disk(path, split)
        if saved is not None:
            return saved
    if not path.exists() and (path.is_absolute() or name.startswith((".", "~"))):
        raise NoData(f"cannot load dataset {name!r}: no such file or directory")
    try:
        return list(load_dataset(str(path) if path.is_dir() else name, split=split))
    except Exception as e:  # noqa: BLE001 - hub, cache and format errors alike: say which dataset
        raise UsageError(
            f"cannot load dataset {name!r} (split {split!r}): {type(e).__name__}: {e}"
        ) from None


# --- shapes ------------------------------------------------------------------------------------


def shape_of(row: dict[str, Any]) -> str:
    if row.get("eval_script"):
        return "5.x"
    if row.get("install_config") is not None:
        return "swe-rebench"
    if row.get("image_name") and not row.get("test_patch"):
        return "swe-smith"
    return "4.x"


def _with_tag(image: str) -> str:
    return image if ":" in image.rsplit("/", 1)[-1] else f"{image}:latest"


def test_directives(test_patch: str) -> list[str]:
    """The test files a test patch touches, as 4.x eval scripts pass them to the test command."""
    files = re.findall(r"^diff --git a/.* b/(.*)$", test_patch, re.M)
    return [f for f in files if not f.endswith(NON_TEST)]


def four_x_script(
    base_commit: str, test_patch: str, test_cmd: str, install: str | None = None
) -> str:
    """An eval script in the shape swebench 4.x wrote for Python repositories."""
    files = " ".join(test_directives(test_patch))
    reset = f"git checkout {base_commit} {files}"
    lines = [
        *ACTIVATE,
        f"cd {swebench.TESTBED}",
        f"git config --global --add safe.directory {swebench.TESTBED}",
        "git status",
        f"git -c core.fileMode=false diff {base_commit}",
        *([install] if install else []),
        reset,
        f"git apply -v - <<'{HEREDOC}'\n{test_patch.rstrip(chr(10))}\n{HEREDOC}",
        ": '>>>>> Start Test Output'",
        f"{test_cmd} {files}".rstrip(),
        ": '>>>>> End Test Output'",
        reset,
    ]
    return "#!/bin/bash\nset -uxo pipefail\n" + "\n".join(lines) + "\n"


def swesmith_script(instance_id: str, tests: list[str]) -> str:
    """SWE-smith's evaluation: the bug commit's test files back (the branch's last commit only
    removed them), then the repository's test command, as swesmith's Python profile runs it."""
    files = sorted({t.split("::", 1)[0] for t in tests})
    restore = [f"git checkout {instance_id}~1 -- {' '.join(files)}"] if files else []
    lines = [
        *ACTIVATE,
        f"cd {swebench.TESTBED}",
        *restore,
        ": '>>>>> Start Test Output'",
        SWESMITH_PYTEST,
        ": '>>>>> End Test Output'",
    ]
    return "#!/bin/bash\nset -uxo pipefail\n" + "\n".join(lines) + "\n"


_SWAP = {
    "new file mode": "deleted file mode",
    "deleted file mode": "new file mode",
    "old mode": "new mode",
    "new mode": "old mode",
    "rename from": "rename to",
    "rename to": "rename from",
    "copy from": "copy to",
    "copy to": "copy from",
}


def reverse_patch(patch: str) -> str:
    """The unified diff that undoes `patch` (SWE-smith publishes the bug; the fix is its
    reverse): sides, hunk ranges and file headers swapped, as `git apply --reverse` reads it."""
    out: list[str] = []
    lines = patch.splitlines(keepends=True)
    in_hunk, i = False, 0
    while i < len(lines):
        line = lines[i]
        if m := re.match(r"^diff --git a/(.*) b/(.*?)(\r?\n)$", line):
            in_hunk = False
            out.append(f"diff --git a/{m.group(2)} b/{m.group(1)}{m.group(3)}")
        elif m := re.match(r"^@@ -(\S+) \+(\S+) @@(.*)$", line, re.S):
            in_hunk = True
            out.append(f"@@ -{m.group(2)} +{m.group(1)} @@{m.group(3)}")
        elif in_hunk:
            out.append(("-" if line[0] == "+" else "+") + line[1:] if line[:1] in "+-" else line)
        elif m := re.match(r"^index ([0-9a-f]+)\.\.([0-9a-f]+)(.*)$", line, re.S):
            out.append(f"index {m.group(2)}..{m.group(1)}{m.group(3)}")
        elif line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            out += ["--- " + lines[i + 1][4:], "+++ " + line[4:]]
            i += 1
        else:
            key = next((k for k in _SWAP if line.startswith(k + " ")), None)
            out.append(_SWAP[key] + line[len(key) :] if key else line)
        i += 1
    return "".join(out)


def _parser(name: str | None) -> str:
    from swebench.harness.log_parsers import PARSER_REGISTRY

    return name if name is not None and name in PARSER_REGISTRY else "parse_log_pytest"


def adapt(row: dict[str, Any], dataset: str = "") -> swebench.SweInstance:
    """One row of any shape as a 5.x instance (the row's own columns win where present)."""
    from swebench.task.checks import expected_image

    row = dict(row)
    iid = row["instance_id"]
    shape = shape_of(row)
    row.setdefault("version", "")
    row.setdefault("problem_statement", "")
    if shape == "swe-rebench":
        config = row["install_config"]
        config = json.loads(config) if isinstance(config, str) else dict(config or {})
        row.setdefault("image", row.get("docker_image") or expected_image(iid, "swerebench"))
        row["log_parser"] = row.get("log_parser") or _parser(config.get("log_parser"))
        row["eval_script"] = four_x_script(
            row["base_commit"],
            row["test_patch"],
            config.get("test_cmd") or PYTEST,
            config.get("install"),
        )
    elif shape == "swe-smith":
        row["image"] = row.get("image") or _with_tag(row["image_name"])
        row[swebench.CHECKOUT] = iid
        row["bug_patch"], row["patch"] = row["patch"], reverse_patch(row["patch"])
        row.setdefault("base_commit", iid)
        row.setdefault("test_patch", "")
        row.setdefault("log_parser", "parse_log_pytest")
        tests = [*_list(row.get("FAIL_TO_PASS")), *_list(row.get("PASS_TO_PASS"))]
        row["eval_script"] = swesmith_script(iid, tests)
    elif shape == "4.x":
        namespace = "xingyaoww" if "swe-gym" in dataset.lower() else "swebench"
        row.setdefault("image", expected_image(iid, namespace))
        row.setdefault("log_parser", "parse_log_pytest")
        row["eval_script"] = four_x_script(
            row["base_commit"], row.get("test_patch") or "", row.get("test_cmd") or PYTEST
        )
    else:
        row["image"] = row.get("image") or expected_image(iid)
    row["pomona_shape"] = shape
    return swebench.normalize(row)


def _list(value: Any) -> list[str]:
    return json.loads(value) if isinstance(value, str) else list(value or [])


def load(dataset: str, split: str = "test", instance_ids: list[str] | None = None) -> SweDataset:
    """A dataset by name or path, every row adapted; unknown instance ids are an error."""
    name = resolve(dataset)
    rows = read_rows(name, split)
    if not rows:
        raise UsageError(f"dataset {name!r} has no instances in split {split!r}")
    missing = [k for k in ("instance_id",) if k not in rows[0]]
    if missing:
        raise UsageError(f"{name!r} does not look like a SWE-bench dataset: no {missing[0]} column")
    instances = [adapt(r, name) for r in swebench.select(rows, instance_ids, name)]
    return SweDataset(name, label_of(name), split, instances)
