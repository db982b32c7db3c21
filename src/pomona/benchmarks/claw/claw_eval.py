"""Claw-Eval tasks (claw-eval/claw-eval's `tasks/<id>/task.yaml` + `grader.py`) from the user's
checkout, run through any harness with Claw-Eval's own parts doing Claw-Eval's work:

- its mock services, sandbox server, ToolDispatcher and UserAgent run as root inside the
  episode's sandbox (sandbox/claw_host.py), with the task's fixtures injected by its own code;
- a harness reaches the task's tools over MCP (sandbox/claw_relay.py); the `claw-eval` harness
  is its own agent loop;
- after the run its own code collects the audits and the env snapshot, and its grader, trace
  reader, LLMJudge and scoring grade the trial in a verifier sandbox (sandbox/claw_grade.py).

Pomona reads of a task.yaml only what it needs to decide whether the task can run here and to
lay it out; Claw-Eval's code reads the rest. A task that needs what this machine lacks (the live
web, a fixture missing from the checkout, a program its env snapshot runs) is unavailable, with
the reason, instead of scored.
"""

from __future__ import annotations

import base64
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from pomona.benchmarks.claw import checkout, conversation, runtime
from pomona.benchmarks.claw.checkout import (
    CLAW_EVAL_ENV,
    SAFE,
    CheckoutError,
    ClawEvalCheckout,
    TaskFileError,
)
from pomona.benchmarks.claw.judge import JudgeSpec, close_judge, judge_calls, open_judge
from pomona.benchmarks.task import Environment, Score, Task, VerifierError
from pomona.orchestrator.sdk.client import Sandbox
from pomona.proxy.control import calls_of

if TYPE_CHECKING:
    from pomona.harnesses.runner import HarnessResult
    from pomona.proxy.control import ProxyControl

DATA = Path(__file__).parents[1] / "data" / "claw_eval_local"  # tasks/<id>/, the official layout
PASS_THRESHOLD = 0.75  # Claw-Eval's is_pass (models/scoring.py): for Pomona's own reports
INTERNET = ("web_real", "web_real_injection")  # services that search the live web (SERP API)
GRADE_TIMEOUT = 1200.0  # Claw-Eval's LLMJudge retries a failing judge 30 times, backing off
_FILE_LISTS = ("sandbox_files", "sandbox_grader_files", "local_grader_files")


def read_task(task_dir: Path) -> dict[str, Any]:
    """A task.yaml as data; what Pomona relies on is checked, the rest is Claw-Eval's."""
    raw = yaml.load((task_dir / "task.yaml").read_text(encoding="utf-8"), Loader=SAFE)
    if not isinstance(raw, dict) or not raw.get("task_id"):
        raise TaskFileError(f"{task_dir}/task.yaml: no task_id")
    if not isinstance(raw.get("prompt"), dict) or not raw["prompt"].get("text"):
        raise TaskFileError(f"{task_dir}/task.yaml: no prompt.text")
    return raw


def _service_paths(raw: dict[str, Any]) -> list[str]:
    """Checkout-relative files the services' env names (their fixtures: `tasks/ID/...`)."""
    out = []
    for svc in raw.get("services") or []:
        for value in (svc.get("env") or {}).values():
            out += [p for p in str(value).split(",") if p.startswith("tasks/")]
    return out


def _listed(raw: dict[str, Any]) -> list[str]:
    files = [p for key in _FILE_LISTS for p in raw.get(key) or []]
    files += (raw.get("prompt") or {}).get("attachments") or []
    return files + ((raw.get("environment") or {}).get("fixtures") or [])


def missing_files(task_dir: Path, root: Path, raw: dict[str, Any]) -> list[str]:
    """Files the task names that are in neither its directory nor (as Claw-Eval falls back)
    the checkout's root."""
    listed = [p for p in _listed(raw) if not (task_dir / p).exists() and not (root / p).exists()]
    return listed + [p for p in _service_paths(raw) if not (root / p).exists()]


