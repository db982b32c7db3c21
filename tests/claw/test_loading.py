"""Every official task loads or says why: the two checkouts as users clone them (300 Claw-Eval
tasks, 100 QwenClawBench tasks), each task runnable here or unavailable with its reason (the live
web, a fixture missing from the checkout, a program its env snapshot runs), read as the
benchmarks' own loaders read them; `--tasks` filters before anything is read; bad paths and
broken task files are said in words. No sandbox runs here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from pomona.benchmarks.claw import claw_eval, conversation, load, qwenclawbench
from pomona.benchmarks.claw.checkout import CheckoutError

OFFICIAL_CLAW_EVAL = """
import json, sys
from pathlib import Path
from claw_eval.models.task import TaskDefinition
root = Path(sys.argv[1])
out = {}
for f in sorted(root.glob("tasks/*/task.yaml")):
    t = TaskDefinition.from_yaml(f)
    out[f.parent.name] = {"id": t.task_id, "prompt": t.prompt.text,
                          "services": [s.name for s in t.services], "tools": [x.name for x in t.tools]}
print(json.dumps(out))
"""
OFFICIAL_QWEN = """
import json, sys
from pathlib import Path
from lib_tasks import TaskLoader
tasks = TaskLoader(Path(sys.argv[1])).load_all_tasks()
print(json.dumps({t.task_id: {"prompt": t.prompt, "files": sorted(
    f.get("dest") or f.get("path") for f in t.workspace_files)} for t in tasks}))
