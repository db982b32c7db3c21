"""SWE-bench 5.x: load instances, run agents at the base commit, and grade patches the official way.

Instances come from a 5.x task repo (`sweb.yaml`, `tasks/<id>/...`) or from official Parquet /
JSONL rows. Grading follows swebench's `run_instance` step by step in a fresh sandbox (the
`git apply` fallback chain, `/eval.sh` with the exit-code marker, stderr merged into the log)
and then calls swebench's own `get_eval_report`, so its parsers and resolved rule decide and its
tools can re-grade Pomona's logs, which land in the official layout:
`<root>/logs/run_evaluation/<run_id>/<model>/<instance_id>/{report.json, test_output.txt, ...}`.

Between applying the patch and running the tests, the guard restores test infrastructure from
the base commit (conftest.py, pytest configuration, sitecustomize, *.pth, the task's test files):
without it a six-line conftest.py that forces every outcome to "passed" is graded resolved.

A task directory may carry `repo.bundle` (a git bundle of the base repository; Pomona's local
tasks do): the instance then runs on the host image, the bundle cloned at /testbed and pytest
installed from Pomona's own environment. Otherwise it runs on the row's `image`, which already
holds /testbed (the official images; this needs the docker runtime).
"""

from __future__ import annotations

import base64
import configparser
import contextlib
import io
import json
import re
import shlex
import tomllib
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from pomona.benchmarks.pytools import install_pytest
from pomona.benchmarks.task import Environment, Score, Task, VerifierError

TESTBED = "/testbed"
BUNDLE = "repo.bundle"
PATCH_FILE = "/tmp/patch.diff"  # swebench's CONTAINER_PATCH_FILE
TASK_DIR_KEY = "_task_dir"  # where an instance loaded from a task repo lives (not an official field)
JUNK = ("**/__pycache__/**", "**/*.pyc", ".pytest_cache/**", "**/*.orig", "**/*.rej")
INFRA_NAMES = {"conftest.py", "pytest.ini", ".pytest.ini", "tox.ini", "sitecustomize.py",
               "usercustomize.py"}
SECTION_FILES = {"setup.cfg", "pyproject.toml"}  # guarded only where their pytest section changed


# --- instances ----------------------------------------------------------------------------------


def _normalize(row: dict[str, Any]) -> dict[str, Any]:
    row = dict(row)
    for key in ("FAIL_TO_PASS", "PASS_TO_PASS"):
        value = row.get(key) or []
        row[key] = json.loads(value) if isinstance(value, str) else list(value)
    row.setdefault("eval_type", "pass_and_fail")
    row.setdefault("hints_text", "")
    return row


def load_instances(source: str | Path, instance_ids: list[str] | None = None) -> list[dict[str, Any]]:
    """Rows from a task repo directory, a .parquet, .jsonl or .json file, in the official schema."""
    path = Path(source)
    if path.is_dir():
        from swebench.task.repo import load_task_repo, tasks_root

        rows = load_task_repo(path, instance_ids)
        for row in rows:
            row[TASK_DIR_KEY] = str(tasks_root(path) / row["instance_id"])
        return [_normalize(r) for r in rows]
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        rows = pq.read_table(path).to_pylist()
    elif path.suffix == ".jsonl":
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    elif path.suffix == ".json":
        data = json.loads(path.read_text())
        rows = list(data.values()) if isinstance(data, dict) else data
    else:
        raise ValueError(f"cannot read SWE-bench instances from {source}: give a task repo "
                         "directory or a .parquet, .jsonl or .json file")
    if instance_ids is not None:
        wanted = set(instance_ids)
        missing = wanted - {r["instance_id"] for r in rows}
        if missing:
            raise KeyError(f"not in {source}: {' '.join(sorted(missing))}")
        rows = [r for r in rows if r["instance_id"] in wanted]
    return [_normalize(r) for r in rows]


def bundle_of(instance: dict[str, Any]) -> Path | None:
    task_dir = instance.get(TASK_DIR_KEY)
    path = Path(task_dir) / BUNDLE if task_dir else None
    return path if path is not None and path.is_file() else None


