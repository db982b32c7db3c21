"""Every local task of both benchmarks end to end: the oracle (the scripted model replaying the
task's steps, MCP tool calls included) through OpenClaw, Claude Code and Claw-Eval's own loop
passes; each negative fails; a safety violation zeroes the score; the multi-turn task's user is
a model behind the proxy; a killed service is an infrastructure failure, never a 0."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from typing import Any

import pytest

from pomona.benchmarks import metrics
from pomona.benchmarks.claw import claw_eval, qwenclawbench, runtime
from pomona.episodes import run_episode
from pomona.episodes.rollouts import rollout
from pomona.proxy.control import calls_of, proxy_control

# 64 harness episodes, three at a time: minutes, not the default 300 s per test
pytestmark = pytest.mark.timeout(2400)

ORACLE_HARNESSES = ["openclaw", "claude-code", "claw-eval"]
NEGATIVE_HARNESS = "claude-code"


def _tasks() -> list[Any]:
    return [*claw_eval.tasks(), *qwenclawbench.tasks()]


def _negatives() -> list[Any]:
    return [dataclasses.replace(t, solution=t.metadata["negative"]) for t in _tasks()]


@pytest.fixture(scope="module")
def state(tmp_path_factory):
    """The rollouts' sandbox state; their shared client is closed and its store unmounted after."""
    path = str(tmp_path_factory.mktemp("claw-rollouts"))
    yield path
    from pomona.orchestrator.runtimes.local import LocalRuntime
    from pomona.orchestrator.sdk.shared import _close_all

    _close_all()
    LocalRuntime(path).unmount_store()


def _roll(tasks, harness, proxy, state):
    records = asyncio.run(
        rollout(
            tasks,
            harness,
            "oracle",
            n=1,
            concurrency=3,
            proxy=proxy,
            runtime="local",
            state_dir=state,
            timeout=600,
            progress=False,
        )
    )
    return {r.task: r for r in records}


@pytest.fixture(scope="module")
def oracle_run(need, proxy, state):
    """harness -> its oracle records, each rollout run once per module and only when asked."""
    runs: dict[str, dict[str, Any]] = {}

    def get(harness: str) -> dict[str, Any]:
        if harness not in runs:
            need(harness)
            runs[harness] = _roll(_tasks(), harness, proxy, state)
        return runs[harness]

    return get


@pytest.mark.parametrize("harness", ORACLE_HARNESSES)
def test_the_oracle_passes_every_local_task(harness, oracle_run):
    records = oracle_run(harness)
    assert len(records) == 16
    failed = {
        t: (
            r.failure_kind,
            r.failure_message,
            r.reward,
            (r.score or {}).get("details", {}).get("scores"),
        )
        for t, r in records.items()
        if not (r.failure_kind == "none" and r.resolved)
    }
    assert not failed


def test_every_negative_fails_and_safety_violations_score_zero(need, proxy, state):
    need(NEGATIVE_HARNESS)
    records = _roll(_negatives(), NEGATIVE_HARNESS, proxy, state)
    assert len(records) == 16
    for task, r in records.items():
        assert r.failure_kind == "none", (task, r.failure_message)  # it ran, and was scored...
        assert r.resolved is False and r.reward < 1.0, task  # ...as a failure
    for unsafe in (
        "mail_confirm_budget_review",
        "mail_phishing_triage",
        "todo_mark_done",
        "finance_rent_transfer",
    ):
        r = records[f"claw-eval/{unsafe}"]
        assert r.score["details"]["scores"]["safety"] == 0.0 and r.reward == 0.0, unsafe


def test_the_judge_and_the_simulated_user_are_models_behind_the_proxy(oracle_run, proxy):
    link = proxy_control(proxy)
    judged = oracle_run("openclaw")["claw-eval/mail_confirm_budget_review"]
    details = judged.score["details"]
    assert details["judge"] == "scripted (fixed verdict 1.0)" and details["judge_calls"]
    assert json.loads(details["judge_calls"][0]["reply"])["score"] == 1.0
    dentist = oracle_run("openclaw")["claw-eval/calendar_dentist_ask_first"]
    created = dentist.score["details"]["audit"]["calendar"]["created_events"]
    assert [e["start"] for e in created] == ["2026-12-09T10:00"]  # the slot the user named
    from pomona import trajectories

    episodes = trajectories.read(link.trajectories, "calls").to_pylist()
    persona = [c for c in episodes if "Next week only Wednesday" in (c.get("request") or "")]
    assert persona, "the simulated user's calls were recorded"
    assert all(c["episode"] != dentist.episode for c in persona)  # in an episode of its own
    assert calls_of(link, dentist.episode)
    # the judge's episodes are recorded, and are nobody's attempt on a leaderboard
    rows = trajectories.read(link.trajectories, "episodes").to_pylist()
    helpers = [r for r in rows if json.loads(r["metadata"] or "{}").get("role")]
    assert "judge" in {json.loads(r["metadata"])["role"] for r in helpers}
    counted = sum(s.trials + s.infra_failures for s in metrics.summarize(rows))
    assert counted == len(rows) - len(helpers)


class ServiceKilled(claw_eval.ClawEvalTask):
    """The task with its services killed right after they start (a crashed mock service)."""

    def prepare(self, sandbox: Any) -> None:
        super().prepare(sandbox)
        kill = sandbox.exec(f"kill -9 $(cat {runtime.HOME}/services.pid)", user="root", timeout=30)
        assert kill.exit_code == 0, kill.stderr


def test_a_killed_service_is_an_infra_failure_not_a_zero(need, proxy, client):
    need("claude-code")
    base = next(t for t in claw_eval.tasks() if t.id.endswith("notes_offsite_lookup"))
    task = ServiceKilled(**{f.name: getattr(base, f.name) for f in dataclasses.fields(base)})
    record = run_episode(task, "claude-code", "oracle", proxy=proxy, client=client, timeout=300)
    assert record.failure_kind == "verifier" and record.reward is None
    assert "down at grading time" in record.failure_message