def _snapshot_needs(task_dir: Path, raw: dict[str, Any]) -> list[str]:
    """What the task's env snapshot runs that this machine lacks: a program not installed, or a
    script of the task's that drives a browser through Playwright (the payload has none)."""
    needs = []
    for command in raw.get("env_snapshot_commands") or []:
        words = str(command).split()
        if words and words[0] not in ("python", "python3") and shutil.which(words[0]) is None:
            needs.append(words[0])
        for word in words[1:]:
            script = task_dir / word.removeprefix("/workspace/")
            if word.endswith(".py") and script.is_file() and "playwright" in script.read_text():
                needs.append(f"Playwright with a browser (for {script.name})")
    return sorted(set(needs))


def unavailable(task_dir: Path, root: Path, raw: dict[str, Any], framework: Any) -> str | None:
    """Why the task cannot run on this machine, or None."""
    if framework is None:
        return (
            "needs Claw-Eval's own framework (its mock_services/ and src/claw_eval/) from a "
            f"checkout: set {CLAW_EVAL_ENV}=PATH"
        )
    web = sorted({s["name"] for s in raw.get("services") or []} & set(INTERNET))
    if web:
        return f"needs the internet: its service {', '.join(web)} searches the live web"
    gone = missing_files(task_dir, root, raw)
    if gone:
        return f"fixture files missing from the checkout: {', '.join(gone)}"
    needs = _snapshot_needs(task_dir, raw)
    if needs:
        return f"its env snapshot needs what this machine lacks: {', '.join(needs)}"
    return None


# --- the task --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClawEvalScorer:
    """The grading is the task's own (ClawEvalTask.evaluate); this only names the scorer."""

    def collect(self, task: Task, sandbox: Sandbox) -> dict[str, Any]:
        raise VerifierError("a Claw-Eval task is graded by its evaluate(), with its evidence")

    def score(self, task: Task, artifacts: dict[str, Any]) -> Score:
        raise VerifierError("a Claw-Eval task is graded by its evaluate(), with its evidence")