def image_of(instance: dict[str, Any]) -> str:
    return "host" if bundle_of(instance) else instance["image"]


def prepare_testbed(sandbox: Any, instance: dict[str, Any]) -> None:
    """Bring /testbed to the base commit. With a bundle, clone it there (remote removed, so no
    later history is reachable) and install pytest; an official image already has both."""
    bundle = bundle_of(instance)
    if bundle is None:
        return
    sandbox.write_file("/tmp/base.bundle", bundle.read_bytes())
    base = shlex.quote(instance["base_commit"])
    result = sandbox.exec(
        f"git clone -q /tmp/base.bundle {TESTBED} && cd {TESTBED} && git checkout -q {base} && "
        "git remote remove origin && git config user.email agent@pomona.invalid && "
        "git config user.name agent && rm -f /tmp/base.bundle", timeout=120)
    if result.exit_code != 0:
        raise RuntimeError(f"could not check out {instance['instance_id']}: {result.stderr.strip()}")
    install_pytest(sandbox)


def extract_patch(sandbox: Any, base_commit: str) -> str:
    """The agent's work as one diff against the base commit: tracked edits, new files, deletions
    and commits the agent made, minus build junk."""
    excludes = " ".join(shlex.quote(f":(exclude,glob){g}") for g in JUNK)
    result = sandbox.exec(
        f"cd {TESTBED} && git add -A && git -c core.fileMode=false diff --cached --no-color "
        f"{shlex.quote(base_commit)} -- . {excludes}", timeout=120)
    if result.exit_code != 0:
        raise VerifierError(f"could not take the diff: {result.stderr.strip()}")
    return result.stdout


def patch_files(patch: str) -> list[str]:
    """Paths a unified diff touches (old and new names)."""
    files: list[str] = []
    for line in patch.splitlines():
        m = re.match(r"^(?:---|\+\+\+) (?:[ab]/)?(\S+)", line)
        if m and m.group(1) != "/dev/null" and m.group(1) not in files:
            files.append(m.group(1))
    return files


def apply_commands(patch: str) -> list[str]:
    """Shell commands that apply `patch` at /testbed: the oracle's script."""
    data = base64.b64encode(patch.encode()).decode()
    return [f"cd {TESTBED} && echo {data} | base64 -d > /tmp/gold.patch && git apply -v /tmp/gold.patch"]


# --- the test-infrastructure guard ----------------------------------------------------------------


def is_infra(path: str, test_files: set[str]) -> bool:
    name = PurePosixPath(path).name
    return path in test_files or name in INFRA_NAMES or name.endswith(".pth") or name in SECTION_FILES


def pytest_section(name: str, text: str | None) -> Any:
    """The pytest configuration a setup.cfg or pyproject.toml holds; unreadable text is its own
    value, so breaking the file counts as changing it."""
    if text is None:
        return None
    try:
        if name == "pyproject.toml":
            return tomllib.loads(text).get("tool", {}).get("pytest")
        parser = configparser.ConfigParser(interpolation=None)
        parser.read_string(text)
        return {s: dict(parser[s]) for s in ("tool:pytest", "pytest") if parser.has_section(s)}
    except (tomllib.TOMLDecodeError, configparser.Error):
        return ("unreadable", text)


def _run(sandbox: Any, command: str, timeout: float = 120) -> Any:
    return sandbox.exec(command, cwd=TESTBED, timeout=timeout)


def guard_test_infra(sandbox: Any, instance: dict[str, Any]) -> list[str]:
    """Restore every test-infrastructure path the patch changed, added or deleted to its state at
    the base commit; return those paths. Judged on the tree, not on the patch text, so renames,
    `patch` fuzz and ignored directories cannot slip past."""
    base = shlex.quote(instance["base_commit"])
    listed = _run(sandbox, f"git diff --name-only --no-renames {base} && git ls-files --others")
    if listed.exit_code != 0:
        raise VerifierError(f"could not list the changed files: {listed.stderr.strip()}")
    test_files = set(patch_files(instance.get("test_patch") or ""))
    restored = []
    for path in sorted(set(listed.stdout.split())):
        if not is_infra(path, test_files):
            continue
        q = shlex.quote(path)
        at_base = _run(sandbox, f"git show {base}:{q}")
        old = at_base.stdout if at_base.exit_code == 0 else None
        name = PurePosixPath(path).name
        if name in SECTION_FILES and path not in test_files:
            now = _run(sandbox, f"cat -- {q}")
            new = now.stdout if now.exit_code == 0 else None
            if pytest_section(name, old) == pytest_section(name, new):
                continue
        fix = f"git checkout {base} -- {q}" if old is not None else f"rm -f -- {q}"
        if _run(sandbox, fix).exit_code != 0:
            raise VerifierError(f"could not restore {path} from the base commit")
        restored.append(path)
    return restored


