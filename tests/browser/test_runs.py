"""`pomona run` on the local browser benchmarks end to end, with a stand-in judge model behind the
recording proxy: one shared run of local tasks (the oracle solves each, the WebVoyager judge
agrees, the official layouts are written and parse, the leaderboard has the row), then
deepshop-local and mind2web-local through the command line with `--judge`.

The shared run plays every fourth task of each site (9 of the 32, every site among them);
POMONA_TEST_BROWSER_ALL=1 plays all 32 (minutes: for a change to the sites or the task files)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from pomona import cli, trajectories
from pomona.benchmarks import leaderboard
from pomona.benchmarks.browser import judges, judgments, suite, tasks
from pomona.run import RunResult, run_benchmark
from tests.browser.conftest import JudgeModel


def images(body: dict[str, Any]) -> int:
    return sum(
        p.get("type") == "image_url"
        for m in body["messages"]
        if isinstance(m["content"], list)
        for p in m["content"]
    )


def text(body: dict[str, Any]) -> str:
    parts = []
    for m in body["messages"]:
        content = m["content"]
        parts += [content] if isinstance(content, str) else [p.get("text", "") for p in content]
    return "\n".join(parts)


def decide(body: dict[str, Any]) -> str:
    """A judge that looks at what reached it: it passes a trajectory only when the evidence its
    procedure needs is there (the answer and screenshots; the actions for WebJudge)."""
    system = body["messages"][0]["content"]
    if system == judges.PROMPTS["webvoyager_system"]:
        answered = "Result Response: \n" not in text(body)
        return "Looks done.\nSUCCESS" if images(body) and answered else "NOT SUCCESS"
    if system == judges.PROMPTS["webjudge_key_points"]:
        return "Key Points:\n1. Find what the task asks for"
    if system == judges.PROMPTS["webjudge_image"]:
        return "The page shows the search result.\nScore: 4"
    acted = "Action History:\n(no actions)" not in text(body)
    return f'Thoughts: checked.\nStatus: "{"success" if acted and images(body) else "failure"}"'


@pytest.fixture(scope="module")
def judge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[JudgeModel, Path]]:
    model = JudgeModel(decide)
    models = tmp_path_factory.mktemp("judge") / "models.yaml"
    entry = {"model_name": "judge", "litellm_params": {"model": "openai/judge", "api_base": model.url, "api_key": "x"}}  # fmt: skip
    models.write_text(yaml.safe_dump({"model_list": [entry]}))
    yield model, models
    model.close()


def played() -> list[str]:
    """The ids the shared run plays (see the module's docstring)."""
    ids = [t.id for t in suite.load("webvoyager-local")]
    if os.environ.get("POMONA_TEST_BROWSER_ALL") == "1":
        return ids
    sites: dict[str, list[str]] = {}
    for task_id in ids:
        sites.setdefault(task_id.split("--")[0], []).append(task_id)
    return [task_id for site in sites.values() for task_id in site[::4]]


PLAYED = played()


@pytest.fixture(scope="module")
def every_task(
    browser_state: str, judge: tuple[JudgeModel, Path], tmp_path_factory: pytest.TempPathFactory
) -> RunResult:
    return run_benchmark(
        "webvoyager-local", None, "oracle", trajectories=tmp_path_factory.mktemp("wv") / "runs",
        concurrency=3, models=str(judge[1]), judge="judge", state_dir=browser_state,
        progress=False, task_ids=PLAYED,
    )  # fmt: skip


@pytest.mark.timeout(900)  # the shared run is this test's set-up
def test_the_oracle_solves_every_local_task(every_task: RunResult) -> None:
    records = every_task.records
    assert sorted(r.task for r in records) == sorted(PLAYED) and len(tasks.records()) >= 30
    failed = [(r.task, r.failure_kind, r.failure_message) for r in records if not r.resolved]
    assert failed == []
    assert {r.harness for r in records} == {"webvoyager"}
    board = leaderboard.leaderboard(every_task.trajectories)
    row = next(s for s in board if s.benchmark == "webvoyager-local")
    played = len(PLAYED)
    assert (row.harness, row.model, row.resolved, row.trials) == (
        "webvoyager",
        "oracle",
        played,
        played,
    )


@pytest.mark.timeout(900)  # the shared run is this test's set-up
def test_the_judge_agrees_with_the_oracle(every_task: RunResult, judge: Any) -> None:
    records = every_task.records
    labels = [r.score["details"]["judge"]["label"] for r in records]
    assert labels == [1] * len(records) and judgments.judge_agreement(records) == 1.0
    results = every_task.trajectories / "browser" / every_task.run_id
    summary = json.loads((results / "agreement.json").read_text())
    assert summary == {"agreement": 1.0, "judged": len(PLAYED), "attempts": len(PLAYED)}
    # the judge's calls went through the proxy, each as an episode of its own beside the agent's
    calls = trajectories.read(every_task.trajectories, "calls").to_pylist()
    judge_episodes = {r.score["details"]["judge"]["episode"] for r in records}
    judged = [c for c in calls if c["episode"] in judge_episodes]
    assert len(judged) == len(PLAYED) and {c["requested_model"] for c in judged} == {"judge"}
    assert {c["episode"] for c in judged}.isdisjoint({r.episode for r in records})
    by_task = {t.id: t.instruction for t in suite.load("webvoyager-local")}
    for r in records:
        sent = text(
            json.loads(
                next(
                    c["request"]
                    for c in calls
                    if c["episode"] == r.score["details"]["judge"]["episode"]
                )
            )
        )
        assert f"TASK: {by_task[r.task]}\nResult Response: {r.final_answer}" in sent


@pytest.mark.timeout(900)  # the shared run is this test's set-up
def test_the_official_layouts(every_task: RunResult) -> None:
    results = every_task.trajectories / "browser" / every_task.run_id
    for r in every_task.records:
        folder = results / "webvoyager" / f"task{r.task}"
        messages = json.loads((folder / "interact_messages.json").read_text())
        assert messages[1]["content"][0]["text"].startswith("Now given a task:")
        assert f"Action: ANSWER; {r.final_answer}" in messages[-1]["content"]
        shots = sorted(folder.glob("screenshot*.png"))
        assert shots and all(p.read_bytes()[:4] == b"\x89PNG" for p in shots)
    row = tasks.mind2web_row(tasks.records()[0])
    result = json.loads((results / "mind2web" / row["task_id"] / "result.json").read_text())
    assert (
        result["schema_version"] == "online-mind2web-v2" and result["task"] == row["confirmed_task"]
    )
    assert result["agent_final_answer"] and all(
        "ANSWER" not in step["action"] for step in result["action_history"][:-1]
    )  # the last step is the answer's, which Online-Mind2Web's run.py drops before judging
    assert result["action_history"][-1]["action"] == f"ANSWER: {result['agent_final_answer']}"
    for step in result["action_history"]:
        assert (results / "mind2web" / row["task_id"] / step["screenshot"]).is_file()


@pytest.mark.parametrize(("benchmark", "task"), [("deepshop-local", "Market--6"), ("mind2web-local", "Dictionary--2")])  # fmt: skip
def test_judged_through_the_command_line(
    benchmark: str, task: str, browser_state: str, judge: tuple[JudgeModel, Path], tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    runs = tmp_path / "runs"
    status = cli.main([
        "run", "--benchmark", benchmark, "--tasks", task, "--judge", "judge", "--models",
        str(judge[1]), "--trajectories", str(runs), "--state-dir", browser_state,
    ])  # fmt: skip
    out = capsys.readouterr().out
    assert status == 0, out
    assert "judge-oracle agreement: 1.0" in out
    [line] = (runs / "browser").glob("*/judgments.jsonl")
    [verdict] = [json.loads(x) for x in line.read_text().splitlines()]
    assert verdict["oracle"] is True and verdict["judge"]["label"] == 1
    if benchmark == "deepshop-local":
        assert verdict["judge"]["judge"] == "deepshop" and set(verdict["judge"]["parts"]) == {
            p for p in judges.DEEPSHOP_PARTS
            if next(t for t in suite.load(benchmark) if t.id == task).metadata["deepshop"][p] != "None"
        }  # fmt: skip
    else:
        assert verdict["judge"]["judge"] == "webjudge" and verdict["judge"]["key_points"]
        assert [s["Score"] for s in verdict["judge"]["image_judge_record"]] == [4, 4]
    rows = trajectories.read(runs, "episodes").to_pylist()
    assert [(r["benchmark"], r["task"], r["resolved"]) for r in rows if r["harness"] == "webvoyager"] == [
        (benchmark, task, True)
    ]  # fmt: skip
