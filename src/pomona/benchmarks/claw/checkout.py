"""The user's checkouts of the two benchmarks, found from the path they give, and the files of
them an episode's sandboxes get: Pomona copies the benchmark's own code and data into the
sandbox unchanged (never into its package), and runs them there.

    claw-eval:PATH        a claw-eval/claw-eval checkout (tasks/, mock_services/, src/claw_eval/)
    qwenclawbench:PATH    a SKYLENAGE-AI/QwenClawBench checkout (data/<dataset>/, scripts/)

Pomona's local sets use the same layouts; their framework (Claw-Eval's mock services and grader
library, QwenClawBench's grading scripts) comes from a checkout named by POMONA_CLAW_EVAL or
POMONA_QWENCLAWBENCH.
"""

from __future__ import annotations

import io
import os
import re
import tarfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml

from pomona.errors import PomonaError

CLAW_EVAL_ENV = "POMONA_CLAW_EVAL"
QWENCLAWBENCH_ENV = "POMONA_QWENCLAWBENCH"
QWEN_DATASET = "qwenclawbench-v1.1-100"  # the dataset its run script names by default
SAFE = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # safe_load's semantics, libyaml's speed
_PEER = re.compile(r"""load_peer_grader\(\s*["']([^"']+)["']""")


class CheckoutError(PomonaError, ValueError):
    """The path given is not a checkout of the benchmark (what is missing is said)."""


class TaskFileError(PomonaError, ValueError):
    """One task's files do not say what Pomona needs: that task is unavailable, with this
    reason, and the others load."""


def tar(files: Mapping[str, bytes]) -> bytes:
    """An uncompressed tar of `files` (name -> bytes), for upload_dir."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as out:
        for name, data in sorted(files.items()):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            out.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _tree(root: Path, under: str, prefix: str = "") -> dict[str, bytes]:
    base = root / under
    return {
        f"{prefix}{under}/{p.relative_to(base)}": p.read_bytes()
        for p in sorted(base.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


@dataclass(frozen=True)
class ClawEvalCheckout:
    """A Claw-Eval checkout: its framework (mock services, grader library, runner, configs)."""

    root: Path

    @classmethod
    def at(cls, path: str | Path) -> ClawEvalCheckout:
        root = Path(path).expanduser().resolve()
        if root.name == "tasks" and (root.parent / "mock_services").is_dir():
            root = root.parent
        missing = [
            d for d in ("tasks", "mock_services", "src/claw_eval") if not (root / d).is_dir()
        ]
        if missing:
            raise CheckoutError(
                f"{path}: not a Claw-Eval checkout (no {', '.join(missing)}); give the directory "
                "holding tasks/, mock_services/ and src/claw_eval/"
            )
        return cls(root)

    @classmethod
    def from_env(cls) -> ClawEvalCheckout | None:
        value = os.environ.get(CLAW_EVAL_ENV)
        return cls.at(value) if value else None

    def task_dirs(self) -> list[Path]:
        return sorted(p.parent for p in (self.root / "tasks").glob("*/task.yaml"))

    def framework(self) -> dict[str, bytes]:
        """Everything but the tasks: mock_services/, src/claw_eval/ and the configs."""
        files = {**_tree(self.root, "mock_services"), **_tree(self.root, "src/claw_eval")}
        for config in sorted(self.root.glob("config*.yaml")):
            files[config.name] = config.read_bytes()
        return files

    def peers(self, grader: Path, seen: frozenset[str] = frozenset()) -> dict[str, bytes]:
        """The graders a task's grader inherits from (`load_peer_grader("ID")`), transitively,
        as tasks/ID/grader.py: Claw-Eval's English variants build on the Chinese ones."""
        out: dict[str, bytes] = {}
        if not grader.is_file():
            return out
        for peer in _PEER.findall(grader.read_text(errors="replace")):
            path = self.root / "tasks" / peer / "grader.py"
            if peer in seen or not path.is_file():
                continue
            out[f"tasks/{peer}/grader.py"] = path.read_bytes()
            out.update(self.peers(path, seen | {peer}))
        return out


def task_files(task_dir: Path, root: Path, references: Iterable[str] = ()) -> dict[str, bytes]:
    """A task's directory as tasks/<dir>/..., plus the files of other tasks it names relative to
    the checkout's root (`tasks/OTHER/fixtures/...` in a service's env or its sandbox files)."""
    files = _tree(task_dir.parent, task_dir.name, prefix="tasks/")
    for ref in references:
        path = (root / ref).resolve()
        if ref.startswith("tasks/") and path.is_file() and path.is_relative_to(root / "tasks"):
            files.setdefault(ref, path.read_bytes())
    return files


@dataclass(frozen=True)
class QwenCheckout:
    """A QwenClawBench checkout: its grading scripts and a dataset (tasks/ and assets/)."""

    root: Path
    dataset: Path

    @classmethod
    def at(cls, path: str | Path, dataset: str | None = None) -> QwenCheckout:
        root = Path(path).expanduser().resolve()
        if not (root / "scripts" / "lib_grading.py").is_file():
            raise CheckoutError(
                f"{path}: not a QwenClawBench checkout (no scripts/lib_grading.py); give the "
                "directory holding scripts/ and data/"
            )
        if dataset is None:
            found = sorted(p.parent for p in (root / "data").glob("*/tasks"))
            named = [p for p in found if p.name == QWEN_DATASET]
            if not found:
                raise CheckoutError(f"{path}: no dataset (data/<name>/tasks/) in the checkout")
            return cls(root, (named or found)[0])
        return cls(root, root / "data" / dataset)

    @classmethod
    def from_env(cls) -> QwenCheckout | None:
        value = os.environ.get(QWENCLAWBENCH_ENV)
        return cls.at(value) if value else None

    def scripts(self) -> dict[str, bytes]:
        """Its grading engine: scripts/*.py (lib_grading imports lib_agent and lib_tasks)."""
        return {
            f"scripts/{p.name}": p.read_bytes()
            for p in sorted((self.root / "scripts").glob("*.py"))
        }