# --- grading ------------------------------------------------------------------------------------


@dataclass
class Grade:
    instance_id: str
    resolved: bool
    report: dict[str, Any] | None  # the official report.json content; None for an empty patch
    log_dir: Path
    empty_patch: bool = False
    applied: bool = False
    guard_restored: list[str] = field(default_factory=list)
    infra_failure: str | None = None  # swebench's environment-fault reason, when it names one

    def score(self) -> Score:
        return Score(reward=1.0 if self.resolved else 0.0, resolved=self.resolved, details={
            "report": self.report, "log_dir": str(self.log_dir), "empty_patch": self.empty_patch,
            "patch_applied": self.applied, "guard_restored": self.guard_restored,
            "model_patch": (self.log_dir / "patch.diff").read_text()})


def log_dir_for(root: str | Path, run_id: str, model: str, instance_id: str) -> Path:
    from swebench.harness.constants import RUN_EVALUATION_LOG_DIR

    return Path(root) / RUN_EVALUATION_LOG_DIR / run_id / model.replace("/", "__") / instance_id


def claim_run_id(root: str | Path, run_id: str, model: str, instance_id: str) -> str:
    """`run_id`, or `run_id.1`, `run_id.2`... for the next attempt at the same instance: each
    attempt gets its own official log directory, claimed atomically (attempts run at once)."""
    for n in range(10_000):
        candidate = run_id if n == 0 else f"{run_id}.{n}"
        path = log_dir_for(root, candidate, model, instance_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            path.mkdir()
            return candidate
        except FileExistsError:
            continue
    raise RuntimeError(f"too many attempts at {instance_id} in run {run_id}")


def prediction(instance_id: str, model: str, patch: str | None) -> dict[str, Any]:
    return {"instance_id": instance_id, "model_name_or_path": model, "model_patch": patch}


def _apply_chain(sandbox: Any, patch: str, log: list[str]) -> bool:
    """swebench's fallback chain, a clean tree between attempts, then the already-applied check."""
    from swebench.harness.constants import APPLY_PATCH_FAIL, APPLY_PATCH_PASS
    from swebench.harness.run_evaluation import GIT_APPLY_CMDS

    sandbox.write_file(PATCH_FILE, patch)
    result = None
    for attempt, command in enumerate(GIT_APPLY_CMDS):
        if attempt:
            _run(sandbox, "git checkout -- . ; git clean -fd")
        result = _run(sandbox, f"{command} {PATCH_FILE}")
        if result.exit_code == 0:
            log.append(f"{APPLY_PATCH_PASS}:\n{result.stdout}{result.stderr}")
            return True
        log.append(f"Failed to apply patch to container: {command}")
    if _run(sandbox, f"git apply --check --reverse {PATCH_FILE}").exit_code == 0:
        log.append(f"{APPLY_PATCH_PASS}: verified already applied")
        return True
    output = f"{result.stdout}{result.stderr}" if result is not None else ""
    log.append(f"{APPLY_PATCH_FAIL}:\n{output}")
    return False


def _evaluate(sandbox: Any, instance: dict[str, Any], spec: Any, patch: str | None,
              log: list[str], timeout: float) -> tuple[str, bool, list[str]]:
    """Apply (unless `patch` is None: the base itself), guard, run /eval.sh: the test log,
    whether the patch applied, what the guard restored."""
    from swebench.harness.constants import APPLY_PATCH_FAIL, TESTS_TIMEOUT

    prepare_testbed(sandbox, instance)
    if patch is not None and not _apply_chain(sandbox, patch, log):
        return "\n".join(log) + f"\n{APPLY_PATCH_FAIL}\n", False, []
    restored = guard_test_infra(sandbox, instance)
    if restored:
        log.append(f"Guard: restored test infrastructure from the base commit: {restored}")
    sandbox.write_file("/eval.sh", spec.eval_script)
    result = sandbox.exec("/bin/bash /eval.sh 2>&1", cwd=TESTBED, timeout=timeout,
                          output_cap=64 * 2**20)
    output = result.stdout + result.stderr
    if result.timed_out:
        output += f"\n\nTimeout error: {timeout:g} seconds exceeded.\n{TESTS_TIMEOUT}\n"
        log.append(f"Test timed out after {timeout:g} seconds.")
    return output, True, restored


def grade(client: Any, instance: dict[str, Any], pred: dict[str, Any], root: str | Path,
          run_id: str, timeout: float = 1800) -> Grade:
    """Grade one prediction in a fresh sandbox and write the official per-instance logs."""
    from swebench.harness.constants import LOG_INSTANCE, LOG_REPORT, LOG_TEST_OUTPUT
    from swebench.harness.grading import get_eval_report
    from swebench.harness.utils import make_test_spec

    iid = instance["instance_id"]
    log_dir = log_dir_for(root, run_id, pred["model_name_or_path"], iid)
    log_dir.mkdir(parents=True, exist_ok=True)
    patch = pred.get("model_patch")
    (log_dir / "patch.diff").write_text(patch or "")
    if not patch or not patch.strip():
        (log_dir / LOG_INSTANCE).write_text("empty patch: not run\n")
        return Grade(iid, False, None, log_dir, empty_patch=True)
    spec = make_test_spec(instance)
    log: list[str] = []
    try:
        with client.create_sandbox(image_of(instance), network="none", workdir=TESTBED,
                                   timeout=timeout + 600,
                                   labels={"purpose": "swebench-grade", "task": iid[:63]}) as sb:
            output, applied, restored = _evaluate(sb, instance, spec, patch, log, timeout)
    except Exception as e:  # noqa: BLE001 - any failure of the grading environment is the verifier's
        (log_dir / LOG_INSTANCE).write_text("\n".join([*log, f"verifier failure: {e!r}"]) + "\n")
        raise VerifierError(f"{iid}: grading sandbox failed: {e}") from e
    (log_dir / LOG_INSTANCE).write_text("\n".join(log) + "\n")
    (log_dir / "eval.sh").write_text(spec.eval_script)
    (log_dir / LOG_TEST_OUTPUT).write_text(output)
    report = get_eval_report(spec, pred, str(log_dir / LOG_TEST_OUTPUT), include_tests_status=True)
    (log_dir / LOG_REPORT).write_text(json.dumps(report, indent=4))
    entry = report[iid]
    infra = entry.get("infra_failure_reason") if entry.get("infra_failure") else None
    return Grade(iid, bool(entry["resolved"]), report, log_dir, applied=applied,
                 guard_restored=restored, infra_failure=infra)


def test_statuses(client: Any, instance: dict[str, Any], patch: str | None,
                  timeout: float = 1800) -> dict[str, str]:
    """Run the task's eval script on the base (patch None) or base + patch, and parse it with
    the instance's own log parser: how validation derives FAIL_TO_PASS and PASS_TO_PASS."""
    from swebench.harness.log_parsers import PARSER_REGISTRY
    from swebench.harness.utils import make_test_spec

    spec = make_test_spec(instance)
    with client.create_sandbox(image_of(instance), network="none", workdir=TESTBED,
                               timeout=timeout + 600) as sb:
        output, applied, _ = _evaluate(sb, instance, spec, patch, [], timeout)
    if not applied:
        raise RuntimeError(f"{instance['instance_id']}: the patch does not apply")
    return PARSER_REGISTRY[spec.log_parser](output, spec)


def regrade(instance: dict[str, Any], log_dir: str | Path) -> dict[str, Any]:
    """swebench's own verdict on a written log directory, for checking Pomona's."""
    from swebench.harness.constants import LOG_TEST_OUTPUT
    from swebench.harness.grading import get_eval_report
    from swebench.harness.utils import make_test_spec

    log_dir = Path(log_dir)
    pred = prediction(instance["instance_id"], log_dir.parent.name,
                      (log_dir / "patch.diff").read_text())
    return get_eval_report(make_test_spec(instance), pred, str(log_dir / LOG_TEST_OUTPUT), True)


# --- predictions and run reports ----------------------------------------------------------------


def write_predictions(path: str | Path, predictions: list[dict[str, Any]]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(p) + "\n" for p in predictions))
    return path


