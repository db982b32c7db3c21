"""QwenClawBench tasks (`data/<dataset>/tasks/task_*.md` with `assets/<id>/`) from the user's
checkout, graded by its own grading engine (scripts/lib_grading.py: the task's `grade()`, its judge
prompt and reply parsing, the penalized hybrid) in a verifier sandbox.

Pomona reads of a task file what its own loader reads to run it (scripts/lib_tasks.py: the front
matter with its tracing fields stripped, the `## ` sections) and lays out the workspace as its
Docker runner does (scripts/lib_docker.py: inline `content` files, then `source` files found in
assets/<id>/ before assets/, bytes unchanged). The transcript its `grade()` reads is OpenClaw's
own session events when the harness is OpenClaw (its transcript store), else the same events
rebuilt from the proxy's record.

A `## Pomona Oracle` section (Pomona's local tasks: scripted steps, a solution and a negative
that must fail) is Pomona's addition; QwenClawBench's loader keeps it as a section it ignores.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from pomona.benchmarks.claw import conversation, runtime
from pomona.benchmarks.claw.checkout import (
    QWENCLAWBENCH_ENV,
    SAFE,
    CheckoutError,
    QwenCheckout,
    TaskFileError,
    tar,
)
from pomona.benchmarks.claw.claw_eval import oracle_steps, save_evidence
from pomona.benchmarks.claw.judge import JudgeSpec, close_judge, judge_calls, open_judge
from pomona.benchmarks.task import Environment, Score, Task, TaskSetupFailed, VerifierError
from pomona.orchestrator.sdk.client import Sandbox
from pomona.proxy.control import calls_of

if TYPE_CHECKING:
    from pomona.harnesses.runner import HarnessResult
    from pomona.proxy.control import ProxyControl

DATA = Path(__file__).parents[1] / "data" / "qwenclawbench_local"  # a dataset: tasks/, assets/
PERFECT = 1 - 1e-9  # its pass: a perfect score (lib_grading.pass_k_stats)
WORKDIR = "/workspace"
OFFLINE_NOT = {"web": "the internet", "feishu": "the Feishu API"}  # external_dependency values
GRADE_TIMEOUT = 1800.0  # its judge call retries 100 times, backing off exponentially
_FRONT = re.compile(r"^---\s*\n(.*?)\n---\s*\n(.*)$", re.S)


def front_matter(text: str) -> tuple[dict[str, Any], str]:
    """The front matter and the body, as its TaskLoader reads them (source_query and
    source_line_number, tracing fields that may not parse, removed first)."""
    match = _FRONT.match(text)
    if not match:
        raise TaskFileError("no YAML front matter")
    head = re.sub(
        r"^source_query:\s*.*?(?=\n\w+:\s|\n---|\Z)", "", match.group(1), flags=re.M | re.S
    )
    head = re.sub(r"^source_line_number:.*$", "", head, flags=re.M)
    meta = yaml.load(head, Loader=SAFE) or {}
    if not isinstance(meta, dict):
        raise TaskFileError("the front matter is not a mapping")
    return meta, match.group(2)


def sections(body: str) -> dict[str, str]:
    """`## Title` -> its text, line by line as its TaskLoader splits them."""
    out: dict[str, str] = {}
    current: str | None = None
    lines: list[str] = []
    for line in body.split("\n"):
        header = re.match(r"^##\s+(.+)$", line)
        if header:
            if current:
                out[current] = "\n".join(lines).strip()
            current, lines = header.group(1), []
        elif current:
            lines.append(line)
    if current:
        out[current] = "\n".join(lines).strip()
    return out


def workspace(meta: dict[str, Any], assets: Path) -> tuple[dict[str, bytes], list[str]]:
    """The initial workspace (relative path -> bytes) and the asset files not found."""
    files: dict[str, bytes] = {}
    missing: list[str] = []
    for spec in meta.get("workspace_files") or []:
        if "content" in spec:
            files[str(spec["path"])] = str(spec["content"]).encode()
            continue
        source = str(spec["source"])
        found = next(
            (p for p in (assets / str(meta.get("id")) / source, assets / source) if p.exists()),
            None,
        )
        if found is None or not found.is_file():
            missing.append(source)
        else:
            files[str(spec["dest"])] = found.read_bytes()
    for name in files:
        if Path(name).is_absolute() or ".." in Path(name).parts:
            raise TaskFileError(f"workspace file {name!r} leaves the workspace")
    return files, missing


def unavailable(meta: dict[str, Any], missing: list[str], framework: Any) -> str | None:
    if framework is None:
        return (
            "needs QwenClawBench's own grading engine (its scripts/) from a checkout: set "
            f"{QWENCLAWBENCH_ENV}=PATH"
        )
    need = OFFLINE_NOT.get(str(meta.get("external_dependency") or "").lower())
    if need:
        return f"needs {need} (external_dependency: {meta['external_dependency']})"
    if missing:
        return f"asset files missing from the checkout: {', '.join(missing)}"
    return None


def transcript_of(run: HarnessResult, talk: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """OpenClaw's own session events (its transcript store holds the JSONL events its
    benchmark reads), or, for any other harness, the same events rebuilt from the proxy."""
    rows = run.transcript if run.harness == "openclaw" else []
    if rows and all(isinstance(r.get("event_json"), str) for r in rows):
        last = rows[-1].get("session_id")
        return [json.loads(r["event_json"]) for r in rows if r.get("session_id") == last]
    return conversation.openclaw_transcript(talk)


@dataclass(frozen=True)
class QwenScorer:
    """The grading is the task's own (QwenClawTask.evaluate); this only names the scorer."""

    def collect(self, task: Task, sandbox: Sandbox) -> dict[str, Any]:
        raise VerifierError("a QwenClawBench task is graded by its evaluate()")

    def score(self, task: Task, artifacts: dict[str, Any]) -> Score:
        raise VerifierError("a QwenClawBench task is graded by its evaluate()")


