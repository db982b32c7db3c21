"""Offline proof of fidelity. Official tasks ship no oracle, so tests/claw/solutions/ holds
scripted solutions (tool calls, shell commands, final words) for 33 Claw-Eval tasks over every
offline service and 10 QwenClawBench tasks. The suite plays 7 of them (4 Claw-Eval tasks: the
calendar's services, the disambiguating and the judged ones, a restocking chain; QwenClawBench's
judged, partial and hybrid cases); POMONA_CLAW_FIDELITY=all plays all 43 (the figure in
docs/claw.md: each of Claw-Eval's 13 offline services is played there). Each is played
once, for real, by the scripted model: the Claw-Eval ones through Claw-Eval's own loop (the
`claw-eval` harness), the QwenClawBench ones through Claude Code. Then, on the conversation each
episode recorded:

- the solution scores what it should (it solves the task; QwenClawBench's task_00036 cannot
  reach 1.0 with an OpenClaw-format transcript: one of its checks reads `tool_use` blocks);
- Pomona's score equals the score the benchmark's own code gives the same evidence when run
  directly from the checkout, as its users run it (tests/claw/official.py), per dimension;
- the judge (the scripted stand-in, so marked) is the official one, its episodes recorded and
  labelled with its model, and the run's benchmark name says `judge: scripted`.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import tarfile
from pathlib import Path
from typing import Any

import pytest

from pomona import trajectories
from pomona.benchmarks.claw import scoring
from pomona.benchmarks.claw.judge import JudgeSpec, open_judge
from pomona.episodes.rollouts import rollout
from tests.claw import official
from tests.claw.conftest import solutions, solved

# up to 43 episodes, four at a time: minutes, not the default 300 s per test
pytestmark = pytest.mark.timeout(3600)
QWEN_HARNESS = "claude-code"
SAMPLE = {
    "claw-eval": [
        "T003zh_calendar_scheduling", "T025zh_ambiguous_contact_email",
        "T087_pinbench_market_news_brief", "T137zh_restock_chain_check",
    ],
    "qwenclawbench": [
        "task_00030_openclaw_gateway_crash_root_cause_analysis_and_recovery_plan",
        "task_00036_find_largest_file_in_downloads_directory",
        "task_00094_exam_monitor_system_audit_cron_sync_bug_rate_limit_gap_and_site",
    ],
}  # fmt: skip


def _chosen(kind: str) -> list[str] | None:
    return None if os.environ.get("POMONA_CLAW_FIDELITY") == "all" else SAMPLE[kind]


def _artifact(record: Any, name: str) -> Path:
    uri = next(a["uri"] for a in record.artifacts if a["name"] == f"grading/{name}")
    return Path(uri.removeprefix("file://"))


@pytest.fixture(scope="module")
def state(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("claw-fidelity"))
    yield path
    from pomona.orchestrator.runtimes.local import LocalRuntime
    from pomona.orchestrator.sdk.shared import close_shared

    close_shared(path)
    LocalRuntime(path).unmount_store()


def _play(tasks: list[Any], harness: str, proxy: Any, state: str) -> dict[str, Any]:
    records = asyncio.run(
        rollout(
            tasks,
            harness,
            "oracle",
            n=1,
            concurrency=4,
            proxy=proxy,
            runtime="local",
            state_dir=state,
            timeout=900,
            progress=False,
        )
    )
    return {r.task.split("/", 1)[1]: r for r in records}


@pytest.fixture(scope="module")
def played(need, proxy, state, claw_eval_checkout, qwen_checkout):
    """The chosen solutions, each played once: {kind: {task: EpisodeRecord}}."""
    need(QWEN_HARNESS)
    return {
        "claw-eval": _play(solved("claw-eval", _chosen("claw-eval")), "claw-eval", proxy, state),
        "qwenclawbench": _play(
            solved("qwenclawbench", _chosen("qwenclawbench")), QWEN_HARNESS, proxy, state
        ),
    }


@pytest.mark.parametrize("kind", ["claw-eval", "qwenclawbench"])
def test_every_solution_scores_what_it_should(kind, played):
    known = solutions(kind)
    expected = {task: known[task].get("expect", 1.0) for task in _chosen(kind) or known}
    got = {t: (r.failure_kind, r.failure_message, r.reward) for t, r in played[kind].items()}
    assert got == {t: ("none", None, pytest.approx(v)) for t, v in expected.items()}
    if kind == "claw-eval":  # the solutions (all played with POMONA_CLAW_FIDELITY=all) cover
        tasks = solved(kind)  # every service that runs offline, but the web
        services = {s["name"] for t in tasks for s in t.raw.get("services") or []}
        assert len(services) >= 13, services


def _judge_url(proxy: Any, kind: str) -> str:
    episode = open_judge(proxy, JudgeSpec(), kind, of="official-regrade", task="official")
    return f"{proxy.url}/e/{episode['key']}/v1"


def test_claw_eval_scores_equal_the_official_graders(played, proxy, claw_eval_checkout, tmp_path):
    records = played["claw-eval"]
    jobs = [
        {
            "task_dir": str(claw_eval_checkout / "tasks" / task),
            "trace": str(_artifact(r, "trace.jsonl")),
            "snapshot": str(_artifact(r, "env_snapshot.json")),
            "judge_url": _judge_url(proxy, "claw-eval"),
        }
        for task, r in records.items()
    ]
    theirs = official.run("claw-eval", claw_eval_checkout, jobs)
    for (task, r), answer in zip(records.items(), theirs, strict=True):
        mine = r.score["details"]
        dims = ("completion", "robustness", "communication", "safety")
        assert (r.reward, r.resolved) == (answer["task_score"], answer["passed"]), task
        assert {k: mine["scores"][k] for k in dims} == {k: answer["scores"][k] for k in dims}, task
        saved = json.loads(_artifact(r, "trace.jsonl").read_text().splitlines()[-1])
        assert saved["type"] == "grading_result" and saved["task_score"] == r.reward, task


def test_qwenclawbench_scores_equal_the_official_grading(played, proxy, qwen_checkout, tmp_path):
    records = played["qwenclawbench"]
    dataset = qwen_checkout / "data" / "qwenclawbench-v1.1-100"
    jobs = []
    for task, r in records.items():
        work = tmp_path / task
        with tarfile.open(fileobj=io.BytesIO(_artifact(r, "workspace.tar").read_bytes())) as tar:
            tar.extractall(work, filter="data")
        jobs.append(
            {
                "task_file": str(dataset / "tasks" / f"{task}.md"),
                "transcript": str(_artifact(r, "transcript.json")),
                "workspace": str(work),
                "judge_url": _judge_url(proxy, "qwenclawbench"),
            }
        )
    theirs = official.run("qwenclawbench", qwen_checkout, jobs)
    for (task, r), answer in zip(records.items(), theirs, strict=True):
        mine = r.score["details"]
        assert r.reward == answer["score"], task
        assert (mine["breakdown"], mine["score_simple"]) == (
            answer["breakdown"],
            answer["score_simple"],
        ), task


def test_the_judge_is_the_official_one_recorded_and_labelled(played, proxy):
    rows = trajectories.read(proxy.trajectories, "episodes").to_pylist()
    agents = {r["episode"]: r for r in rows if not json.loads(r["metadata"] or "{}").get("role")}
    judges = [r for r in rows if json.loads(r["metadata"] or "{}").get("role") == "judge"]
    record = played["claw-eval"]["T003zh_calendar_scheduling"]
    mine = [j for j in judges if json.loads(j["metadata"])["of"] == record.episode]
    assert [j["model"] for j in mine] == ["scripted"]  # its model, not the agent's
    calls = [json.loads(line) for line in _artifact(record, "judge.jsonl").read_text().splitlines()]
    assert calls and calls[0]["messages"][0]["content"].startswith(
        "You are an evaluation judge for an AI assistant."  # Claw-Eval's own prompt
    )
    assert json.loads(calls[0]["reply"]) == {"score": 1.0, "reasoning": "scripted judge"}
    qwen = played["qwenclawbench"][
        "task_00030_openclaw_gateway_crash_root_cause_analysis_and_recovery_plan"
    ]
    prompt = json.loads(_artifact(qwen, "judge.jsonl").read_text().splitlines()[0])["messages"]
    assert prompt[0]["content"].startswith("You are a grading function.")  # QwenClawBench's
    assert agents[record.episode]["benchmark"].endswith("[judge: scripted]")


def test_the_official_score_summary_agrees_on_the_run(played, claw_eval_checkout, tmp_path):
    rows = [
        {
            "task": r.task,
            "reward": r.reward,
            "failure_kind": r.failure_kind,
            "artifacts": r.artifacts,
        }
        for r in played["claw-eval"].values()
    ]
    [theirs] = scoring.official_claw_eval_summary(
        claw_eval_checkout, scoring.export_claw_eval_traces(rows, tmp_path)
    )
    mine = scoring.claw_eval_report(rows)
    for key in ("n_tasks", "overall_avg_score", "n_avg_pass", "n_any_pass", "n_all_pass"):
        assert mine[key] == pytest.approx(theirs[key]), key
    assert {t: v["scores"] for t, v in mine["tasks"].items()} == {
        t: v["scores"] for t, v in theirs["tasks"].items()
    }
