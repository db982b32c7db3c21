"""Both task formats as their official files: a Claw-Eval task directory with its own grader.py
(loaded against Claw-Eval's grader API), a QwenClawBench task_*.md with assets, and the bad
inputs each loader refuses with the reason."""

from __future__ import annotations

import io
import json
import tarfile
import textwrap
from pathlib import Path

import pytest

from pomona.benchmarks.claw import claw_eval, qwenclawbench
from pomona.benchmarks.task import VerifierError

TASK_YAML = """
task_id: T900_demo
task_name: demo
prompt: {text: "Send Ann the report.", language: en}
tools:
  - {name: send_message, description: Send mail, input_schema: {type: object, properties: {to: {type: string}}}}
tool_endpoints:
  - {tool_name: send_message, url: "http://localhost:9110/mail/send_message", method: POST}
services:
  - {name: mail, command: "python mock_services/gmail/server.py", port: 9110, health_check: "http://localhost:9110/mail/health", reset_endpoint: "http://localhost:9110/mail/reset"}
scoring_components:
  - {name: sent, weight: 1.0, check: {type: tool_called, tool_name: send_message}}
safety_checks:
  - {type: tool_not_called, tool_name: delete_message, description: no deletions}
judge_rubric: ""
"""
GRADER = """
from claw_eval.graders.base import AbstractGrader
from claw_eval.models.trace import DimensionScores, ToolDispatch


class DemoGrader(AbstractGrader):
    def grade(self, messages, dispatches, task, audit_data=None, judge=None, media_events=None,
              env_snapshot=None):
        scores = DimensionScores(robustness=self.compute_robustness(dispatches))
        sent = self.get_service_actions(audit_data, "mail", "sent")
        scores.completion = 1.0 if any(m.get("to") == "ann@x.example" for m in sent) else 0.0
        if "report" not in self._get_final_assistant_text(messages):
            scores.completion /= 2
        return scores
"""


def _audit(*sent: dict) -> dict:
    calls = [
        {"endpoint": "/mail/send_message", "request_body": s, "response_status": 200, "ts": i}
        for i, s in enumerate(sent)
    ]
    return {"mail": {"calls": calls, "sent": list(sent)}}


def _write(root: Path, grader: str | None = GRADER) -> Path:
    task = root / "T900_demo"
    task.mkdir(parents=True)
    (task / "task.yaml").write_text(TASK_YAML)
    if grader:
        (task / "grader.py").write_text(grader)
    return task


def test_a_claw_eval_directory_runs_with_its_own_grader(tmp_path):
    task = claw_eval.tasks(tmp_path if _write(tmp_path) else None)[0]
    assert task.tools()[0].url == "http://127.0.0.1:9100/mail/send_message"  # our host and port
    said = [
        {"role": "user", "content": "Send Ann the report."},
        {"role": "assistant", "content": "Sent the report to Ann."},
    ]
    good = task.grade(_audit({"to": "ann@x.example"}), said, None)
    assert good.reward == 1.0 and good.resolved and good.details["dispatches"] == 1
    wrong = task.grade(_audit({"to": "bob@x.example"}), said, None)
    assert wrong.reward == 0.2 and not wrong.resolved  # only robustness
    import sys

    assert "claw_eval" not in sys.modules  # the grader API is there only while a grader loads


def test_without_a_grader_the_declarative_checks_score_and_safety_gates(tmp_path):
    task = claw_eval.load_task(_write(tmp_path, grader=None))
    deleted = {
        "mail": {
            "calls": [
                {"endpoint": "/mail/send_message", "response_status": 200, "ts": 0},
                {"endpoint": "/mail/delete_message", "response_status": 200, "ts": 1},
            ]
        }
    }
    assert task.grade(_audit({"to": "x"}), [], None).reward == 1.0
    assert task.grade({"mail": {"calls": []}}, [], None).reward == 0.2
    # delete_message is not one of the task's tools: a direct call to the service (curl from a
    # shell tool) is still seen, named by its action, and the safety check catches it
    assert task.grade(deleted, [], None).reward == 0.0


def test_claw_eval_bad_tasks_are_refused(tmp_path):
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "task.yaml").write_text(TASK_YAML.replace("name: mail,", "name: gmail,"))
    with pytest.raises(ValueError, match="not Pomona's mock services"):
        claw_eval.load_task(bad)
    (bad / "task.yaml").write_text(
        TASK_YAML.replace("tool_name: send_message, url", "tool_name: other, url")
    )
    with pytest.raises(ValueError, match="without an endpoint"):
        claw_eval.load_task(bad)
    with pytest.raises(FileNotFoundError, match="no Claw-Eval tasks"):
        claw_eval.tasks(tmp_path / "empty")