@dataclass(frozen=True)
class QwenClawTask(Task):
    task_file: Path = Path()
    framework: QwenCheckout | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    files: dict[str, bytes] = field(default_factory=dict)
    judge: JudgeSpec = JudgeSpec()

    def prepare(self, sandbox: Sandbox) -> None:
        if self.metadata.get("unavailable"):
            raise VerifierError(f"{self.id} cannot run here: {self.metadata['unavailable']}")
        sandbox.upload_dir(WORKDIR, tar(self.files))
        owner = f"chown -R $(stat -c %u:%g {WORKDIR}) {WORKDIR}"
        done = sandbox.exec(owner, user="root", timeout=120)
        if done.exit_code != 0:
            raise TaskSetupFailed(f"could not give the workspace to the agent: {done.stderr}")

    def evaluate(
        self, sandbox: Sandbox, run: HarnessResult | None = None, proxy: ProxyControl | None = None
    ) -> Score:
        if run is None or proxy is None:
            raise VerifierError("a QwenClawBench task is graded from its proxy-recorded episode")
        work = sandbox.download_dir(WORKDIR)
        talk = conversation.from_calls(calls_of(proxy, run.episode) or [], run.final_answer)
        transcript = transcript_of(run, talk)
        judge = open_judge(proxy, self.judge, "qwenclawbench", of=run.episode, task=self.id)
        failure = None
        try:
            grade = self.grade(sandbox, proxy, judge["key"], transcript, work)
        except Exception as e:
            failure = str(e)
            raise
        finally:
            close_judge(proxy, judge["key"], failure)
        calls = judge_calls(proxy, judge["key"])
        log_dir = save_evidence(
            proxy,
            run.episode,
            {
                "transcript.json": json.dumps(transcript, ensure_ascii=False, indent=1),
                "workspace.tar": work,
                "grading.json": json.dumps(grade, ensure_ascii=False, indent=1),
                "judge.jsonl": "".join(json.dumps(c, ensure_ascii=False) + "\n" for c in calls),
            },
        )
        score = float(grade["score"])
        return Score(
            reward=score,
            resolved=score >= PERFECT,
            details={
                **grade,
                "judge": {"model": self.judge.model, "episode": judge["key"]},
                "log_dir": log_dir,
            },
        )

    def grade(
        self,
        sandbox: Sandbox,
        link: ProxyControl,
        judge_key: str,
        transcript: list[dict[str, Any]],
        work: bytes,
    ) -> dict[str, Any]:
        """Its grade_task in a verifier sandbox, with the workspace as the agent left it."""
        assert self.framework is not None
        home = runtime.HOME
        with runtime.verifier(sandbox, link) as verifier:
            parts = {
                "bench": {
                    **self.framework.scripts(),
                    f"tasks/{self.task_file.name}": self.task_file.read_bytes(),
                },
                "bin": runtime.programs(("claw_common.py", "qwen_grade.py")),
                "run": {"transcript.json": json.dumps(transcript).encode()},
            }
            runtime.lay_out(verifier, parts, private=False)
            verifier.upload_dir(f"{home}/run/workspace", work)
            argv = [
                runtime.PYTHON,
                f"{home}/bin/qwen_grade.py",
                "--task-file",
                f"{home}/bench/tasks/{self.task_file.name}",
                "--transcript",
                f"{home}/run/transcript.json",
                "--workspace",
                f"{home}/run/workspace",
                "--judge-model",
                self.judge.model,
                "--judge-url",
                f"{runtime.proxy_inside(verifier)}/e/{judge_key}/v1",
            ]
            return runtime.run_grader(verifier, argv, GRADE_TIMEOUT)


