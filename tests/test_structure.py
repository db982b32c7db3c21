"""The package's shape as a gate (tests/structure.py, which ./dev lint also runs): Pomona's own
tree has no import up the layers, no circle, no oversized function or class and no bare builtin
raise; and a toy tree with one of each is caught, each said where, with a failing exit."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests import structure

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def pomona() -> tuple[dict[str, structure.Module], dict[str, set[str]]]:
    known = structure.modules()
    return known, structure.import_graph(known)


def test_no_import_runs_up_the_layers(pomona):
    assert structure.upward_imports(*pomona) == []


def test_no_import_circle(pomona):
    assert structure.circles(pomona[1]) == []


def test_no_function_or_class_outgrows_its_limit(pomona):
    assert list(structure.oversized(pomona[0])) == []


def test_no_bare_builtin_raise_in_library_code(pomona):
    assert list(structure.bare_raises(pomona[0])) == []


def test_every_package_has_a_layer():
    assert list(structure.problems()) == []


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def toy(root: Path) -> Path:
    """A package with one violation of each kind, beside what is allowed."""
    body = "".join(f"    x{i} = {i}\n" for i in range(structure.MAX_FUNCTION))
    methods = "".join(
        f"    def m{i}(self) -> int:\n        return {i}\n\n"
        for i in range(structure.MAX_CLASS // 3 + 1)
    )
    return write(
        root,
        {
            "pomona/__init__.py": "",
            "pomona/errors.py": "class PomonaError(Exception):\n    pass\n",
            "pomona/orchestrator/__init__.py": "from pomona.gym import env\n",
            "pomona/gym/__init__.py": "",
            "pomona/gym/env.py": "import pomona.orchestrator\n",
            "pomona/benchmarks/__init__.py": (
                "def check(x: int) -> None:\n"
                "    if x < 0:\n"
                "        raise ValueError('negative')\n"
                "    raise NotImplementedError\n"
                "\n\n"
                "class Spec:\n"
                "    @field_validator('x')\n"
                "    def valid(cls, x: int) -> int:\n"
                "        raise ValueError('a validator: pydantic makes it a 422')\n"
                "\n\n"
                "def fail(message: str) -> RuntimeError:\n"
                "    return RuntimeError(message)\n"
            ),
            "pomona/benchmarks/sandbox/inside.py": "raise RuntimeError('a program of its own')\n",
            "pomona/trainer/__init__.py": f"def long() -> None:\n{body}\n\nclass Big:\n{methods}",
            "pomona/mystery/__init__.py": "",
        },
    )


def test_a_toy_with_every_violation_is_caught(tmp_path):
    root = toy(tmp_path)
    assert list(structure.problems(root)) == [
        "pomona.mystery is in no layer: place it in LAYERS (tests/structure.py)"
    ]
    (root / "pomona" / "mystery" / "__init__.py").unlink()
    (root / "pomona" / "mystery").rmdir()
    found = list(structure.problems(root))
    assert found == [
        "import runs up the layers: pomona.orchestrator -> pomona.gym.env "
        "(layer orchestrator -> gym)",
        "import circle: pomona.gym.env -> pomona.orchestrator",
        f"too long: pomona/trainer/__init__.py:1 long is {structure.MAX_FUNCTION + 1} lines "
        f"(> {structure.MAX_FUNCTION})",
        f"too long: pomona/trainer/__init__.py:{structure.MAX_FUNCTION + 4} Big is "
        f"{3 * (structure.MAX_CLASS // 3 + 1)} lines (> {structure.MAX_CLASS})",
        "pomona/benchmarks/__init__.py:3 raises ValueError, not a PomonaError",
        "pomona/benchmarks/__init__.py:14 returns RuntimeError, not a PomonaError",
    ]


def test_the_command_fails_on_a_violation_and_passes_on_pomona(tmp_path):
    root = write(
        tmp_path,
        {
            "pomona/__init__.py": "",
            "pomona/keys.py": "def key(name: str) -> str:\n    raise KeyError(name)\n",
        },
    )

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "tests.structure", *args],
            cwd=REPO,
            capture_output=True,
            text=True,
        )

    bad = run(str(root))
    assert (bad.returncode, bad.stdout) == (
        1,
        "pomona/keys.py:2 raises KeyError, not a PomonaError\n",
    )
    good = run()
    assert (good.returncode, good.stdout) == (0, "")
