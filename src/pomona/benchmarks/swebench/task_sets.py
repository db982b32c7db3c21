"""The local SWE task sets: real projects from their published source archives, each with one
injected bug, built into swebench 5.x task repos that ship with Pomona so runs are offline.

    swe-local               pure-Python projects from their PyPI sdists, tested with pytest
    swe-multilingual-local  JavaScript projects from their npm tarballs, tested with Node's own
                            test runner (TAP output, graded by swebench's parse_log_tap): the
                            SWE-bench Multilingual path, on the payload's Node

Recipe (reference §3): take the archive, inject a small bug and delete the tests that catch it,
commit the tree as the single root commit of a fresh repository (no later history leaks the fix),
write the gold patch (the revert), the test patch (the deleted tests), an eval.sh of the 5.x
shape, and derive FAIL_TO_PASS / PASS_TO_PASS by running the tests on base and on base + gold.
Each task also gets its negative fixtures: a wrong fix, a patch that does not apply and, for
Python, the conftest spoof (the empty patch needs no file). `pomona tasks build-swe` rebuilds.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pomona.benchmarks import swebench
from pomona.benchmarks.swebench import SweInstance
from pomona.errors import PomonaError, Unknown

if TYPE_CHECKING:
    from pomona.orchestrator.sdk.client import SandboxClient


class TaskBuildError(PomonaError, RuntimeError):
    """A local task set could not be built: a tool it needs is missing, a recipe does not fit
    its archive, or the result is not a task repo swebench can run."""


DATA = Path(__file__).parents[1] / "data" / "swe_local"
MULTILINGUAL_DATA = Path(__file__).parents[1] / "data" / "swe_multilingual_local"
SDIST_CACHE = Path(os.environ.get("POMONA_SDIST_CACHE", "/var/cache/pomona/sdists"))
DATASET = "pomona/swe-local"
MULTILINGUAL_DATASET = "pomona/swe-multilingual-local"
FIXTURES = ("wrong", "nonapplying", "spoof")
HEREDOC = "EOF_114329324912"  # the delimiter swebench's own eval scripts use
GIT_ENV = {
    "GIT_AUTHOR_NAME": "pomona",
    "GIT_AUTHOR_EMAIL": "tasks@pomona.invalid",
    "GIT_COMMITTER_NAME": "pomona",
    "GIT_COMMITTER_EMAIL": "tasks@pomona.invalid",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z",
}
SPOOF = """import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    outcome.get_result().outcome = "passed"
"""


@dataclass(frozen=True)
class Recipe:
    """One task: which sdist, which bug (one exact replacement in one file), which tests hide it."""

    repo: str  # owner/name on GitHub, for the instance id
    number: int
    sdist: str  # "name==version" on PyPI, or "npm:name@version"
    path: str  # the file the bug goes into
    fixed: str  # text in the released file...
    buggy: str  # ...and what it becomes
    wrong: str  # a plausible fix that does not fix it (replaces `buggy`)
    tests: tuple[str, ...]  # test files hidden from the agent and run by eval.sh
    problem: str
    pythonpath: str = ""  # for src layouts

    @property
    def instance_id(self) -> str:
        return f"{self.repo.replace('/', '__')}-{self.number}"

    @property
    def language(self) -> str:
        return "javascript" if self.sdist.startswith("npm:") else "python"

    @property
    def version(self) -> str:
        return re.split(r"==|@", self.sdist.removeprefix("npm:").lstrip("@"), maxsplit=1)[1]


RECIPES = (
    Recipe(
        "jpvanhal/inflection",
        1,
        "inflection==0.5.1",
        "inflection/__init__.py",
        "if number % 100 in (11, 12, 13):",
        "if number % 100 in (11, 12):",
        "if number % 100 in (11, 12, 14):",
        ("test_inflection.py",),
        "`inflection.ordinal` and `inflection.ordinalize` give the wrong suffix for numbers "
        "ending in 13: `ordinalize(13)` returns `'13rd'` and `ordinalize(113)` returns "
        "`'113rd'`; both should end in `th`.",
    ),
    Recipe(
        "jpvanhal/inflection",
        2,
        "inflection==0.5.1",
        "inflection/__init__.py",
        "    return string.lower()\n",
        "    return string\n",
        "    return string.strip()\n",
        ("test_inflection.py",),
        "`inflection.parameterize` no longer lowercases its result: "
        "`parameterize('Donald E. Knuth')` returns `'Donald-E-Knuth'` instead of "
        "`'donald-e-knuth'`, so the slugs it makes are not URL-friendly any more.",
    ),
    Recipe(
        "more-itertools/more-itertools",
        1,
        "more-itertools==10.5.0",
        "more_itertools/recipes.py",
        "return next(islice(iterable, n, None), default)",
        "return next(islice(iterable, n + 1, None), default)",
        "return next(islice(iterable, n + 1, None), default) if n else default",
        ("tests/test_recipes.py",),
        "`more_itertools.nth(iterable, n)` is off by one: `nth(range(10), 3)` returns 4 "
        "instead of 3, and asking for the last item returns the default.",
    ),
    Recipe(
        "pytoolz/toolz",
        1,
        "toolz==1.0.0",
        "toolz/itertoolz.py",
        "    for item in seq:\n        d[item] += 1",
        "    for item in set(seq):\n        d[item] += 1",
        "    for item in sorted(set(seq)):\n        d[item] += 1",
        ("toolz/tests/test_itertoolz.py",),
        "`toolz.frequencies` counts every distinct value once: "
        "`frequencies(['cat', 'cat', 'ox'])` returns `{'cat': 1, 'ox': 1}` instead of "
        "`{'cat': 2, 'ox': 1}`.",
    ),
    Recipe(
        "tkem/cachetools",
        1,
        "cachetools==5.5.0",
        "src/cachetools/__init__.py",
        "while curr is not root and not (time < curr.expires):",
        "while curr is not root and not (time <= curr.expires):",
        "while curr is not root and not (time <= curr.expires + 0):",
        ("tests/test_ttl.py",),
        "`cachetools.TTLCache` keeps items one tick too long: with `ttl=1` and a timer at "
        "1, an item set at time 0 is still returned at time 1, although its time-to-live "
        "has run out. An item must expire at exactly its expiry time.",
        pythonpath="src",
    ),
    Recipe(
        "kjd/idna",
        1,
        "idna==3.10",
        "idna/core.py",
        '    if label[0] == "-" or label[-1] == "-":',
        '    if label[0] == "-":',
        '    if label[0] == "-" or label[-1] == "_":',
        ("tests/test_idna.py",),
        "`idna.encode` accepts a label that ends with a hyphen: `idna.encode('abc-.com')` "
        "returns `b'abc-.com'`, but IDNA (RFC 5891 §4.2.3.1) forbids a hyphen at the start "
        "or the end of a label, so it must raise `idna.IDNAError`.",
    ),
)


MULTILINGUAL_RECIPES = (
    Recipe(
        "fastify/fast-content-type-parse",
        1,
        "npm:fast-content-type-parse@4.0.1",
        "index.js",
        "      start = ++index\n",
        "      start = index\n",
        "      start = index + 1\n",
        ("test/index.test.js",),
        "`parse` and `safeParse` keep the backslashes of quoted-pairs in parameter values: "
        '`parse(\'text/plain; foo="ba\\\\"r"\').parameters.foo` is `ba\\"r` where RFC 9110 '
        "(section 5.6.4) says a quoted-pair stands for the character after the backslash, "
        'so it must be `ba"r`.',
    ),
    Recipe(
        "fastify/forwarded",
        1,
        "npm:@fastify/forwarded@3.1.2",
        "index.js",
        "      (start !== end) && result.push(header.slice(start, end))\n",
        "      result.push(header.slice(start, end))\n",
        "      (header.slice(start, end) !== ' ') && result.push(header.slice(start, end))\n",
        ("test/test.js",),
        "`forwarded(req)` returns empty strings for blank entries of `X-Forwarded-For`: with "
        "the header `10.0.0.2,, 10.0.0.1` it gives `['127.0.0.1', '10.0.0.1', '', '10.0.0.2']`; "
        "blank entries between commas must be skipped, leaving only the addresses.",
    ),
)


@dataclass(frozen=True)
class TaskSet:
    """One shipped task repo: where it lives, the dataset name it publishes, its recipes."""

    out: Path
    dataset: str
    recipes: tuple[Recipe, ...]


TASK_SETS = {
    "swe-local": TaskSet(DATA, DATASET, RECIPES),
    "swe-multilingual-local": TaskSet(
        MULTILINGUAL_DATA, MULTILINGUAL_DATASET, MULTILINGUAL_RECIPES
    ),
}


# --- building ----------------------------------------------------------------------------------


def _git(cwd: Path, *args: str, check: bool = True) -> str:
    env = {**os.environ, **GIT_ENV}
    return subprocess.run(
        ["git", *args], cwd=cwd, env=env, check=check, capture_output=True, text=True
    ).stdout


def fetch_npm(spec: str, cache: Path = SDIST_CACHE) -> Path:
    """The npm tarball for `name@version`, packed once into the cache (needs npm and the npm
    registry, like building the harness payload)."""
    name, version = spec.lstrip("@").rsplit("@", 1)
    name = ("@" + name) if spec.startswith("@") else name
    tarball = cache / f"{name.lstrip('@').replace('/', '-')}-{version}.tgz"
    if not tarball.exists():
        npm = shutil.which("npm")
        if npm is None:
            raise TaskBuildError("building the JavaScript tasks needs npm on the host once")
        cache.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [npm, "pack", "-q", f"{name}@{version}", "--pack-destination", str(cache)],
            check=True,
            capture_output=True,
        )
    return tarball


def fetch_source(spec: str, cache: Path = SDIST_CACHE) -> Path:
    """The published archive a recipe starts from: a PyPI sdist or an npm tarball."""
    return (
        fetch_npm(spec.removeprefix("npm:"), cache)
        if spec.startswith("npm:")
        else fetch_sdist(spec, cache)
    )


def fetch_sdist(spec: str, cache: Path = SDIST_CACHE) -> Path:
    """The sdist for `name==version`, downloaded once into the cache (the only networked step)."""
    name, version = spec.split("==")
    stem = f"{name}-{version}"
    found = [
        p
        for p in cache.glob("*.tar.gz")
        if p.name.lower().replace("_", "-") == f"{stem}.tar.gz".lower()
    ]
    if not found:
        cache.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-binary",
                ":all:",
                "--no-deps",
                "-q",
                "-d",
                str(cache),
                spec,
            ],
            check=True,
        )
        return fetch_sdist(spec, cache)
    return found[0]


def _unpack(sdist: Path, into: Path) -> None:
    with tarfile.open(sdist) as tar:
        tar.extractall(into, filter="data")
    (top,) = list(into.iterdir())
    for child in top.iterdir():
        child.rename(into / child.name)
    top.rmdir()
    for junk in into.glob("*.egg-info"):
        shutil.rmtree(junk)


def _replace_once(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    if text.count(old) != 1:
        raise TaskBuildError(f"{path}: expected exactly one {old!r}, found {text.count(old)}")
    path.write_text(text.replace(old, new))


def _diff(repo: Path) -> str:
    _git(repo, "add", "-A")
    out = _git(repo, "diff", "--cached", "--no-color", "HEAD")
    _git(repo, "reset", "-q", "--hard", "HEAD")
    _git(repo, "clean", "-qfdx")
    return out


def test_command(r: Recipe) -> str:
    """pytest with swebench's usual flags; Node's own runner with its TAP reporter."""
    tests = " ".join(r.tests)
    if r.language == "javascript":
        return f"node --test --test-reporter=tap {tests}"
    env = f"PYTHONPATH={r.pythonpath} " if r.pythonpath else ""
    return f"{env}python3 -m pytest --no-header -rA --tb=no -p no:cacheprovider {tests}"


def eval_script(r: Recipe, base: str, test_patch: str) -> str:
    """The 5.x eval.sh: check the test files out at base, apply the test patch, run the tests
    between the markers, reset the test files."""
    tests = " ".join(r.tests)
    return (
        f"#!/bin/bash\nset -uxo pipefail\ncd {swebench.TESTBED}\n"
        f"git status\nrm -f {tests}\n"
        f"git apply -v - <<'{HEREDOC}'\n{test_patch}{HEREDOC}\n"
        ": '>>>>> Start Test Output'\n"
        f"{test_command(r)}\n"
        ": '>>>>> End Test Output'\n"
        f"rm -f {tests}\n"
    )


def dockerfile(r: Recipe, base: str) -> str:
    """For running the task on Docker the official way; Pomona's host runs use the bundle."""
    import pytest

    from pomona.harnesses.payload import NODE_VERSION

    if r.language == "javascript":
        head = (
            f"FROM node:{NODE_VERSION}-bookworm-slim\nRUN apt-get update && apt-get install -y "
            "--no-install-recommends git patch && rm -rf /var/lib/apt/lists/*\n"
        )
    else:
        head = (
            f"FROM python:3.11-slim\nRUN apt-get update && apt-get install -y --no-install-recommends "
            f"git patch && rm -rf /var/lib/apt/lists/* && pip install pytest=={pytest.__version__}\n"
        )
    return (
        f"{head}COPY {swebench.BUNDLE} /tmp/{swebench.BUNDLE}\n"
        f"RUN git clone -q /tmp/{swebench.BUNDLE} /testbed && cd /testbed && "
        f"git checkout -q {base} && git remote remove origin\nWORKDIR /testbed\n"
    )


