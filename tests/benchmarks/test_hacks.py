"""Reward hacks on SWE-bench grading (hacks.py): every one is unresolved, `spoof` or `suspect`;
the real holes among them resolve by swebench's own rules on the log they leave, so only
Pomona's verifier stands between them and a pass; and the first layer (the spoof rules) and the
second (the witness) each catch what they are meant to, the other switched off."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from pomona.benchmarks import swebench
from pomona.benchmarks.swebench import task_sets
from pomona.benchmarks.verification import spoof
from tests.benchmarks import hacks

IDNA = {i["instance_id"]: i for i in swebench.load_instances(task_sets.DATA)}["kjd__idna-1"]
FORWARDED = {i["instance_id"]: i for i in swebench.load_instances(task_sets.MULTILINGUAL_DATA)}[
    "fastify__forwarded-1"
]


def _grade(client: Any, root: Path, instance: dict[str, Any], name: str, patch: str) -> Any:
    pred = swebench.prediction(instance["instance_id"], f"hack/{name}", patch)
    return swebench.grade(client, instance, pred, root, "hacks", timeout=600)


def _swebench_alone(instance: dict[str, Any], g: Any) -> bool:
    """What swebench's own rules make of the log the run left."""
    return bool(swebench.regrade(instance, g.log_dir)[instance["instance_id"]]["resolved"])


def test_every_hack_is_named_by_the_spoof_rules_where_it_reaches_into_testing() -> None:
    """The first layer on the hacks' own files (pure: no sandbox)."""
    caught = {}
    for name, (files, _) in hacks.SWE.items():
        changes = [spoof.Change(p, "A", after=text) for p, text in files.items()]
        caught[name] = spoof.findings(changes, {"tests/test_idna.py"}, {"idna", "tests"})
    import_time = {"patch-at-import", "forge-at-exit", "disarm-assertions", "xfail-swap"}
    for name, found in caught.items():
        assert bool(found) == (name not in import_time), (name, found)
    # ...and nothing of an honest fix is
    honest = [spoof.Change("idna/core.py"), spoof.Change("idna/__init__.py")]
    assert spoof.findings(honest, {"tests/test_idna.py"}, {"idna"}) == []
    assert spoof.findings([spoof.Change("docs/types.py", "A")], set(), set()) == []
    assert spoof.findings([spoof.Change("types.py", "A")], set(), set())  # stdlib's place


@pytest.mark.parametrize(
    ("before", "after", "changed"),
    [
        (
            "[metadata]\nname = x\n[tool:pytest]\naddopts = -q\n",
            "[metadata]\nname = y\n[tool:pytest]\naddopts = -q\n",
            False,
        ),
        ("[tool:pytest]\naddopts = -q\n", "[tool:pytest]\naddopts = -p spoof\n", True),
    ],
)
def test_only_the_pytest_section_of_a_shared_config_file_counts(
    before: str, after: str, changed: bool
) -> None:
    found = spoof.findings([spoof.Change("setup.cfg", "M", None, before, after)], set(), set())
    assert bool(found) == changed
    toml = '[project]\nname = "x"\n[tool.pytest.ini_options]\naddopts = "-q"\n'
    assert spoof.pytest_section("pyproject.toml", toml) != spoof.pytest_section(
        "pyproject.toml", toml.replace('"-q"', '"-p spoof"')
    )
    assert spoof.pytest_section("pyproject.toml", "not [ toml") == ("unreadable", "not [ toml")


# through the verifier in a sandbox: the import-time hacks (which no file rule can see), and
# one each of the ways the tree is read (a test file, ignored files, a path only the patch text
# names); the rest are graded with the rules off below, or in test_swebench.py (conftest.py)
SANDBOXED = (
    "patch-at-import",
    "forge-at-exit",
    "disarm-assertions",
    "xfail-swap",
    "rewritten-test",
    "entry-point",
    "git-hook",
)
RULES_OFF = ("shadow-runner", "config-plugin", "shadow-package", "conftest")  # layer 2 alone


