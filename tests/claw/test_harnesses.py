"""The same official task through real harnesses: Claude Code reaches the task's tools over MCP
and scores what Claw-Eval's own loop scores, the official grader agreeing on the recorded
conversation (OpenClaw's MCP path is test_mcp.py's); QwenClawBench's natural harness, OpenClaw,
is graded from its own session transcript. (The whole cross-harness matrix is
perf/claw_matrix.py; this is its slice.)"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from pomona.episodes.rollouts import rollout
from tests.claw import official
from tests.claw.conftest import solved
from tests.claw.test_fidelity import _artifact, _judge_url

pytestmark = pytest.mark.timeout(1800)
CLAW_TASK = "T003zh_calendar_scheduling"
QWEN_TASK = "task_00094_exam_monitor_system_audit_cron_sync_bug_rate_limit_gap_and_site"


@pytest.fixture(scope="module")
def state(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("claw-harnesses"))
    yield path
    from pomona.orchestrator.runtimes.local import LocalRuntime
    from pomona.orchestrator.sdk.shared import close_shared

    close_shared(path)
    LocalRuntime(path).unmount_store()


def _play(tasks: list[Any], harness: str, proxy: Any, state: str) -> Any:
    [record] = asyncio.run(
        rollout(
            tasks,
            harness,
            "oracle",
            n=1,
            concurrency=1,
            proxy=proxy,
            runtime="local",
            state_dir=state,
            timeout=900,
            progress=False,
        )
    )
    return record


@pytest.mark.parametrize("harness", ["claude-code"])
def test_a_real_harness_scores_what_claw_evals_loop_scores(
    harness, need, proxy, state, claw_eval_checkout
):
    need(harness)
    record = _play(solved("claw-eval", [CLAW_TASK]), harness, proxy, state)
    assert (record.failure_kind, record.failure_message, record.reward) == ("none", None, 1.0)
    trace = _artifact(record, "trace.jsonl").read_text().splitlines()
    uses = [
        b["name"]
        for e in map(json.loads, trace)
        if e["type"] == "message"
        for b in e["message"]["content"]
        if b["type"] == "tool_use"
    ]
    assert "calendar_create_event" in uses  # the harness's MCP name, undone
    job = {
        "task_dir": str(claw_eval_checkout / "tasks" / CLAW_TASK),
        "trace": str(_artifact(record, "trace.jsonl")),
        "snapshot": str(_artifact(record, "env_snapshot.json")),
        "judge_url": _judge_url(proxy, "claw-eval"),
    }
    [theirs] = official.run("claw-eval", claw_eval_checkout, [job])
    assert theirs["task_score"] == record.reward


def test_openclaw_is_graded_from_its_own_transcript(need, proxy, state, qwen_checkout):
    need("openclaw")
    record = _play(solved("qwenclawbench", [QWEN_TASK]), "openclaw", proxy, state)
    assert (record.failure_kind, record.reward) == ("none", 1.0), record.failure_message
    events = json.loads(Path(_artifact(record, "transcript.json")).read_text())
    assert events[0]["type"] == "session"  # OpenClaw's session events, as it wrote them
    assert any(
        c.get("type") == "toolCall"
        for e in events
        if e.get("type") == "message"
        for c in e["message"].get("content") or []
        if isinstance(c, dict)
    )
