"""QwenClawBench tasks (`tasks/task_*.md` with `assets/`), loaded unchanged: YAML front matter,
`## Prompt`, `## Expected Behavior`, `## Grading Criteria`, `## Automated Checks` (a Python block
defining `grade(transcript, workspace_path) -> dict[str, float]`) and `## LLM Judge Rubric`.

Scoring as published: automated = the mean of grade()'s values; the judge's total in 0..1;
hybrid (penalized) = (w_a*auto + w_l*llm*[auto >= 0.75]) / (w_a + w_l), or without the gate
when `simple_scoring`; a run passes when its score is >= 1 - 1e-9.

grade() is the benchmark's code: it runs on the host in a separate Python process with a time
limit, against a copy of the agent's workspace taken after the run and the transcript (OpenClaw's
session events, rebuilt from the proxy's record for every harness), never inside the sandbox
the agent controlled.
"""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from pomona.benchmarks.claw import conversation, oracle_steps
from pomona.benchmarks.claw.judge import Judge
from pomona.benchmarks.task import Environment, Score, Task, VerifierError
from pomona.orchestrator.sdk.client import Sandbox

if TYPE_CHECKING:
    from pomona.harnesses.runner import HarnessResult
    from pomona.proxy.control import ProxyControl

DATA = Path(__file__).parents[1] / "data" / "qwenclawbench_local"
PERFECT = 1 - 1e-9
GATE = 0.75
WORKDIR = "/workspace"
_RUNNER = """
import json, sys
source, workspace = sys.argv[1], sys.argv[2]
namespace = {}
exec(compile(open(source).read(), "automated_checks", "exec"), namespace)
result = namespace["grade"](json.load(sys.stdin), workspace)
json.dump(result, sys.stdout)
"""


def sections(markdown: str) -> dict[str, str]:
    """`## Title` -> body text."""
    out: dict[str, str] = {}
    for block in re.split(r"^## +", markdown, flags=re.M)[1:]:
        title, _, body = block.partition("\n")
        out[title.strip()] = body.strip()
    return out


def parse(path: Path) -> dict[str, Any]:
    text = path.read_text()
    match = re.match(r"^---\s*\n(.*?)\n---\s*\n(.*)$", text, flags=re.S)
    if not match:
        raise ValueError(f"{path}: no YAML front matter")
    meta = yaml.safe_load(match.group(1)) or {}
    body = sections(match.group(2))
    if "Prompt" not in body:
        raise ValueError(f"{path}: no '## Prompt' section")
    code = re.search(r"```python\s*\n(.*?)```", body.get("Automated Checks", ""), flags=re.S)
    return {
        "meta": meta,
        "prompt": body["Prompt"],
        "expected": body.get("Expected Behavior", ""),
        "criteria": body.get("Grading Criteria", ""),
        "rubric": body.get("LLM Judge Rubric", ""),
        "checks": code.group(1) if code else "",
        "oracle": body.get("Pomona Oracle", ""),
    }


def hybrid(
    auto: float | None, llm: float | None, w_auto: float, w_llm: float, simple: bool = False
) -> float:
    """The penalized hybrid: the judge counts only once the automated checks reach 0.75."""
    gate = 1.0 if simple or (auto or 0.0) >= GATE else 0.0
    total = w_auto + w_llm
    if total <= 0:
        raise ValueError("grading weights must add up to more than 0")
    return (w_auto * (auto or 0.0) + w_llm * (llm or 0.0) * gate) / total


def run_checks(
    source: str, transcript: list[dict[str, Any]], workspace: Path, timeout: float = 120
) -> dict[str, float]:
    """The task's grade() in its own process; a crash or a non-numeric result is the verifier's."""
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "checks.py").write_text(source)
        try:
            proc = subprocess.run(
                [sys.executable, "-I", "-c", _RUNNER, f"{tmp}/checks.py", str(workspace)],
                input=json.dumps(transcript),
                capture_output=True,
                text=True,
                timeout=timeout,
                cwd=tmp,
            )
        except subprocess.TimeoutExpired as e:
            raise VerifierError(f"grade() ran past {timeout:.0f} s") from e
    if proc.returncode != 0:
        raise VerifierError(f"grade() failed: {proc.stderr.strip()[-1500:]}")
    try:
        result = json.loads(proc.stdout)
        return {str(k): float(v) for k, v in result.items()}
    except (ValueError, AttributeError, TypeError) as e:
        raise VerifierError(
            f"grade() must return {{name: number}}, got {proc.stdout[:300]!r}"
        ) from e


@dataclass(frozen=True)
class QwenScorer:
    def collect(self, task: Task, sandbox: Sandbox) -> dict[str, Any]:
        return {"workspace_tar": sandbox.download_dir(task.environment.workdir)}

    def score(self, task: Task, artifacts: dict[str, Any]) -> Score:
        assert isinstance(task, QwenClawTask)
        return task.grade(
            artifacts["workspace_tar"], artifacts.get("conversation", []), artifacts.get("judge")
        )