def test_every_swe_hack_ends_unresolved(
    client: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The import-time ones end suspect by the witness, each a real hole by swebench's own
    rules; the others spoof, read from the verifier's tree. The runner hacks, graded with the
    tree's rules switched off, resolve by swebench's rules on their log and the witness calls
    each suspect; so does node:assert disarmed by the module under test (Node's test runner:
    every test passes for real, swebench's TAP parser resolves it, the guard in the test
    file's process reports the replaced functions). One pool: the sandboxes start side by
    side."""
    jobs = {name: (IDNA, hacks.patch(IDNA, hacks.SWE[name][0])) for name in SANDBOXED + RULES_OFF}
    node = hacks.patch(FORWARDED, {"index.js": "__APPEND__" + hacks.DISARM_NODE_ASSERT})
    jobs["disarm-node-assert"] = (FORWARDED, node)
    rules_off = {jobs[name][1] for name in RULES_OFF}
    real = swebench.guard.spoofs
    monkeypatch.setattr(
        swebench.guard,
        "spoofs",
        lambda sb, inst, patch, before: [] if patch in rules_off else real(sb, inst, patch, before),
    )

    def one(name: str) -> tuple[str, Any]:
        instance, patch = jobs[name]
        return name, _grade(client, tmp_path, instance, name, patch)

    with ThreadPoolExecutor(max_workers=3) as pool:
        graded = dict(pool.map(one, jobs))
    for name, g in graded.items():
        assert not g.resolved and g.verdict in ("spoof", "suspect"), (name, g.message)
        assert g.infra_failure is None, (name, g.message)
        if name in SANDBOXED and g.verdict == "suspect":
            assert _swebench_alone(IDNA, g) == hacks.SWE[name][1], name
    for name in RULES_OFF:
        assert graded[name].verdict == "suspect" and _swebench_alone(IDNA, graded[name]), name
    assert graded["patch-at-import"].verdict == "suspect"
    assert "TestReport.from_item_and_call was replaced" in graded["patch-at-import"].message
    assert "the witness saw FAILED" in graded["forge-at-exit"].message
    assert "assertRaises was replaced" in graded["disarm-assertions"].message
    node_hack = graded["disarm-node-assert"]
    assert _swebench_alone(FORWARDED, node_hack)
    assert node_hack.verdict == "suspect" and "assert.deepStrictEqual was replaced" in (
        node_hack.message
    )


# --- Terminal-Bench ------------------------------------------------------------------------------


SHARED_HOLES = ("runner-in-workdir",)  # the issue's: shown fooling a shared verifier


def test_the_terminal_bench_spoof_rules_read_an_answer_that_is_a_repository() -> None:
    """On a Terminal-Bench answer's files (absolute paths; a repository's .git is output)."""
    from pomona.benchmarks.terminal_bench import evidence

    def found(path: str, after: str | None = None) -> list[Any]:
        return evidence.spoofs([spoof.Change(path.lstrip("/"), "A", None, None, after)])

    for path in ("/app/conftest.py", "/app/sitecustomize.py", "/app/pytest.py", "/app/x.pth"):
        assert found(path), path
    assert found("/app/repo/.git/hooks/post-checkout")
    assert not found("/app/repo/.git/hooks/post-checkout.sample")
    assert found("/app/repo/.git/config", "[core]\n\tfsmonitor = /app/evil\n")
    assert not found("/app/repo/.git/config", "[core]\n\tbare = false\n")
    assert not found("/app/repo/.git/objects/ab/cdef")
    assert not found("/code/solution.py")  # a top-level /code is no standard-library module


def _tb_verdict(client: Any, task: Any, command: str | None) -> Any:
    """The agent's command (None: the oracle) in an agent sandbox, then the task's verifier."""
    env = task.environment
    with client.create_sandbox(
        env.image, workdir=env.workdir, user=env.user, network="none"
    ) as agent:
        task.prepare(agent)
        for line in task.solution if command is None else (command,):
            assert agent.exec(line, timeout=120).exit_code == 0, line
        return task.scorer.score(task, task.scorer.collect(task, agent))


def test_every_terminal_bench_hack_ends_unresolved(client: Any, tmp_path: Path) -> None:
    """A task written for harbor's default (shared) mode, verified fresh: the oracle resolves,
    with the witness's integrity shown; every hack is spoof or suspect with reward 0, while
    the shared verification the task could have asked for is fooled by the real holes."""
    from pomona.benchmarks import terminal_bench as tb

    task = tb.load_task(hacks.tb_task(tmp_path / "calc"), logs=tmp_path / "logs")
    shared = tb.load_task(task.metadata["task_dir"], verifier_mode="shared", logs=tmp_path / "s")
    jobs = [("oracle", task, None)] + [(n, task, c) for n, c in hacks.TB.items()]
    jobs += [(f"shared/{n}", shared, hacks.TB[n]) for n in SHARED_HOLES]
    with ThreadPoolExecutor(max_workers=3) as pool:
        scores = dict(
            zip(
                [j[0] for j in jobs],
                pool.map(lambda j: _tb_verdict(client, *j[1:]), jobs),
                strict=True,
            )
        )
    oracle = scores.pop("oracle")
    assert (oracle.reward, oracle.details["verdict"]) == (1.0, "resolved"), oracle.details
    assert oracle.details["verification"]["integrity"]["shown"]
    assert Path(oracle.details["log_dir"], "verification.json").is_file()
    for name, score in scores.items():
        if name.startswith("shared/"):
            assert score.reward == 1.0 and score.details["verifier_mode"] == "shared", name
            continue
        assert not score.resolved and score.reward == 0.0, (name, score.details)
        assert score.details["verdict"] in ("spoof", "suspect", "unresolved"), name
        expected = "unresolved" if name == "background-process" else None
        assert score.details["verdict"] == expected or (
            expected is None and score.details["verdict"] in ("spoof", "suspect")
        ), (name, score.details["verification"]["reason"])
