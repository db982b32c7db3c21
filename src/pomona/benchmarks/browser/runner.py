"""Browser episodes for `pomona run`: an agent on a fresh browser sandbox per attempt, its model
calls through the recording proxy, graded by the task's oracle and, when a judge model is named,
by the benchmark's own judge.

Two kinds of agent play the same tasks with the same observations and actions:
  webvoyager   the WebVoyager loop (the browser benchmarks' natural harness), driving the
               session directly
  any harness  that takes MCP (claude-code, opencode, ...): it runs in the browser's sandbox,
               which then reaches the proxy through its gateway, and browses through the
               browser's MCP tools (browser_env/bridge.py), each call carried out here

Every attempt leaves an `episodes` row. The proxy episode opens once the browser is up, because
the oracle's script (the reference actions; for MiniWoB solved from the instance drawn) needs
the first page; a browser that never came up still gets a row, typed `sandbox` or `timeout`.
Results are also written in the official layouts under <trajectories>/browser/<run>/.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pomona.benchmarks.browser import judges, layouts, official, suite
from pomona.benchmarks.browser import loop as webvoyager
from pomona.benchmarks.task import Score, Task, VerifierError
from pomona.browser_env import actions
from pomona.browser_env import image as browser_image
from pomona.browser_env.bridge import PYTHON_HARNESS, McpBridge
from pomona.browser_env.errors import BrowserInfraError
from pomona.browser_env.session import BrowserSession, SessionOptions
from pomona.browser_env.tools import SERVER_NAME, tool_call_of
from pomona.errors import PomonaError
from pomona.gym.episode import (
    ORACLE,
    SCRIPTED,
    EpisodeRecord,
    close_episode,
    ensure_harness,
    save_artifacts,
)
from pomona.harnesses.base import API_KEY
from pomona.harnesses.proxy_link import ProxyLink
from pomona.harnesses.registry import get as get_harness
from pomona.harnesses.runner import run as run_harness
from pomona.harnesses.runner import tools_mount

NATURAL_HARNESS = webvoyager.NAME

HARNESS_PROMPT = """{task}

Do this in the web browser you are given through the `{server}` tools; {web} is already open in
it. `browser_observe` shows the page: a screenshot in which every element you can act on has a
numbered box, and the same numbers listed with each element's text. `browser_click`,
`browser_type`, `browser_scroll`, `browser_go_back`, `browser_search` and `browser_wait` act on
the page by those numbers and show the page as it is afterwards. Work only through the browser
tools. When you are done, reply with the answer (for an errand, say what you did) as your final
message."""


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
    harness: str = NATURAL_HARNESS
    timeout: float = 600.0  # a harness's budget per attempt


def oracle_reply(action: str) -> str:
    return f"Thought: the reference plan's next step.\nAction: {action}"


def oracle_tool_steps(reference: list[str]) -> list[str]:
    """The reference actions as the scripted model's MCP tool calls, ending in the answer."""
    steps, answer = [], "Done."
    for line in reference:
        action = actions.parse(line)
        if action.kind == "answer":
            answer = action.text
            break
        name, arguments = tool_call_of(action)
        steps.append(json.dumps({"tool": name, "server": SERVER_NAME, "arguments": arguments}))
    return [*steps, json.dumps({"text": answer})]


def final_answer(text: str | None) -> str | None:
    """A harness's last message as the answer; a WebVoyager-style `ANSWER;` lead is dropped."""
    if text is None:
        return None
    if re.match(r"answer\b", actions.action_line(text), re.I):
        with contextlib.suppress(actions.ActionError):
            return actions.parse(text).text
    return text.strip()


def open_agent_episode(
    run: BrowserRun, task: Task, attempt: int, script: list[str] | None, model: str
) -> dict[str, str]:
    natural = run.harness == NATURAL_HARNESS
    version = webvoyager.VERSION if natural else get_harness(run.harness).version
    fields: dict[str, Any] = {
        "model": model,
        "metadata": {
            "run": run.run_id,
            "benchmark": task.benchmark,
            "task": task.id,
            "harness": run.harness,
            "harness_version": version,
            "attempt": attempt,
        },
    }
    if script is not None:
        fields["script"] = script
    if script is not None and natural:
        # WebVoyager's calls carry no tools: they are the policy's turns, not side calls
        fields["tool_less_calls"] = "main"
    return run.link.open_episode(**fields)


@dataclass(frozen=True)
class JudgeChat:
    """A judge's chat function, over its own recorded proxy episode (`key`)."""

    base_url: str
    model: str
    key: str

    def __call__(self, messages: list[dict[str, Any]], **params: Any) -> str:
        return webvoyager.chat(self.base_url, self.model, messages, **params)


def judge_chat(run: BrowserRun, task: Task, agent_key: str, judge: str) -> JudgeChat:
    """The chat of one judge of one trajectory, recorded as its own proxy episode."""
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
    return JudgeChat(ep["base_url"], run.judge_model or "", ep["key"])


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