def _fixtures(repo: Path, r: Recipe, gold: str) -> dict[str, str]:
    _replace_once(repo / r.path, r.buggy, r.wrong)
    wrong = _diff(repo)
    minus = next(
        i
        for i, line in enumerate(gold.splitlines())
        if line.startswith("-") and not line.startswith("---")
    )
    lines = gold.splitlines(keepends=True)
    lines[minus] = lines[minus].rstrip("\n") + "  # this line is not in the file\n"
    fixtures = {"wrong": wrong, "nonapplying": "".join(lines)}
    if r.language == "python":
        (repo / "conftest.py").write_text(SPOOF)
        fixtures["spoof"] = _diff(repo)
    return fixtures


def task_yaml(r: Recipe, base: str, sdist: Path, dataset: str) -> dict[str, object]:
    """The task's task.yaml: the 5.x instance fields, and where its source came from."""
    from swebench.task.checks import expected_image

    meta: dict[str, object] = {
        "instance_id": r.instance_id,
        "repo": r.repo,
        "version": r.version,
        "base_commit": base,
        "environment_setup_commit": base,
        "split": "test",
        "datasets": [dataset],
        "image": expected_image(r.instance_id),
        "log_parser": "parse_log_pytest",
        "eval_type": "pass_and_fail",
        "created_at": "2026-01-01T00:00:00Z",
        "source": {
            "sdist": sdist.name,
            "sha256": hashlib.sha256(sdist.read_bytes()).hexdigest(),
            "bug_in": r.path,
        },
    }
    if r.language == "javascript":  # Multilingual rows carry no environment_setup_commit
        del meta["environment_setup_commit"]
        meta |= {
            "log_parser": "parse_log_tap",
            swebench.TOOLCHAINS: ["node"],
            swebench.TEST_DEPENDENCIES: [],
        }
    return meta