@dataclass(frozen=True)
class ClawEvalTask(Task):
    task_dir: Path = Path()
    root: Path = Path()  # the directory holding tasks/ (the checkout, or Pomona's local set)
    framework: ClawEvalCheckout | None = None
    raw: dict[str, Any] = field(default_factory=dict)
    judge: JudgeSpec = JudgeSpec()
    user_model: str = "scripted"
    user_script: tuple[str, ...] | None = None  # the scripted user's replies, round by round

    @property
    def tool_names(self) -> set[str]:
        return {t["name"] for t in self.raw.get("tools") or []}

    @property
    def inside(self) -> str:
        return f"{runtime.HOME}/bench/tasks/{self.task_dir.name}"

    def bench_files(self, graders: bool = False) -> dict[str, bytes]:
        """The checkout's files this task's sandbox gets (its peers' graders when it grades)."""
        assert self.framework is not None
        refs = _service_paths(self.raw) + _listed(self.raw)
        files = {
            **self.framework.framework(),
            **checkout.task_files(self.task_dir, self.root, refs),
        }
        if graders:
            files.update(self.framework.peers(self.task_dir / "grader.py"))
        return files

    def _user(self, sandbox: Sandbox) -> dict[str, Any] | None:
        if not (self.raw.get("user_agent") or {}).get("enabled"):
            return None
        return {
            "model": self.user_model,
            "proxy": runtime.proxy_inside(sandbox),
            "script": list(self.user_script or ()) if self.user_model == "scripted" else None,
            "metadata": {"task": self.id, "user": self.user_model},
        }

    def prepare(self, sandbox: Sandbox) -> None:
        if self.metadata.get("unavailable"):
            raise VerifierError(f"{self.id} cannot run here: {self.metadata['unavailable']}")
        parts = {
            "bench": self.bench_files(),
            "bin": runtime.programs(runtime.HOST_PROGRAMS),
            "agent": {
                **runtime.programs(runtime.AGENT_PROGRAMS),
                "sandbox_server.py": (
                    self.framework_root / "src/claw_eval/sandbox/server.py"
                ).read_bytes(),
            },
        }
        runtime.lay_out(sandbox, parts, private=True)
        runtime.start_host(sandbox, self.inside, self._user(sandbox))

    @property
    def framework_root(self) -> Path:
        assert self.framework is not None
        return self.framework.root

    def evidence(self, sandbox: Sandbox) -> tuple[dict[str, Any], dict[str, Any]]:
        """The trial's evidence from the episode's sandbox, by root: the host's record and the
        audits, then (after the grader-only files are in) the env snapshot."""
        evidence = runtime.ctl(sandbox, "finish")
        snapshot = evidence.pop("env_snapshot")
        for rel in self.raw.get("local_grader_files") or []:  # read from the checkout, as it does
            path = self.task_dir / rel
            snapshot[f"local_file:{rel}"] = (
                {"encoding": "base64", "content": base64.b64encode(path.read_bytes()).decode()}
                if path.exists()
                else {"error": f"not found: {path}"}
            )
        return evidence, snapshot

    def trace(self, evidence: dict[str, Any], talk: list[dict[str, Any]], model: str) -> str:
        """The trial's Claw-Eval trace: its own loop's, or built from the proxy's record."""
        if evidence["loop_traces"]:
            return list(evidence["loop_traces"].values())[-1]
        events = conversation.claw_eval_trace(
            task_id=self.raw["task_id"],
            model=model,
            prompt=self.raw["prompt"]["text"],
            talk=talk,
            tools=self.tool_names,
            evidence=evidence,
            max_rounds=int((self.raw.get("user_agent") or {}).get("max_rounds", 3)),
        )
        return "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in events)

    def evaluate(
        self, sandbox: Sandbox, run: HarnessResult | None = None, proxy: ProxyControl | None = None
    ) -> Score:
        if run is None or proxy is None:
            raise VerifierError("a Claw-Eval task is graded from its proxy-recorded episode")
        evidence, snapshot = self.evidence(sandbox)
        calls = calls_of(proxy, run.episode) or []
        talk = conversation.from_calls(calls, run.final_answer)
        model = next((c.get("model") for c in calls if c.get("model")), "") or ""
        trace = self.trace(evidence, talk, model)
        return self.grade(sandbox, proxy, run.episode, trace, snapshot)

    def grade(
        self,
        sandbox: Sandbox,
        link: ProxyControl,
        episode: str,
        trace: str,
        snapshot: dict[str, Any],
    ) -> Score:
        """Claw-Eval's grading of the trace, in a verifier sandbox, judged through the proxy."""
        judge = open_judge(link, self.judge, "claw-eval", of=episode, task=self.id)
        failure = None
        try:
            with runtime.verifier(sandbox, link) as verifier:
                parts = {
                    "bench": self.bench_files(graders=True),
                    "bin": runtime.programs(("claw_common.py", "claw_grade.py")),
                    "run": {
                        "trace.jsonl": trace.encode(),
                        "env_snapshot.json": json.dumps(snapshot).encode(),
                    },
                }
                runtime.lay_out(verifier, parts, private=False)
                home = runtime.HOME
                argv = [
                    runtime.PYTHON,
                    f"{home}/bin/claw_grade.py",
                    "--task-dir",
                    self.inside,
                    "--trace",
                    f"{home}/run/trace.jsonl",
                    "--snapshot",
                    f"{home}/run/env_snapshot.json",
                    "--judge-model",
                    self.judge.model,
                    "--judge-url",
                    f"{runtime.proxy_inside(verifier)}/e/{judge['key']}/v1",
                ]
                verdict = runtime.run_grader(verifier, argv, GRADE_TIMEOUT)
        except Exception as e:
            failure = str(e)
            raise
        finally:
            close_judge(link, judge["key"], failure)
        return self.score_of(verdict, link, episode, judge["key"], trace, snapshot)

    def score_of(
        self,
        verdict: dict[str, Any],
        link: ProxyControl,
        episode: str,
        judge_key: str,
        trace: str,
        snapshot: dict[str, Any],
    ) -> Score:
        result = verdict["grading_result"]
        calls = judge_calls(link, judge_key)
        log_dir = save_evidence(
            link,
            episode,
            {
                "trace.jsonl": trace + json.dumps(result, ensure_ascii=False) + "\n",
                "env_snapshot.json": json.dumps(snapshot, ensure_ascii=False),
                "judge.jsonl": "".join(json.dumps(c, ensure_ascii=False) + "\n" for c in calls),
            },
        )
        return Score(
            reward=float(result["task_score"]),
            resolved=bool(result["passed"]),
            details={
                "task_score": result["task_score"],
                "passed": result["passed"],
                "scores": verdict["scores"],
                "judge": {
                    "model": self.judge.model,
                    "episode": judge_key,
                    "calls": result.get("judge_calls", []),
                },
                "log_dir": log_dir,
            },
        )