class HarnessFailure(PomonaError, RuntimeError):
    """The harness run ended without a usable answer; `kind` is the judged failure kind."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


def play_webvoyager(
    run: BrowserRun,
    task: Task,
    attempt: int,
    session: BrowserSession,
    instruction: str,
    record: EpisodeRecord,
) -> webvoyager.AgentResult:
    """The WebVoyager loop on the session; its model is the oracle's script or a real one."""
    script, model = None, run.model
    if run.model == ORACLE:
        marks = session.observe().marks
        script = [oracle_reply(a) for a in suite.oracle_actions(task, instruction, marks)]
        model = SCRIPTED
    ep = open_agent_episode(run, task, attempt, script, model)
    record.episode = ep["key"]
    agent = webvoyager.WebVoyagerAgent(ep["base_url"], model, max_iter=run.max_steps)
    if task.metadata.get("official") == official.WEBVOYAGER:  # the checkout's own prompt
        agent.system_prompt = official.WebVoyagerCheckout(
            Path(task.metadata["checkout"])
        ).system_prompt()
    record.harness_started_at = time.time()
    return agent.run(
        session, instruction, task.metadata["web"], ended=lambda: suite.ended(session, task)
    )


def play_harness(
    run: BrowserRun,
    task: Task,
    attempt: int,
    session: BrowserSession,
    instruction: str,
    record: EpisodeRecord,
) -> webvoyager.AgentResult:
    """A real harness in the browser's sandbox, browsing through the MCP bridge; this thread
    serves its tool calls while another waits for the harness."""
    harness = get_harness(run.harness)
    sandbox = session.sandbox
    if sandbox is None:
        raise RuntimeError("the browser session is not started: no sandbox to run the harness in")
    bridge = McpBridge(session, ended=lambda: suite.ended(session, task))
    try:
        server = bridge.install()
        first = bridge.tools.observe()
        script, model = None, run.model
        if run.model == ORACLE:
            reference = suite.oracle_actions(task, instruction, first.marks)
            script, model = harness.scripted(oracle_tool_steps(reference)), SCRIPTED
        ep = open_agent_episode(run, task, attempt, script, model)
        record.episode = ep["key"]
        prompt = HARNESS_PROMPT.format(
            task=instruction, web=task.metadata["web"], server=SERVER_NAME
        )
        outcome: dict[str, Any] = {}

        def play() -> None:
            try:
                outcome["result"] = run_harness(
                    harness, prompt, sandbox, model, run.link, timeout=run.timeout,
                    episode=ep, close=False, mcp=[server],
                )  # fmt: skip
            except BaseException as e:  # noqa: BLE001 - reported on the serving thread
                outcome["error"] = e

        record.harness_started_at = time.time()
        player = threading.Thread(target=play, name=f"pomona-harness-{task.id}", daemon=True)
        player.start()
        bridge.serve_while(player.is_alive)
        player.join()
    finally:
        bridge.close()
    if "error" in outcome:
        raise outcome["error"]
    if bridge.failure is not None:
        raise bridge.failure
    result = outcome["result"]
    record.artifacts = save_artifacts(run.link, result.episode, result.artifacts)
    if result.failure_kind != "none":
        raise HarnessFailure(result.failure_kind, result.failure_message or "the harness failed")
    answer = final_answer(result.final_answer)
    steps = bridge.tools.steps
    return webvoyager.AgentResult(
        messages=layouts.webvoyager_messages(instruction, task.metadata["web"], steps, answer),
        screenshots=bridge.tools.screenshots,
        steps=steps,
        answer=answer,
        turns=result.main_calls if result.main_calls is not None else result.calls,
    )


