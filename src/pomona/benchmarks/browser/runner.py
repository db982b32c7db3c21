"""Browser episodes for `pomona run`: the WebVoyager loop (the browser benchmarks' natural
harness) with a model through the recording proxy, on a fresh browser sandbox per attempt,
graded by the task's oracle and, when a judge model is named, by the benchmark's own judge.

Every attempt leaves an `episodes` row. The proxy episode opens once the browser is up, because
the oracle's script (the reference actions; for MiniWoB solved from the instance drawn) needs
the first page; a browser that never came up still gets a row, typed `sandbox` or `timeout`.
Results are also written in the official layouts under <trajectories>/browser/<run>/.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pomona.benchmarks.browser import judges, layouts, suite
from pomona.benchmarks.task import Task
from pomona.browser_env.errors import BrowserInfraError
from pomona.browser_env.session import BrowserSession, SessionOptions
from pomona.gym.episode import ORACLE, SCRIPTED, EpisodeRecord, close_episode
from pomona.harnesses import webvoyager
from pomona.harnesses.proxy_link import ProxyLink

NATURAL_HARNESS = webvoyager.NAME


@dataclass
class BrowserRun:
    """What every attempt of one run shares."""

    link: ProxyLink
    client: Any  # SandboxClient
    run_id: str
    benchmark: str
    model: str = ORACLE
    judge_model: str | None = None
    prompts: dict[str, str] = field(default_factory=lambda: dict(judges.PROMPTS))
    options: SessionOptions = field(default_factory=SessionOptions)
    max_steps: int = 15
    results: Path | None = None  # where the official layouts go


def oracle_reply(action: str) -> str:
    return f"Thought: the reference plan's next step.\nAction: {action}"


def open_agent_episode(
    run: BrowserRun, task: Task, attempt: int, script: list[str] | None, model: str
) -> dict[str, str]:
    fields: dict[str, Any] = {
        "model": model,
        "metadata": {
            "run": run.run_id,
            "benchmark": task.benchmark,
            "task": task.id,
            "harness": NATURAL_HARNESS,
            "harness_version": webvoyager.VERSION,
            "attempt": attempt,
        },
    }
    if script is not None:
        fields["script"] = script
        # WebVoyager's calls carry no tools: they are the policy's turns, not side calls
        if run.link.server is not None:
            fields["tool_less_is_side"] = False
        else:
            fields["tool_less_calls"] = "main"
    return run.link.open_episode(**fields)


def judge_chat(run: BrowserRun, task: Task, agent_key: str, judge: str) -> Any:
    """A chat function for one judge of one trajectory, recorded as its own proxy episode."""
    ep = run.link.open_episode(
        model=run.judge_model,
        metadata={
            "run": run.run_id,
            "benchmark": task.benchmark,
            "task": task.id,
            "role": "judge",
            "judge": judge,
            "judged_episode": agent_key,
        },
    )

    def chat(messages: list[dict[str, Any]], **params: Any) -> str:
        return webvoyager.chat(ep["base_url"], run.judge_model or "", messages, **params)

    chat.key = ep["key"]  # type: ignore[attr-defined]
    return chat


def write_layouts(run: BrowserRun, task: Task, result: webvoyager.AgentResult) -> None:
    if run.results is None:
        return
    if "webvoyager" in task.metadata:
        layouts.write_webvoyager(
            run.results / "webvoyager", task.id, result.messages, result.screenshots
        )
        layouts.write_mind2web(
            run.results / "mind2web",
            task.metadata["mind2web"],
            result.steps,
            result.screenshots,
            result.answer,
        )


def run_episode(run: BrowserRun, task: Task, attempt: int = 0) -> EpisodeRecord:
    """One attempt, start to `episodes` row. Never raises for a failed attempt."""
    t0 = time.monotonic()
    record = EpisodeRecord(
        "", task.id, task.benchmark, NATURAL_HARNESS, run.model, attempt, started_at=time.time()
    )
    session = BrowserSession(
        run.client,
        web=suite.web_for(task),
        options=run.options,
        labels={"run": run.run_id, "task": task.id[:63]},
    )
    ep: dict[str, str] | None = None
    try:
        session.start()
        record.timings["sandbox"] = time.monotonic() - t0
        instruction = suite.begin(session, task, seed=attempt)
        script = None
        model = run.model
        if run.model == ORACLE:
            marks = session.observe().marks
            script = [oracle_reply(a) for a in suite.oracle_actions(task, instruction, marks)]
            model = SCRIPTED
        ep = open_agent_episode(run, task, attempt, script, model)
        record.episode = ep["key"]
        agent = webvoyager.WebVoyagerAgent(ep["base_url"], model, max_iter=run.max_steps)
        record.harness_started_at = time.time()
        t1 = time.monotonic()
        result = agent.run(
            session, instruction, task.metadata["web"], ended=lambda: suite.ended(session, task)
        )
        record.timings["harness"] = time.monotonic() - t1
        record.final_answer, record.calls = result.answer, result.turns
        t2 = time.monotonic()
        score = suite.grade(session, task, result.answer)
        details = dict(score.details)
        if run.judge_model and task.benchmark in judges.JUDGE_OF:
            kind = judges.JUDGE_OF[task.benchmark]
            chat = judge_chat(run, task, ep["key"], kind)
            verdict = judges.run_judge(
                task.benchmark,
                chat,
                task,
                result.answer,
                result.steps,
                result.screenshots,
                run.prompts,
            )
            details["judge"] = {**(verdict or {}), "episode": chat.key}
        record.timings["score"] = time.monotonic() - t2
        record.reward, record.resolved = score.reward, score.resolved
        record.score = {**score.model_dump(), "details": details}
        write_layouts(run, task, result)
    except BrowserInfraError as e:
        record.failure_kind, record.failure_message = e.kind, str(e)
    except webvoyager.AgentFailure as e:
        record.failure_kind, record.failure_message = e.kind, str(e)
    except Exception as e:  # noqa: BLE001 - one attempt's failure is its record
        record.failure_kind, record.failure_message = "harness", f"{type(e).__name__}: {e}"
    finally:
        session.close()
        record.timings["total"] = time.monotonic() - t0
        if ep is None:  # the browser never came up: still one row for the attempt
            try:
                ep = open_agent_episode(run, task, attempt, None, run.model)
                record.episode = ep["key"]
            except Exception as e:  # noqa: BLE001
                record.failure_kind, record.failure_message = "proxy", f"no episode: {e!r}"
        if record.episode:
            close_episode(run.link, record)
    return record


def run_all(
    run: BrowserRun, tasks: list[Task], k: int = 1, concurrency: int = 2, on_episode: Any = None
) -> list[EpisodeRecord]:
    """`k` attempts of every task, at most `concurrency` browsers at once, in (task, attempt) order."""
    jobs = [(t, i) for t in tasks for i in range(k)]

    def one(job: tuple[Task, int]) -> EpisodeRecord:
        record = run_episode(run, *job)
        if on_episode is not None:
            on_episode(record)
        return record

    with ThreadPoolExecutor(
        max_workers=max(1, concurrency), thread_name_prefix="pomona-browser"
    ) as pool:
        return list(pool.map(one, jobs))


def judge_agreement(records: list[EpisodeRecord]) -> float | None:
    pairs = [
        (bool(r.resolved), ((r.score or {}).get("details", {}).get("judge") or {}).get("label"))
        for r in records
        if r.failure_kind == "none" and r.score
    ]
    return judges.agreement(pairs)


def run_benchmark(
    benchmark: str,
    tasks: list[Task],
    harness: str,
    model: str,
    *,
    k: int,
    link: ProxyLink,
    runtime: str | None,
    state_dir: str | None,
    run_id: str,
    trajectories: Path,
    concurrency: int,
    judge_model: str | None = None,
    judge_prompts: str | None = None,
    on_episode: Any = None,
) -> list[EpisodeRecord]:
    """`pomona run` for a browser benchmark (its harness must be the WebVoyager loop)."""
    from pomona.gym.sandboxes import shared_client

    if harness != NATURAL_HARNESS:
        raise ValueError(
            f"browser benchmarks run with the {NATURAL_HARNESS} harness, not {harness!r}"
        )
    run = BrowserRun(
        link,
        shared_client(runtime or "local", state_dir),
        run_id,
        benchmark,
        model,
        judge_model,
        judges.load_prompts(judge_prompts),
        results=trajectories / "browser" / run_id,
    )
    return run_all(run, tasks, k, concurrency, on_episode)