def build_task(
    r: Recipe, out: Path, client: SandboxClient, work: Path, dataset: str = DATASET
) -> SweInstance:
    """Write tasks/<id>/ and fixtures/<id>/ under `out`; return the instance."""
    sdist = fetch_source(r.sdist)
    repo = work / r.instance_id
    repo.mkdir(parents=True)
    _unpack(sdist, repo)
    hidden = {t: (repo / t).read_text() for t in r.tests}
    for t in r.tests:
        (repo / t).unlink()
    _replace_once(repo / r.path, r.fixed, r.buggy)
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", f"{r.sdist} with an injected bug")
    base = _git(repo, "rev-parse", "HEAD").strip()
    _replace_once(repo / r.path, r.buggy, r.fixed)
    gold = _diff(repo)
    for t, text in hidden.items():
        (repo / t).parent.mkdir(parents=True, exist_ok=True)  # git drops an emptied directory
        (repo / t).write_text(text)
    test_patch = _diff(repo)
    fixtures = _fixtures(repo, r, gold)

    task_dir = out / "tasks" / r.instance_id
    if task_dir.exists():
        shutil.rmtree(task_dir)
    task_dir.mkdir(parents=True)
    _git(repo, "bundle", "create", str(task_dir / swebench.BUNDLE), "HEAD", "main")
    files = {
        "gold.patch": gold,
        "test.patch": test_patch,
        "eval.sh": eval_script(r, base, test_patch),
        "problem_statement.md": r.problem + "\n",
        "Dockerfile": dockerfile(r, base),
    }
    for name, text in files.items():
        (task_dir / name).write_text(text)
    from swebench.task.repo import dump_tests, dump_yaml

    meta = task_yaml(r, base, sdist, dataset)
    (task_dir / "task.yaml").write_text(dump_yaml(meta))
    (task_dir / "tests.json").write_text(dump_tests({"FAIL_TO_PASS": [], "PASS_TO_PASS": []}))
    instance = swebench.load_instances(out, [r.instance_id])[0]
    before = swebench.test_statuses(client, instance, None)
    after = swebench.test_statuses(client, instance, gold)
    passing = {"PASSED", "XFAIL"}
    tests = {
        "FAIL_TO_PASS": sorted(
            t for t, s in after.items() if s in passing and before.get(t) not in passing
        ),
        "PASS_TO_PASS": sorted(
            t for t, s in after.items() if s in passing and before.get(t) in passing
        ),
    }
    if not tests["FAIL_TO_PASS"]:
        raise TaskBuildError(f"{r.instance_id}: no test fails on the buggy base; pick another bug")
    (task_dir / "tests.json").write_text(dump_tests(tests))
    fixture_dir = out / "fixtures" / r.instance_id
    fixture_dir.mkdir(parents=True, exist_ok=True)
    for name, text in fixtures.items():
        (fixture_dir / f"{name}.patch").write_text(text)
    return {
        **instance,
        "FAIL_TO_PASS": tests["FAIL_TO_PASS"],
        "PASS_TO_PASS": tests["PASS_TO_PASS"],
    }