@dataclass(frozen=True)
class QwenClawTask(Task):
    spec: dict[str, Any] | None = None
    judge_model: str = "scripted"
    judge_verdict: float = 1.0
    simple_scoring: bool = False

    def evaluate(
        self, sandbox: Sandbox, run: HarnessResult | None = None, proxy: ProxyControl | None = None
    ) -> Score:
        artifacts = conversation.evidence(
            self, sandbox, run, proxy, self.judge_model, self.judge_verdict
        )
        return self.scorer.score(self, artifacts)

    def grade(self, workspace_tar: bytes, talk: list[dict[str, Any]], judge: Judge | None) -> Score:
        spec = self.spec or {}
        meta = spec["meta"]
        kind = meta.get("grading_type", "automated")
        weights = meta.get("grading_weights") or {}
        transcript = conversation.openclaw_transcript(talk)
        auto = llm = None
        checks: dict[str, float] = {}
        if kind in ("automated", "hybrid"):
            if not spec["checks"]:
                raise VerifierError(f"{self.id}: grading_type {kind} but no Automated Checks")
            with tempfile.TemporaryDirectory() as tmp:
                with tarfile.open(fileobj=io.BytesIO(workspace_tar)) as tar:
                    tar.extractall(tmp, filter="data")
                checks = run_checks(spec["checks"], transcript, Path(tmp))
            auto = sum(checks.values()) / len(checks) if checks else 0.0
        verdict: dict[str, Any] = {}
        if kind in ("llm_judge", "hybrid"):
            if judge is None:
                raise VerifierError(f"{self.id}: needs a judge and none was given")
            verdict = judge.rubric_total(
                spec["prompt"], spec["expected"], conversation.text(talk), spec["rubric"]
            )
            llm = verdict["total"]
        if kind == "automated":
            score = auto or 0.0
        elif kind == "llm_judge":
            score = llm or 0.0
        elif kind == "hybrid":
            score = hybrid(
                auto,
                llm,
                float(weights.get("automated", 0.5)),
                float(weights.get("llm_judge", 0.5)),
                self.simple_scoring,
            )
        else:
            raise VerifierError(f"{self.id}: unknown grading_type {kind!r}")
        return Score(
            reward=score,
            resolved=score >= PERFECT,
            details={
                "grading_type": kind,
                "automated": auto,
                "checks": checks,
                "llm_judge": llm,
                "judge": judge.name if judge and llm is not None else None,
                "judge_reply": verdict,
            },
        )


def _workspace_files(meta: dict[str, Any], root: Path, task_file: Path) -> dict[str, str]:
    files = {}
    for entry in meta.get("workspace_files") or []:
        source, dest = str(entry["source"]), str(entry.get("dest") or Path(entry["source"]).name)
        if Path(dest).is_absolute() or ".." in Path(dest).parts:
            raise ValueError(f"{task_file}: workspace dest {dest!r} leaves the workspace")
        for base in (root / "assets", root / "assets" / str(meta["id"]), task_file.parent):
            if (base / source).is_file():
                files[dest] = (base / source).read_text()
                break
        else:
            raise FileNotFoundError(
                f"{task_file}: workspace file {source!r} not found under assets/"
            )
    return files


def load_task(
    task_file: str | Path,
    root: str | Path | None = None,
    benchmark: str = "qwenclawbench",
    **options: Any,
) -> QwenClawTask:
    task_file = Path(task_file)
    root = Path(root) if root else task_file.parent.parent
    spec = parse(task_file)
    meta = spec["meta"]
    oracle = re.search(r"```json\s*\n(.*?)```", spec["oracle"], flags=re.S)
    steps = json.loads(oracle.group(1)) if oracle else {}
    return QwenClawTask(
        id=f"{benchmark}/{meta['id']}",
        benchmark=benchmark,
        instruction=spec["prompt"],
        scorer=QwenScorer(),
        environment=Environment(files=_workspace_files(meta, root, task_file), workdir=WORKDIR),
        solution=oracle_steps(steps.get("solution")) or None,
        spec=spec,
        metadata={
            "negative": oracle_steps(steps.get("negative")),
            "category": meta.get("category", ""),
            "agent_timeout": float(meta.get("timeout_seconds") or 600),
        },
        **options,
    )


def tasks(
    root: str | Path = DATA, benchmark: str = "qwenclawbench", **options: Any
) -> list[QwenClawTask]:
    """Every tasks/task_*.md under `root` (the benchmark's checkout, with its assets/)."""
    files = sorted(Path(root).glob("tasks/task_*.md"))
    if not files:
        raise FileNotFoundError(f"no QwenClawBench tasks (tasks/task_*.md) under {root}")
    return [load_task(f, root, benchmark, **options) for f in files]