"""


def _official(code: str, path: Path, lib: Path, arg: Path) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", code, str(arg)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(lib)},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def test_every_official_claw_eval_task_loads_or_says_why(claw_eval_checkout):
    tasks = load("claw-eval", str(claw_eval_checkout))
    assert len(tasks) == 300
    why = {t.id.split("/")[1]: t.metadata["unavailable"] for t in tasks}
    kinds = Counter((w or "runs").split(":")[0] for w in why.values())
    assert kinds["runs"] >= 140, kinds  # every task with what it needs here
    web = [t for t in tasks if {s["name"] for s in t.raw.get("services") or []} & {"web_real"}]
    assert web and all("needs the internet" in t.metadata["unavailable"] for t in web)
    assert "fixtures/video.webm" in why["M015_video_subtitle_ocr_english"]
    assert "Playwright" in why["M001_clock"]  # its env snapshot records the page in a browser
    assert why["T003zh_calendar_scheduling"] is None


def test_every_qwenclawbench_task_loads_or_says_why(qwen_checkout):
    tasks = load("qwenclawbench", str(qwen_checkout))
    assert len(tasks) == 100
    gone = {t.id: t.metadata["unavailable"] for t in tasks if t.metadata["unavailable"]}
    assert gone == {
        "qwenclawbench/task_00001_moltbook_social_media_explorer_skill": (
            "needs the internet (external_dependency: web)"
        ),
        "qwenclawbench/task_00005_daily_briefing_scheduler_skill_creation_and_recovery": (
            "needs the Feishu API (external_dependency: feishu)"
        ),
    }
    binary = next(t for t in tasks if any(not _text(v) for v in t.files.values()))
    assert binary.files  # a binary asset is carried as its bytes
    inline = [t for t in tasks if any(f.get("content") for f in t.meta["workspace_files"])]
    assert inline and all(t.metadata["unavailable"] is None for t in inline)


def _text(data: bytes) -> bool:
    try:
        data.decode()
    except UnicodeDecodeError:
        return False
    return True


def test_pomona_reads_the_task_files_as_the_official_loaders_do(claw_eval_checkout, qwen_checkout):
    ours = {t.task_dir.name: t for t in load("claw-eval", str(claw_eval_checkout))}
    theirs = _official(
        OFFICIAL_CLAW_EVAL, claw_eval_checkout, claw_eval_checkout / "src", claw_eval_checkout
    )
    assert set(ours) == set(theirs)
    for name, t in theirs.items():
        mine = ours[name]
        assert (mine.raw["task_id"], mine.instruction) == (t["id"], t["prompt"]), name
        assert [s["name"] for s in mine.raw.get("services") or []] == t["services"], name
        assert sorted(mine.tool_names) == sorted(t["tools"]), name
    qwen = {t.meta["id"]: t for t in load("qwenclawbench", str(qwen_checkout))}
    dataset = qwen_checkout / "data" / "qwenclawbench-v1.1-100"
    theirs = _official(OFFICIAL_QWEN, qwen_checkout, qwen_checkout / "scripts", dataset / "tasks")
    assert set(qwen) == set(theirs)
    for task_id, t in theirs.items():
        assert qwen[task_id].instruction == t["prompt"], task_id
        assert sorted(qwen[task_id].files) == t["files"], task_id


def test_tasks_are_filtered_before_they_are_read(claw_eval_checkout, monkeypatch):
    read = []
    real = claw_eval.read_task
    monkeypatch.setattr(claw_eval, "read_task", lambda d: read.append(d.name) or real(d))
    tasks = load(
        "claw-eval",
        str(claw_eval_checkout),
        only=["claw-eval/T086_pinbench_calendar_event_creation"],
    )
    assert [t.id for t in tasks] == ["claw-eval/T086_pinbench_calendar_event_creation"]
    assert read == ["T086_pinbench_calendar_event_creation"]


def test_a_broken_task_is_unavailable_and_the_others_load(claw_eval_checkout, tmp_path):
    for part in ("mock_services", "src"):
        (tmp_path / part).symlink_to(claw_eval_checkout / part)
    (tmp_path / "tasks").mkdir()
    name = "T086_pinbench_calendar_event_creation"
    (tmp_path / "tasks" / name).symlink_to(claw_eval_checkout / "tasks" / name)
    (tmp_path / "tasks" / "broken").mkdir()
    (tmp_path / "tasks" / "broken" / "task.yaml").write_text("task_id: [unclosed\n")
    tasks = {t.id: t.metadata["unavailable"] for t in load("claw-eval", str(tmp_path))}
    assert tasks["claw-eval/T086_pinbench_calendar_event_creation"] is None
    assert tasks["claw-eval/broken"].startswith("unreadable: ")


def test_a_path_that_is_not_a_checkout_is_refused_in_words(tmp_path):
    with pytest.raises(CheckoutError, match=r"not a Claw-Eval checkout \(no tasks, mock_services"):
        load("claw-eval", str(tmp_path))
    with pytest.raises(CheckoutError, match="not a QwenClawBench checkout"):
        load("qwenclawbench", str(tmp_path))


def test_the_local_sets_say_what_framework_they_need(monkeypatch):
    monkeypatch.delenv("POMONA_CLAW_EVAL", raising=False)
    monkeypatch.delenv("POMONA_QWENCLAWBENCH", raising=False)
    local = load("claw-eval") + load("qwenclawbench")
    assert local and all(
        "POMONA_CLAW_EVAL=PATH" in t.metadata["unavailable"]
        or "POMONA_QWENCLAWBENCH=PATH" in t.metadata["unavailable"]
        for t in local
    )


def test_runs_are_labelled_with_their_judge(claw_eval_checkout, monkeypatch):
    only = ["T086_pinbench_calendar_event_creation"]
    [scripted] = load("claw-eval", str(claw_eval_checkout), only=only)
    monkeypatch.setenv("POMONA_JUDGE_MODEL", "gpt-judge")
    [real] = load("claw-eval", str(claw_eval_checkout), only=only)
    assert scripted.benchmark.endswith("[judge: scripted]")
    assert real.benchmark.endswith("[judge: gpt-judge]") and real.id == scripted.id


def test_run_help_names_the_path_forms(capsys):
    from pomona.cli import main

    with pytest.raises(SystemExit):
        main(["run", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "claw-eval:PATH (a Claw-Eval checkout:" in out
    assert "qwenclawbench:PATH (a QwenClawBench checkout:" in out


def test_a_harness_conversation_becomes_claw_evals_messages():
    """What the agent did, as Claw-Eval's loop would have logged it: the task's prompt first,
    MCP names undone (OpenClaw's Tool Search gateway too), each turn's results in one user
    message, the simulated user's answers as its `[user_agent]` turns."""
    talk = [
        {"role": "user", "content": "<system-reminder>x</system-reminder> book it"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "a", "name": "mcp__claw__calendar_list_events", "arguments": {"d": 1}},
                {
                    "id": "b",
                    "name": "tool_call",
                    "arguments": {"id": "claw__todo_list", "args": {}},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "a", "content": "[]"},
        {"role": "tool", "tool_call_id": "b", "content": "{}"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "c", "name": "claw__ask_user", "arguments": {"question": "When?"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c", "content": "Tuesday"},
        {"role": "assistant", "content": "Booked for Tuesday."},
    ]
    out = conversation.claw_eval_messages(talk, "book it", {"calendar_list_events", "todo_list"})
    assert out[0] == {"role": "user", "content": [{"type": "text", "text": "book it"}]}
    assert [b["name"] for b in out[1]["content"]] == ["calendar_list_events", "todo_list"]
    assert [b["tool_use_id"] for b in out[2]["content"]] == ["a", "b"]
    assert out[3] == {"role": "assistant", "content": [{"type": "text", "text": "When?"}]}
    assert out[4]["content"][0]["text"] == "[user_agent]\nTuesday"
    assert out[5]["content"][0]["text"] == "Booked for Tuesday."


def test_openclaw_events_are_rebuilt_for_other_harnesses():
    talk = [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "x", "name": "Bash", "arguments": {"command": "ls"}}],
        },
        {"role": "tool", "tool_call_id": "x", "content": "a.txt"},
    ]
    events = conversation.openclaw_transcript(talk)
    assert events[0]["message"] == {"role": "user", "content": "go"}  # OpenClaw's own shape
    assert events[1]["message"]["content"][0]["type"] == "toolCall"
    assert events[2]["message"]["role"] == "toolResult"


def test_qwenclawbench_workspace_files_cannot_leave_the_workspace(tmp_path):
    meta = {"id": "t", "workspace_files": [{"content": "x", "path": "../escape"}]}
    with pytest.raises(ValueError, match="leaves the workspace"):
        qwenclawbench.workspace(meta, tmp_path)