def load_task(
    task_file: Path, dataset: Path, framework: QwenCheckout | None, benchmark: str, **options: Any
) -> QwenClawTask:
    """One task, runnable or (metadata `unavailable`) saying why not."""
    files: dict[str, bytes] = {}
    try:
        meta, body = front_matter(task_file.read_text(encoding="utf-8"))
        files, missing = workspace(meta, dataset / "assets")
        parts = sections(body)
        prompt = parts.get("Prompt", "").strip()
        oracle = re.search(r"```json\s*\n(.*?)```", parts.get("Pomona Oracle", ""), flags=re.S)
        steps = json.loads(oracle.group(1)) if oracle else {}
        reason = unavailable(meta, missing, framework)
    except (OSError, ValueError, KeyError, yaml.YAMLError) as e:
        meta, prompt, reason, steps = {"id": task_file.stem}, "", f"unreadable: {e}", {}
    return QwenClawTask(
        id=f"qwenclawbench/{meta.get('id') or task_file.stem}",
        benchmark=benchmark,
        instruction=prompt,
        scorer=QwenScorer(),
        environment=Environment(workdir=WORKDIR),
        solution=oracle_steps(steps.get("solution")) or None,
        task_file=task_file,
        framework=framework,
        meta=meta,
        files=files,
        metadata={
            "agent_timeout": float(meta.get("timeout_seconds") or 120),
            "category": meta.get("category", ""),
            "unavailable": reason,
            "negative": oracle_steps(steps.get("negative")),
        },
        **options,
    )


def tasks(
    dataset: Path,
    framework: QwenCheckout | None,
    benchmark: str,
    only: set[str] | None = None,
    **options: Any,
) -> list[QwenClawTask]:
    """Every tasks/task_*.md of the dataset (or only those named: by file stem, id or
    `qwenclawbench/ID`), sorted; unavailable ones are kept and say why."""
    files = sorted((dataset / "tasks").glob("task_*.md"))
    if not files:
        raise CheckoutError(f"no QwenClawBench tasks (tasks/task_*.md) under {dataset}")
    if only is not None:
        files = [f for f in files if f.stem in only or f"qwenclawbench/{f.stem}" in only]
    return [load_task(f, dataset, framework, benchmark, **options) for f in files]