def run_episode(run: BrowserRun, task: Task, attempt: int = 0) -> EpisodeRecord:
    """One attempt, start to `episodes` row. Never raises for a failed attempt."""
    t0 = time.monotonic()
    record = EpisodeRecord(
        "", task.id, task.benchmark, run.harness, run.model, attempt, started_at=time.time()
    )
    options = run.options
    if task.environment.network == "full" and run.harness == NATURAL_HARNESS:
        options = dataclasses.replace(options, network="full")  # an official set's live web
    session = BrowserSession(
        run.client,
        web=suite.web_for(task),
        options=options,
        labels={"run": run.run_id, "task": task.id[:63]},
    )
    play = play_webvoyager if run.harness == NATURAL_HARNESS else play_harness
    try:
        session.start()
        record.timings["sandbox"] = time.monotonic() - t0
        instruction = suite.begin(session, task, seed=attempt)
        t1 = time.monotonic()
        result = play(run, task, attempt, session, instruction, record)
        record.timings["harness"] = time.monotonic() - t1
        record.final_answer, record.calls = result.answer, result.turns
        t2 = time.monotonic()
        if task.metadata.get("official"):
            score = judge_official(run, task, record.episode, result)
        else:
            score = suite.grade(session, task, result.answer)
        details = dict(score.details)
        if run.judge_model and task.benchmark in judges.JUDGE_OF:
            kind = judges.JUDGE_OF[task.benchmark]
            chat = judge_chat(run, task, record.episode, kind)
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
    except (BrowserInfraError, webvoyager.AgentFailure, HarnessFailure) as e:
        record.failure_kind, record.failure_message = e.kind, str(e)
    except VerifierError as e:  # no trustworthy verdict: never a 0
        record.failure_kind, record.failure_message = "verifier", str(e)
    except Exception as e:  # noqa: BLE001 - one attempt's failure is its record
        record.failure_kind, record.failure_message = "harness", f"{type(e).__name__}: {e}"
    finally:
        session.close()
        record.timings["total"] = time.monotonic() - t0
        if not record.episode:  # the browser never came up: still one row for the attempt
            try:
                ep = open_agent_episode(run, task, attempt, None, run.model)
                record.episode = ep["key"]
            except Exception as e:  # noqa: BLE001
                record.failure_kind, record.failure_message = "proxy", f"no episode: {e!r}"
        if record.episode:
            close_episode(run.link, record)
    return record


def judge_official(
    run: BrowserRun, task: Task, agent_key: str, result: webvoyager.AgentResult
) -> Score:
    """An official set's verdict: its own judge code from the checkout, over the trajectory
    written in its layout, through a recorded proxy episode of its own."""
    if not run.judge_model or run.results is None:
        raise VerifierError(f"{task.benchmark} is graded by its own judge only: name --judge M")
    write_layouts(run, task, result)
    chat = judge_chat(run, task, agent_key, "webvoyager-official")
    folder = run.results / "webvoyager" / f"task{task.id}"
    client = official.JudgeClient(chat.base_url, API_KEY)
    verdict = official.judge_webvoyager_layout(
        task.metadata["checkout"], folder, client, chat.model
    )
    if verdict["label"] is None:
        raise VerifierError(
            f"the judge gave no verdict (neither SUCCESS nor NOT SUCCESS) for {task.id}"
        )
    label = int(verdict["label"])
    return Score(
        reward=float(label),
        resolved=label == 1,
        details={"judge": {**verdict, "episode": chat.key}},
    )


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


def harness_options(run_link: ProxyLink, options: SessionOptions, harness: str) -> SessionOptions:
    """The browser sandbox for a harness that browses: it reaches the proxy through the gateway
    and has the tools payload (the harness and the MCP server's CPython), both installed first."""
    h = get_harness(harness)
    if not h.takes_mcp:
        raise ValueError(
            f"{h.name} has no MCP client Pomona can configure, so it cannot browse; use "
            f"{NATURAL_HARNESS} or a harness that takes MCP (claude-code, opencode, ...)"
        )
    ensure_harness(h)
    ensure_harness(PYTHON_HARNESS)
    return dataclasses.replace(
        options, network="gateway", gateway=run_link.gateway(), mounts=(tools_mount(),)
    )


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
    timeout: float = 600.0,
) -> list[EpisodeRecord]:
    """`pomona run` for a browser benchmark: the WebVoyager loop, or a harness that takes MCP."""
    from pomona.gym.sandboxes import shared_client

    options = SessionOptions(
        image=browser_image.for_runtime(runtime), disk=browser_image.disk_for(runtime)
    )
    if harness != NATURAL_HARNESS:
        options = harness_options(link, options, harness)
    run = BrowserRun(
        link,
        shared_client(runtime or "local", state_dir),
        run_id,
        benchmark,
        model,
        judge_model,
        judges.load_prompts(judge_prompts),
        options=options,
        results=trajectories / "browser" / run_id,
        harness=harness,
        timeout=timeout,
    )
    records = run_all(run, tasks, k, concurrency, on_episode)
    if judge_model and run.results is not None:
        write_judgments(run.results, records)
    return records


def write_judgments(results: Path, records: list[EpisodeRecord]) -> Path:
    """The grading evidence of a judged run beside the layouts: per attempt the oracle's verdict
    and the judge's (with its proxy episode, where its calls are recorded), and their agreement."""
    results.mkdir(parents=True, exist_ok=True)
    lines = []
    for r in records:
        details = (r.score or {}).get("details", {})
        lines.append({
            "task": r.task, "attempt": r.attempt, "episode": r.episode,
            "failure_kind": r.failure_kind, "oracle": r.resolved, "judge": details.get("judge"),
        })  # fmt: skip
    (results / "judgments.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    judged = sum(1 for x in lines if (x["judge"] or {}).get("label") is not None)
    summary = {"agreement": judge_agreement(records), "judged": judged, "attempts": len(lines)}
    path = results / "agreement.json"
    path.write_text(json.dumps(summary, indent=1))
    return path