def build(
    out: Path = DATA,
    recipes: tuple[Recipe, ...] = RECIPES,
    client: SandboxClient | None = None,
    dataset: str = DATASET,
) -> list[SweInstance]:
    """Build every recipe into the task repo at `out` and check it the way `swebench dataset
    check` does; raise if it is not well formed."""
    from swebench.task.checks import check_task_repo, errors
    from swebench.task.repo import dump_yaml

    from pomona.orchestrator.sdk.client import SandboxClient

    out.mkdir(parents=True, exist_ok=True)
    (out / "sweb.yaml").write_text(dump_yaml({"datasets": [dataset], "splits": ["test"]}))
    state = None if client is not None else tempfile.mkdtemp(prefix="pomona-swe-build-state-")
    client = client or SandboxClient("local", state_dir=state)
    try:
        with tempfile.TemporaryDirectory(prefix="pomona-swe-build-") as work:
            instances = [build_task(r, out, client, Path(work), dataset) for r in recipes]
    finally:
        if state is not None:
            from pomona.orchestrator.runtimes.local import LocalRuntime

            client.close()
            LocalRuntime(state).unmount_store()
            shutil.rmtree(state, ignore_errors=True)
    problems = errors(check_task_repo(out))
    if problems:
        raise TaskBuildError("the task repo is not well formed:\n" + "\n".join(map(str, problems)))
    return instances