def save_evidence(link: ProxyControl, episode: str, files: dict[str, str | bytes]) -> str | None:
    """The grading evidence beside the trajectories (DIR/claw/<episode>/), which the episode's
    row lists as its `grading/...` artifacts: what was graded (a trace, a transcript, the
    workspace), the verdict with its per-dimension scores, the judge's prompts and replies."""
    if link.trajectories is None:
        return None
    where = Path(link.trajectories) / "claw" / episode
    where.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (where / name).write_bytes(data.encode() if isinstance(data, str) else data)
    return str(where)


def load_task(
    task_dir: Path,
    root: Path,
    framework: ClawEvalCheckout | None,
    benchmark: str,
    **options: Any,
) -> ClawEvalTask:
    """One task, runnable or (metadata `unavailable`) saying why not."""
    try:
        raw = read_task(task_dir)
        reason = unavailable(task_dir, root, raw, framework)
    except (OSError, ValueError, yaml.YAMLError) as e:
        raw, reason = {"task_id": task_dir.name, "prompt": {"text": ""}}, f"unreadable: {e}"
    timeout = float((raw.get("environment") or {}).get("timeout_seconds") or 300)
    oracle = oracle_of(task_dir)
    return ClawEvalTask(
        id=f"claw-eval/{raw['task_id']}",
        benchmark=benchmark,
        instruction=str(raw["prompt"]["text"]),
        scorer=ClawEvalScorer(),
        environment=Environment(mcp=(runtime.relay(),)),
        solution=oracle_steps(oracle.get("solution")) or None,
        task_dir=task_dir,
        root=root,
        framework=framework,
        raw=raw,
        metadata={
            "agent_timeout": timeout,
            "category": raw.get("category", ""),
            "unavailable": reason,
            "negative": oracle_steps(oracle.get("negative")),
        },
        **options,
    )


def oracle_of(task_dir: Path) -> dict[str, Any]:
    """Pomona's scripted steps for its local tasks (`oracle.json`: a solution and a negative
    that must fail), which Claw-Eval's loader does not read; official tasks have none."""
    path = task_dir / "oracle.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def oracle_steps(values: Any) -> tuple[str, ...]:
    """Scripted-model steps as the proxy takes them: JSON steps (tool calls, text) as strings."""
    return tuple(
        v if isinstance(v, str) else json.dumps(v, ensure_ascii=False) for v in values or ()
    )


def tasks(
    root: Path,
    framework: ClawEvalCheckout | None,
    benchmark: str,
    only: set[str] | None = None,
    **options: Any,
) -> list[ClawEvalTask]:
    """Every task directory under root/tasks (or only those named: by directory, task id or
    `claw-eval/ID`), sorted by name; unavailable ones are kept and say why."""
    dirs = sorted(p.parent for p in (root / "tasks").glob("*/task.yaml"))
    if not dirs:
        raise CheckoutError(f"no Claw-Eval tasks (tasks/*/task.yaml) under {root}")
    if only is not None:
        dirs = [d for d in dirs if d.name in only or f"claw-eval/{d.name}" in only]
    return [load_task(d, root, framework, benchmark, **options) for d in dirs]
