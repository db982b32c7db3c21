"""SWE-bench 5.x: load instances, run agents at the base commit, and grade patches the official way.

Instances come from a 5.x task repo (`sweb.yaml`, `tasks/<id>/...`) or from official Parquet /
JSONL rows (`pomona.benchmarks.swe_datasets` reads every other source and shape). Grading follows
swebench's `run_instance` step by step in a fresh sandbox (the `git apply` fallback chain,
`/eval.sh` with the exit-code marker, stderr merged into the log) and then calls swebench's own
`get_eval_report`, so its parsers and resolved rule decide and its tools can re-grade Pomona's
logs, which land in the official layout:
`<root>/logs/run_evaluation/<run_id>/<model>/<instance_id>/{report.json, test_output.txt, ...}`.
Like `run_instance`, a patch that does not apply or tests that time out leave no report.json.

Where an instance runs. A row names its image (`swebench/sweb.eval.x86_64.<id>`), which holds the
repository at /testbed, owned by root, and the `testbed` conda environment: like swebench's own
containers, the agent and the grader run there as root (inside the sandbox's user namespace),
and the eval script activates the environment itself. A task directory may instead carry
`repo.bundle` (Pomona's local tasks): it runs on the host image as the sandbox user, the bundle
cloned at /testbed, with its declared `test_dependencies` (default: pytest) copied in from
Pomona's own environment, `python` meaning python3, and the payload's Node when its
`toolchains` name `node`.

An eval that cannot run (command not found, test framework missing, permission denied, git's
"dubious ownership") is the environment's fault, not the patch's: the grade carries it as
`infra_failure` and the episode is a `verifier` failure, never a 0.

Between applying the patch and running the tests, the guard restores test infrastructure from
the base commit (conftest.py, pytest configuration, sitecustomize, *.pth, the task's test files):
without it a six-line conftest.py that forces every outcome to "passed" is graded resolved.
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
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Final, NotRequired, TypedDict, TypeVar, cast

from pomona.benchmarks import pytools
from pomona.benchmarks.task import Environment, Score, Task, VerifierError
from pomona.orchestrator.sdk.client import Sandbox, SandboxClient
from pomona.orchestrator.types import ExecResult

TESTBED = "/testbed"
BUNDLE = "repo.bundle"
PATCH_FILE = "/tmp/patch.diff"  # swebench's CONTAINER_PATCH_FILE
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
JUNK = ("**/__pycache__/**", "**/*.pyc", ".pytest_cache/**", "**/*.orig", "**/*.rej")
INFRA_NAMES = {
    "conftest.py",
    "pytest.ini",
    ".pytest.ini",
    "tox.ini",
    "sitecustomize.py",
    "usercustomize.py",
}
SECTION_FILES = {"setup.cfg", "pyproject.toml"}  # guarded only where their pytest section changed
NODE_LINK = "/usr/local/bin/node"


# --- instances ----------------------------------------------------------------------------------


class SweInstance(TypedDict):
    """One SWE-bench instance as Pomona works with it: the official 5.x row (swe_datasets.adapt
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
    pomona_shape: NotRequired[str]  # the shape the row was adapted from (swe_datasets.shape_of)
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


def _normalize(row: dict[str, Any]) -> SweInstance:
    """A row with the fields every instance has, in their Python types: the one place where a
    row read from a file or a dataset becomes a SweInstance."""
    row = dict(row)
    if not isinstance(row.get("instance_id"), str):
        raise ValueError(f"a SWE-bench instance needs an instance_id string: {str(row)[:80]!r}")
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
        raise ValueError(
            f"cannot read SWE-bench instances from {source}: give a task repo "
            "directory or a .parquet, .jsonl or .json file"
        )
    return [_normalize(r) for r in select(rows, instance_ids, str(source))]


def select(rows: list[RowT], instance_ids: list[str] | None, source: str) -> list[RowT]:
    """The rows named (all when None); an unknown id is an error, never a quietly smaller run."""
    if instance_ids is None:
        return rows
    missing = set(instance_ids) - {r["instance_id"] for r in rows}
    if missing:
        raise KeyError(f"not in {source}: {' '.join(sorted(missing))}")
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


def sandbox_options(instance: SweInstance) -> dict[str, Any]:
    """create_sandbox keywords for an instance: image, user, workdir, and the payload when a
    host-image task tests with its Node."""
    options: dict[str, Any] = {"workdir": TESTBED, "user": user_of(instance)}
    if "node" in toolchains(instance) and bundle_of(instance):
        from pomona.harnesses.payload import ensure_node
        from pomona.harnesses.runner import tools_mount

        ensure_node()
        options["mounts"] = [tools_mount()]
    return options


def _host_tools(sandbox: Sandbox, instance: SweInstance) -> None:
    """On the host image: the declared Python test dependencies, `python` as python3 (eval
    scripts written for conda images call it), and the payload's node where asked for."""
    from pomona.harnesses.base import TOOLS_MOUNT

    deps = instance.get(TEST_DEPENDENCIES)  # none declared: pytest; declared empty: nothing
    pytools.install(sandbox, pytools.DEFAULT if deps is None else deps)
    links = ['command -v python >/dev/null || ln -s "$(command -v python3)" /usr/local/bin/python']
    if "node" in toolchains(instance):  # the payload's pinned Node, whatever the host has
        links.append(f"ln -sf {TOOLS_MOUNT}/node/bin/node {NODE_LINK}")
    result = sandbox.exec(" && ".join(["mkdir -p /usr/local/bin", *links]), user="root", timeout=60)
    if result.exit_code != 0:
        raise RuntimeError(f"could not provide the task's tools: {result.stderr.strip()}")


def prepare_testbed(sandbox: Sandbox, instance: SweInstance) -> None:
    """Bring /testbed to the base commit. With a bundle, clone it there (remote removed, so no
    later history is reachable) and provide the test tools; an official image already has both
    (and some datasets name a ref to check out first)."""
    bundle = bundle_of(instance)
    if bundle is None:
        ref = instance.get(CHECKOUT)
        if ref:
            result = sandbox.exec(
                f"git checkout -q --detach {shlex.quote(ref)}", cwd=TESTBED, timeout=120
            )
            if result.exit_code != 0:
                raise RuntimeError(f"could not check out {ref}: {result.stderr.strip()}")
        return
    sandbox.write_file("/tmp/base.bundle", bundle.read_bytes())
    base = shlex.quote(instance["base_commit"])
    result = sandbox.exec(
        f"git clone -q /tmp/base.bundle {TESTBED} && cd {TESTBED} && git checkout -q {base} && "
        "git remote remove origin && git config user.email agent@pomona.invalid && "
        "git config user.name agent && rm -f /tmp/base.bundle",
        timeout=120,
    )
    if result.exit_code != 0:
        raise RuntimeError(
            f"could not check out {instance['instance_id']}: {result.stderr.strip()}"
        )
    _host_tools(sandbox, instance)


def base_ref(instance: SweInstance) -> str:
    """What the agent's diff is taken against: the checked-out ref, else the base commit."""
    return instance.get(CHECKOUT) or instance["base_commit"]


def extract_patch(sandbox: Sandbox, base_commit: str) -> str:
    """The agent's work as one diff against the base commit: tracked edits, new files, deletions
    and commits the agent made, minus build junk."""
    excludes = " ".join(shlex.quote(f":(exclude,glob){g}") for g in JUNK)
    result = sandbox.exec(
        f"cd {TESTBED} && git add -A && git -c core.fileMode=false diff --cached --no-color "
        f"{shlex.quote(base_commit)} -- . {excludes}",
        timeout=120,
    )
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
    return [
        f"cd {TESTBED} && echo {data} | base64 -d > /tmp/gold.patch && git apply -v /tmp/gold.patch"
    ]


# --- the test-infrastructure guard ----------------------------------------------------------------


def is_infra(path: str, test_files: set[str]) -> bool:
    name = PurePosixPath(path).name
    return (
        path in test_files or name in INFRA_NAMES or name.endswith(".pth") or name in SECTION_FILES
    )


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


def _run(sandbox: Sandbox, command: str, timeout: float = 120) -> ExecResult:
    return sandbox.exec(command, cwd=TESTBED, timeout=timeout)


def guard_test_infra(sandbox: Sandbox, instance: SweInstance) -> list[str]:
    """Restore every test-infrastructure path the patch changed, added or deleted to its state at
    the base commit; return those paths. Judged on the tree, not on the patch text, so renames,
    `patch` fuzz and ignored directories cannot slip past."""
    base = shlex.quote(base_ref(instance))
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


# --- environment faults ---------------------------------------------------------------------------

_NOT_RUNNABLE = re.compile(r"^.*(?:command not found|: not found|Permission denied).*$", re.M)
_NO_FRAMEWORK = re.compile(
    r"^.*(?:No module named '?pytest'?|pytest: (?:command )?not found).*$", re.M
)


def environment_fault(log: str) -> str | None:
    """Why an eval log shows the environment, not the patch, failing; None when it does not.

    Read only where a patch cannot plausibly be the cause: git refusing the repository, the test
    framework missing, the test command itself not runnable (exit 126/127), a failure before the
    tests start, no test phase at all, and swebench's own environment signatures."""
    from swebench.harness.constants import END_TEST_OUTPUT, START_TEST_OUTPUT, TEST_EXIT_CODE
    from swebench.harness.infra_failure import TIER_ENVIRONMENT, classify_text

    if "detected dubious ownership in repository" in log:
        return (
            "git refused /testbed as owned by another user (dubious ownership): the eval "
            "must run as the repository's owner"
        )
    setup, started, rest = log.partition(START_TEST_OUTPUT)
    if not started:
        return "the eval script never reached its tests (no start marker in the log)"
    tests = rest.partition(END_TEST_OUTPUT)[0]
    if m := _NO_FRAMEWORK.search(tests):
        return f"the test framework is missing: {m.group(0).strip()}"
    code = re.search(rf"{re.escape(TEST_EXIT_CODE)}: (\d+)", rest)
    if code and code.group(1) in ("126", "127"):
        lines = _NOT_RUNNABLE.findall(tests)
        why = lines[-1].strip() if lines else "no reason printed"
        return f"the test command could not run (exit {code.group(1)}): {why}"
    if m := _NOT_RUNNABLE.search(setup):
        return f"the eval script's set-up failed before the tests: {m.group(0).strip()}"
    found = classify_text(log)
    if found and found[1] == TIER_ENVIRONMENT:
        return f"environment failure ({found[0]}), by swebench's own log signatures"
    return None


def apply_fault(output: str) -> str | None:
    """Why applying a patch failed for reasons of the environment (not of the patch)."""
    if "detected dubious ownership" in output:
        return "git refused /testbed as owned by another user (dubious ownership)"
    if m := re.search(r"^.*(?:Permission denied|Read-only file system).*$", output, re.M):
        return f"the patch could not be written: {m.group(0).strip()}"
    return None


# --- grading ------------------------------------------------------------------------------------


@dataclass
class Grade:
    instance_id: str
    resolved: bool
    report: dict[str, Any] | None  # the official report.json content, when swebench writes one
    log_dir: Path
    empty_patch: bool = False
    applied: bool = False
    timed_out: bool = False
    guard_restored: list[str] = field(default_factory=list)
    infra_failure: str | None = None  # why the environment, not the patch, failed

    @property
    def message(self) -> str:
        """One line a user can act on."""
        if self.infra_failure:
            return f"environment failure: {self.infra_failure}"
        if self.empty_patch:
            return "empty patch: not run"
        if not self.applied:
            return "the patch does not apply"
        if self.timed_out:
            return "the tests timed out"
        return "resolved" if self.resolved else "unresolved: tests still fail"

    def score(self) -> Score:
        return Score(
            reward=1.0 if self.resolved else 0.0,
            resolved=self.resolved,
            details={
                "report": self.report,
                "log_dir": str(self.log_dir),
                "empty_patch": self.empty_patch,
                "patch_applied": self.applied,
                "timed_out": self.timed_out,
                "guard_restored": self.guard_restored,
                "message": self.message,
                "model_patch": (self.log_dir / "patch.diff").read_text(),
            },
        )


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


def model_name(harness: str, model: str) -> str:
    """`model_name_or_path` for a harness running a model: both matter to the score."""
    return f"{harness}/{model}"


def prediction(instance_id: str, model: str, patch: str | None) -> Prediction:
    return {"instance_id": instance_id, "model_name_or_path": model, "model_patch": patch}


def _apply_chain(sandbox: Sandbox, patch: str, log: list[str]) -> tuple[bool, str]:
    """swebench's fallback chain, a clean tree between attempts, then the already-applied check;
    whether it applied, and the last attempt's output."""
    from swebench.harness.constants import APPLY_PATCH_FAIL, APPLY_PATCH_PASS
    from swebench.harness.run_evaluation import GIT_APPLY_CMDS

    sandbox.write_file(PATCH_FILE, patch)
    output = ""
    for attempt, command in enumerate(GIT_APPLY_CMDS):
        if attempt:
            _run(sandbox, "git checkout -- . ; git clean -fd")
        result = _run(sandbox, f"{command} {PATCH_FILE}")
        output = f"{result.stdout}{result.stderr}"
        if result.exit_code == 0:
            log.append(f"{APPLY_PATCH_PASS}:\n{output}")
            return True, output
        log.append(f"Failed to apply patch to container: {command}")
    if _run(sandbox, f"git apply --check --reverse {PATCH_FILE}").exit_code == 0:
        log.append(f"{APPLY_PATCH_PASS}: verified already applied")
        return True, output
    log.append(f"{APPLY_PATCH_FAIL}:\n{output}")
    return False, output


@dataclass
class _Run:
    output: str = ""  # the test log ("" when the tests never ran)
    applied: bool = False
    apply_output: str = ""
    timed_out: bool = False
    restored: list[str] = field(default_factory=list)


def _evaluate(
    sandbox: Sandbox,
    instance: SweInstance,
    spec: Any,
    patch: str | None,
    log: list[str],
    timeout: float,
) -> _Run:
    """Apply (unless `patch` is None: the base itself), guard, run /eval.sh."""
    from swebench.harness.constants import TESTS_TIMEOUT

    prepare_testbed(sandbox, instance)
    run = _Run(applied=True)
    if patch is not None:
        run.applied, run.apply_output = _apply_chain(sandbox, patch, log)
        if not run.applied:
            return run
    run.restored = guard_test_infra(sandbox, instance)
    if run.restored:
        log.append(f"Guard: restored test infrastructure from the base commit: {run.restored}")
    sandbox.write_file("/eval.sh", spec.eval_script)
    result = sandbox.exec(
        "/bin/bash /eval.sh 2>&1", cwd=TESTBED, timeout=timeout, output_cap=64 * 2**20
    )
    run.output = result.stdout + result.stderr
    if result.timed_out:
        run.timed_out = True
        run.output += f"\n\nTimeout error: {timeout:g} seconds exceeded.\n{TESTS_TIMEOUT}\n"
        log.append(f"Test timed out after {timeout:g} seconds.")
    return run


def grade(
    client: SandboxClient,
    instance: SweInstance,
    pred: Prediction,
    root: str | Path,
    run_id: str,
    timeout: float = 1800,
) -> Grade:
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
        with client.create_sandbox(
            image_of(instance),
            network="none",
            timeout=timeout + 600,
            labels={"purpose": "swebench-grade", "task": iid[:63]},
            **sandbox_options(instance),
        ) as sb:
            run = _evaluate(sb, instance, spec, patch, log, timeout)
    except Exception as e:  # noqa: BLE001 - any failure of the grading environment is the verifier's
        (log_dir / LOG_INSTANCE).write_text("\n".join([*log, f"verifier failure: {e!r}"]) + "\n")
        raise VerifierError(f"{iid}: grading sandbox failed: {e}") from e
    (log_dir / LOG_INSTANCE).write_text("\n".join(log) + "\n")
    grade = Grade(
        iid,
        False,
        None,
        log_dir,
        applied=run.applied,
        timed_out=run.timed_out,
        guard_restored=run.restored,
    )
    if not run.applied:
        grade.infra_failure = apply_fault(run.apply_output)
        return grade
    (log_dir / "eval.sh").write_text(spec.eval_script)
    (log_dir / LOG_TEST_OUTPUT).write_text(run.output)
    if run.timed_out:
        return grade
    grade.report = get_eval_report(
        spec, pred, str(log_dir / LOG_TEST_OUTPUT), include_tests_status=True
    )
    (log_dir / LOG_REPORT).write_text(json.dumps(grade.report, indent=4))
    grade.resolved = bool(grade.report[iid]["resolved"])
    if not grade.resolved:
        grade.infra_failure = environment_fault(run.output)
    return grade


def test_statuses(
    client: SandboxClient, instance: SweInstance, patch: str | None, timeout: float = 1800
) -> dict[str, str]:
    """Run the task's eval script on the base (patch None) or base + patch, and parse it with
    the instance's own log parser: how validation derives FAIL_TO_PASS and PASS_TO_PASS."""
    from swebench.harness.log_parsers import PARSER_REGISTRY
    from swebench.harness.utils import make_test_spec

    spec = make_test_spec(instance)
    with client.create_sandbox(
        image_of(instance), network="none", timeout=timeout + 600, **sandbox_options(instance)
    ) as sb:
        run = _evaluate(sb, instance, spec, patch, [], timeout)
    if not run.applied:
        raise RuntimeError(f"{instance['instance_id']}: the patch does not apply")
    if fault := environment_fault(run.output):
        raise RuntimeError(f"{instance['instance_id']}: {fault}")
    return PARSER_REGISTRY[spec.log_parser](run.output, spec)


def regrade(instance: SweInstance, log_dir: str | Path) -> dict[str, Any]:
    """swebench's own verdict on a written log directory, for checking Pomona's."""
    from swebench.harness.constants import LOG_TEST_OUTPUT
    from swebench.harness.grading import get_eval_report
    from swebench.harness.utils import make_test_spec

    log_dir = Path(log_dir)
    pred = prediction(
        instance["instance_id"], log_dir.parent.name, (log_dir / "patch.diff").read_text()
    )
    return get_eval_report(make_test_spec(instance), pred, str(log_dir / LOG_TEST_OUTPUT), True)


# --- predictions and run reports ----------------------------------------------------------------


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


# --- tasks and the scorer -----------------------------------------------------------------------


@dataclass(frozen=True)
class SweScorer:
    """Takes the agent's diff, grades it in a fresh sandbox the official way. Grading evidence
    goes under `root`; `model` names the log directory, like `model_name_or_path`."""

    instance: SweInstance
    root: str = "pomona-runs/swebench"
    run_id: str = "pomona"
    model: str = "pomona"
    timeout: float = 1800
    client: SandboxClient | None = None  # grading sandboxes'; by default the agent sandbox's

    def collect(self, task: Task, sandbox: Sandbox) -> dict[str, Any]:
        patch = extract_patch(sandbox, base_ref(self.instance))
        client = self.client or sandbox._root
        iid = self.instance["instance_id"]
        pred = prediction(iid, self.model, patch)
        run_id = claim_run_id(self.root, self.run_id, self.model, iid)
        result = grade(client, self.instance, pred, self.root, run_id, self.timeout)
        if result.infra_failure:
            raise VerifierError(
                f"{result.instance_id}: {result.infra_failure} (see {result.log_dir})"
            )
        return {"prediction": pred, "grade": result.score().model_dump()}

    def score(self, task: Task, artifacts: dict[str, Any]) -> Score:
        return Score.model_validate(artifacts["grade"])


@dataclass(frozen=True)
class SweTask(Task):
    """A SWE-bench instance as a Task: the agent starts at /testbed on the base commit."""

    scorer: SweScorer  # (the base's field, narrowed: it holds the instance)

    def prepare(self, sandbox: Sandbox) -> None:
        prepare_testbed(sandbox, self.scorer.instance)


def to_task(instance: SweInstance, benchmark: str = "swebench", **scorer: Any) -> SweTask:
    """The Task for one instance; `scorer` goes to SweScorer (root, run_id, model, client...)."""
    text = instance["problem_statement"]
    metadata: dict[str, Any] = {"instance": instance, "repo": instance["repo"]}
    if instance.get(AGENT_TIMEOUT):
        metadata["agent_timeout"] = float(instance[AGENT_TIMEOUT])
    return SweTask(
        id=instance["instance_id"],
        benchmark=benchmark,
        instruction=f"{text.rstrip()}\n\nThe repository is at {TESTBED}. Fix the issue by editing "
        "its source; do not change its tests.",
        scorer=SweScorer(instance, **scorer),
        environment=Environment(image=image_of(instance), workdir=TESTBED, user=user_of(instance)),
        solution=tuple(apply_commands(instance["patch"])),
        metadata=metadata,
    )


def tasks(source: str | Path, benchmark: str = "swebench", **scorer: Any) -> list[SweTask]:
    return [to_task(i, benchmark, **scorer) for i in load_instances(source)]