def load_predictions(path: str | Path) -> dict[str, dict[str, Any]]:
    """Predictions from .jsonl, or .json as a list or an {instance_id: prediction} dict."""
    text = Path(path).read_text()
    if str(path).endswith(".jsonl"):
        rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    else:
        data = json.loads(text)
        rows = list(data.values()) if isinstance(data, dict) else data
    return {r["instance_id"]: r for r in rows}


def run_report(predictions: list[dict[str, Any]], instances: list[dict[str, Any]], run_id: str,
               root: str | Path) -> dict[str, Any]:
    """swebench's own run report (`<model>.<run_id>.json` in `root`), from the written logs."""
    from swebench.harness.reporting import make_run_report

    by_id = {p["instance_id"]: p for p in predictions}
    with contextlib.chdir(root), contextlib.redirect_stdout(io.StringIO()):
        path = make_run_report(by_id, instances, run_id, client=None, report_dir=".")
        return json.loads(Path(path).read_text())


# --- tasks and the scorer -----------------------------------------------------------------------


@dataclass(frozen=True)
class SweScorer:
    """Takes the agent's diff, grades it in a fresh sandbox the official way. Grading evidence
    goes under `root`; `model` names the log directory, like `model_name_or_path`."""

    instance: dict[str, Any]
    root: str = "pomona-runs/swebench"
    run_id: str = "pomona"
    model: str = "pomona"
    timeout: float = 1800
    client: Any = None  # grading sandboxes' client; by default the agent sandbox's own

    def collect(self, task: Task, sandbox: Any) -> dict[str, Any]:
        patch = extract_patch(sandbox, self.instance["base_commit"])
        client = self.client or getattr(sandbox, "_root", None)
        if client is None:
            raise VerifierError("no sandbox client to grade with: pass SweScorer(client=...)")
        iid = self.instance["instance_id"]
        pred = prediction(iid, self.model, patch)
        run_id = claim_run_id(self.root, self.run_id, self.model, iid)
        result = grade(client, self.instance, pred, self.root, run_id, self.timeout)
        if result.infra_failure:
            raise VerifierError(f"{result.instance_id}: {result.infra_failure} (see {result.log_dir})")
        return {"prediction": pred, "grade": result.score().model_dump()}

    def score(self, task: Task, artifacts: dict[str, Any]) -> Score:
        return Score.model_validate(artifacts["grade"])


@dataclass(frozen=True)
class SweTask(Task):
    """A SWE-bench instance as a Task: the agent starts at /testbed on the base commit."""

    def prepare(self, sandbox: Any) -> None:
        prepare_testbed(sandbox, self.metadata["instance"])


def to_task(instance: dict[str, Any], benchmark: str = "swebench", **scorer: Any) -> SweTask:
    """The Task for one instance; `scorer` goes to SweScorer (root, run_id, model, client...)."""
    text = instance["problem_statement"]
    return SweTask(
        id=instance["instance_id"], benchmark=benchmark,
        instruction=f"{text.rstrip()}\n\nThe repository is at {TESTBED}. Fix the issue by editing "
                    "its source; do not change its tests.",
        scorer=SweScorer(instance, **scorer),
        environment=Environment(image=image_of(instance), workdir=TESTBED),
        solution=tuple(apply_commands(instance["patch"])),
        metadata={"instance": instance, "repo": instance["repo"]})


def tasks(source: str | Path, benchmark: str = "swebench", **scorer: Any) -> list[SweTask]:
    return [to_task(i, benchmark, **scorer) for i in load_instances(source)]