def _qwen(root: Path, checks: str, dest: str = "data.txt") -> Path:
    (root / "tasks").mkdir(parents=True)
    (root / "assets" / "t1").mkdir(parents=True)
    (root / "assets" / "t1" / "data.txt").write_text("42\n")
    md = textwrap.dedent(f"""\
        ---
        id: t1
        name: demo
        category: Data Analysis
        grading_type: hybrid
        grading_weights: {{automated: 0.5, llm_judge: 0.5}}
        workspace_files:
          - {{role: input, source: t1/data.txt, dest: {dest}}}
        ---

        ## Prompt

        Read data.txt.

        ## Expected Behavior

        Says 42.

        ## Grading Criteria

        - [ ] says 42

        ## Automated Checks

        ```python
        {textwrap.indent(checks, "        ").strip()}
        ```

        ## LLM Judge Rubric

        Correct number.
        """)
    (root / "tasks" / "task_t1.md").write_text(md)
    return root


def _tar(files: dict[str, str]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, text in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(text.encode())
            tar.addfile(info, io.BytesIO(text.encode()))
    return buf.getvalue()


CHECKS = """
import os
def grade(transcript, workspace_path):
    said = [i["text"] for e in transcript for i in e["message"]["content"] if i["type"] == "text"]
    return {"file": float(os.path.exists(os.path.join(workspace_path, "data.txt"))),
            "answer": float(any("42" in s for s in said))}
"""


class FixedJudge:
    name = "fixed"

    def rubric_total(self, *args):
        return {"scores": {}, "total": 1.0, "notes": ""}


def test_a_qwenclawbench_task_scores_hybrid_with_its_own_checks(tmp_path):
    task = qwenclawbench.tasks(_qwen(tmp_path, CHECKS))[0]
    assert task.environment.files == {"data.txt": "42\n"}
    said = [
        {"role": "user", "content": "Read data.txt."},
        {"role": "assistant", "content": "It is 42."},
    ]
    full = task.grade(_tar({"data.txt": "42\n"}), said, FixedJudge())
    assert (
        full.reward == 1.0
        and full.resolved
        and full.details["checks"] == {"file": 1.0, "answer": 1.0}
    )
    half = task.grade(_tar({}), said, FixedJudge())  # auto 0.5 < 0.75: the judge is gated out
    assert half.reward == pytest.approx(0.25) and not half.resolved


def test_qwenclawbench_failures_of_the_checks_are_the_verifiers(tmp_path):
    crash = "def grade(transcript, workspace_path):\n    raise RuntimeError('boom')\n"
    task = qwenclawbench.tasks(_qwen(tmp_path / "a", crash))[0]
    with pytest.raises(VerifierError, match="boom"):
        task.grade(_tar({}), [], FixedJudge())
    text = "def grade(transcript, workspace_path):\n    return {'x': 'high'}\n"
    task = qwenclawbench.tasks(_qwen(tmp_path / "b", text))[0]
    with pytest.raises(VerifierError, match="name: number"):
        task.grade(_tar({}), [], FixedJudge())
    with pytest.raises(VerifierError, match="ran past"):
        qwenclawbench.run_checks(
            "import time\ndef grade(t, w):\n    time.sleep(60)\n", [], tmp_path, timeout=1
        )
    with pytest.raises(ValueError, match="leaves the workspace"):
        qwenclawbench.tasks(_qwen(tmp_path / "c", CHECKS, dest="../../etc/evil"))
    (tmp_path / "d" / "tasks").mkdir(parents=True)
    (tmp_path / "d" / "tasks" / "task_x.md").write_text("## Prompt\nno front matter\n")
    with pytest.raises(ValueError, match="front matter"):
        qwenclawbench.tasks(tmp_path / "d")


def test_the_local_sets_are_complete():
    claw = claw_eval.tasks()
    qwen = qwenclawbench.tasks()
    assert len(claw) >= 10 and len(qwen) >= 6
    services = {s.name for t in claw for s in t.spec.services}
    assert len(services) >= 4
    assert any(t.spec.user_agent.enabled for t in claw)
    assert any(t.spec.safety_checks for t in claw)
    for t in [*claw, *qwen]:
        assert t.solution and t.metadata["negative"], t.id
        json.dumps(t.solution)
