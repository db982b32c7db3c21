"""The official WebVoyager benchmark from the user's checkout (../shared/benchmarks/webvoyager):
its 643 tasks and reference answers as they are, the agent's system prompt from prompts.py, and
its judge run from evaluation/auto_eval.py over the checkout's own recorded trajectories
(results/examples/, real screenshots), with a scripted judge model: the judge gets exactly the
messages the official script sends it, and its verdicts are parsed as the official script
parses them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pomona.benchmarks.browser import official
from tests.browser.conftest import JudgeModel

ROOT = Path(__file__).resolve().parents[2]  # the repo; the user's checkouts are in ../shared
CHECKOUT = next(
    (p / "shared" / "benchmarks" / "webvoyager" for p in (ROOT.parent, ROOT.parent.parent)
     if (p / "shared" / "benchmarks" / "webvoyager").is_dir()),
    ROOT.parent / "shared" / "benchmarks" / "webvoyager",
)  # fmt: skip
EXAMPLES = CHECKOUT / "results" / "examples"

pytestmark = pytest.mark.skipif(
    not (CHECKOUT / "evaluation" / "auto_eval.py").exists(),
    reason=f"no WebVoyager checkout at {CHECKOUT} (the official benchmark is read from there)",
)


def verdict(body: dict[str, Any]) -> str:
    """A scripted judge: its verdict depends on the task, so each answer is told apart."""
    task = body["messages"][1]["content"][0]["text"]
    return "Done as asked.\nSUCCESS" if "Amazon" in task or len(task) % 2 else "NOT SUCCESS"


def test_tasks_and_answers_are_loaded_as_they_are() -> None:
    tasks = official.webvoyager_tasks(CHECKOUT)
    rows = [json.loads(x) for x in (CHECKOUT / "data" / "WebVoyager_data.jsonl").read_text().splitlines() if x.strip()]  # fmt: skip
    assert len(tasks) == len(rows) == 643
    assert [t.metadata["webvoyager"] for t in tasks] == rows
    assert all(t.metadata["reference_answer"] is not None for t in tasks)
    first = tasks[0]
    assert first.instruction == rows[0]["ques"] and first.metadata["web"] == rows[0]["web"]
    assert first.metadata["reference_answer"]["type"] in ("golden", "possible")
    prompt = official.WebVoyagerCheckout(CHECKOUT).system_prompt()
    assert prompt.startswith("Imagine you are a robot browsing the web")
    assert official.WebVoyagerCheckout(CHECKOUT).judge_images() == 15  # from run_eval.sh


def test_the_judge_gets_exactly_the_official_messages(tmp_path: Path) -> None:
    theirs, ours = JudgeModel(verdict), JudgeModel(verdict)
    try:
        # the official script, as run_eval.sh runs it, over its own examples
        env = {**os.environ, "OPENAI_BASE_URL": theirs.url, "OPENAI_API_KEY": "x"}
        run = subprocess.run(
            [sys.executable, "auto_eval.py", "--process_dir", str(EXAMPLES), "--api_key", "x",
             "--api_model", "judge", "--max_attached_imgs", "15"],
            cwd=CHECKOUT / "evaluation", env=env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert run.returncode == 0, run.stderr[-2000:]
        official_labels = [
            int(line.split(":")[1]) for line in run.stdout.splitlines() if line.startswith("Auto_eval_res:")
        ]  # fmt: skip
        # Pomona's judge path over the same trajectories, in the official script's order
        client = official.JudgeClient(ours.url, "x")
        labels = []
        for folder in sorted(EXAMPLES.iterdir(), key=_official_order):
            labels.append(
                official.judge_webvoyager_layout(CHECKOUT, folder, client, "judge")["label"]
            )
        assert len(theirs.requests) == len(ours.requests) == len(list(EXAMPLES.iterdir())) == 15
        for sent, official_sent in zip(ours.requests, theirs.requests, strict=True):
            assert sent == official_sent  # messages, screenshots and parameters, byte for byte
        assert labels == official_labels and set(labels) == {0, 1}
        assert sum(
            p.get("type") == "image_url" for p in ours.requests[0]["messages"][1]["content"]
        ) == min(15, len(list((EXAMPLES / "taskAllrecipes--4").glob("*.png"))))
    finally:
        theirs.close()
        ours.close()


def _official_order(folder: Path) -> tuple[int, int]:
    """auto_eval.py's order: its list of sites, then the task number."""
    webs = ["Allrecipes", "Amazon", "Apple", "ArXiv", "BBC News", "Booking", "Cambridge Dictionary",
            "Coursera", "ESPN", "GitHub", "Google Flights", "Google Map", "Google Search",
            "Huggingface", "Wolfram Alpha"]  # fmt: skip
    web, number = folder.name.removeprefix("task").rsplit("--", 1)
    return webs.index(web), int(number)


def test_a_task_the_live_web_cannot_reach_is_a_typed_failure_not_a_zero(
    tmp_path: Path, browser_state: str
) -> None:
    from pomona.run import run_benchmark

    result = run_benchmark(
        f"webvoyager:{CHECKOUT}", None, "oracle", trajectories=tmp_path / "runs",
        task_ids=["Allrecipes--0"], state_dir=browser_state, progress=False, concurrency=1,
    )  # fmt: skip
    [record] = result.records
    if "reference actions" in (record.failure_message or ""):
        pytest.skip("this machine reaches the live web (the oracle has no actions for it)")
    assert record.failure_kind == "sandbox" and "start page" in (record.failure_message or "")
    assert record.reward is None and record.resolved is None  # not scored, never a 0
    assert record.benchmark == "webvoyager:webvoyager" and record.harness == "webvoyager"