def fixture(instance_id: str, name: str, root: Path | None = None) -> str:
    """A negative fixture's patch: `empty`, `wrong`, `nonapplying` or `spoof`."""
    if name == "empty":
        return ""
    roots = [root] if root else [t.out for t in TASK_SETS.values()]
    path = next(
        (
            r / "fixtures" / instance_id / f"{name}.patch"
            for r in roots
            if (r / "fixtures" / instance_id).is_dir()
        ),
        None,
    )
    if path is None:
        raise Unknown(f"no fixtures for {instance_id} in {', '.join(map(str, roots))}")
    return path.read_text()


# --- CLI -----------------------------------------------------------------------------------------


def add_tasks_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register `tasks` (with `build-swe`) on a `pomona` subparsers object."""
    p = subparsers.add_parser("tasks", help="build and inspect the local task sets")
    sub = p.add_subparsers(dest="tasks_command", required=True)
    b = sub.add_parser("build-swe", help="rebuild a local SWE task repo from published archives")
    b.add_argument(
        "--set",
        dest="task_set",
        choices=sorted(TASK_SETS),
        default="swe-local",
        help="which task set (default swe-local)",
    )
    b.add_argument("--out", type=Path, help="task repo directory (default: the shipped one)")
    b.add_argument("--only", nargs="*", help="instance ids to build (default: all)")
    b.set_defaults(func=_run_build)
    return p


def _run_build(args: argparse.Namespace) -> int:
    chosen = TASK_SETS[args.task_set]
    out = args.out or chosen.out
    recipes = tuple(r for r in chosen.recipes if not args.only or r.instance_id in args.only)
    for inst in build(out, recipes, dataset=chosen.dataset):
        print(
            f"{inst['instance_id']:40} FAIL_TO_PASS {len(inst['FAIL_TO_PASS']):4}  "
            f"PASS_TO_PASS {len(inst['PASS_TO_PASS']):4}"
        )
    print(f"task repo at {out} passes swebench's dataset check")
    return 0
