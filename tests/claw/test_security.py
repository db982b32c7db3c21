"""The agent's side of a Claw-Eval sandbox, tested as the attacker: the agent (the sandbox's
ordinary user, with a shell) can call the task's tools the way a harness does, but cannot reach a
mock service around them (reset it, read its audit, act unrecorded), read the benchmark's files
(graders, answers, the simulated user's persona) or the host's record, or use root's controls.
The gateway that turns it away lets root through: the kernel's socket table tells them apart."""

from __future__ import annotations

import json

import pytest

from pomona.benchmarks.claw import runtime
from pomona.benchmarks.stage import SandboxStage
from tests.claw.conftest import solved

TASK = "T099_pinbench_second_brain_recall"  # one service: notes, on port 9105
POST = (
    '{python} -c "import urllib.request, urllib.error\n'
    "r = urllib.request.Request('http://localhost:9105/{path}', data=b'{{}}',"
    " headers={{'Content-Type': 'application/json'}})\n"
    "try: print(urllib.request.urlopen(r, timeout=30).status)\n"
    'except urllib.error.HTTPError as e: print(e.code)"'
)


@pytest.fixture(scope="module")
def prepared(need, proxy, client, claw_eval_checkout):
    [task] = solved("claw-eval", [TASK])
    stage = SandboxStage(task, client, proxy)
    stage.start()
    yield task, stage.sandbox
    stage.close()


def _as_agent(sandbox, command: str):
    return sandbox.exec(command, timeout=120)


@pytest.mark.parametrize("path", ["notes/list", "notes/reset", "notes/audit"])
def test_the_agent_cannot_reach_a_service_around_its_tools(prepared, path):
    _, sandbox = prepared
    done = _as_agent(sandbox, POST.format(python=runtime.PYTHON, path=path))
    assert done.stdout.strip() == "403", done.stdout + done.stderr


def test_root_reaches_the_services_through_the_same_gateway(prepared):
    _, sandbox = prepared
    done = sandbox.exec(POST.format(python=runtime.PYTHON, path="notes/list"), user="root")
    assert done.stdout.strip() == "200", done.stdout + done.stderr


def test_the_agent_cannot_read_the_benchmark_or_the_record(prepared):
    task, sandbox = prepared
    for path in (f"{task.inside}/grader.py", f"{runtime.HOME}/run/host.log", f"{runtime.HOME}/bin"):
        done = _as_agent(sandbox, f"cat {path} || ls {path}")
        assert done.exit_code != 0 and "Permission denied" in done.stderr, path
    poke = (
        f'{runtime.PYTHON} -c "import socket; s = socket.socket(socket.AF_UNIX);'
        f" s.connect('{runtime.HOME}/run/control.sock')\""
    )
    assert "Permission denied" in _as_agent(sandbox, poke).stderr


def test_a_tool_call_from_the_agent_side_is_dispatched_and_recorded(prepared):
    _, sandbox = prepared
    call = {"op": "call", "name": "notes_get", "input": {"note_id": "mem_001"}}
    relay = (
        f"{runtime.PYTHON} -c \"import json, sys; sys.path.insert(0, '{runtime.HOME}/agent');"
        f" import claw_common; print(json.dumps(claw_common.request("
        f'claw_common.TOOLS_SOCKET, {call!r})))"'
    )
    done = _as_agent(sandbox, relay)
    assert "purple elephant sunrise" in json.loads(done.stdout)["text"], done.stderr
    evidence = runtime.ctl(sandbox, "finish")
    assert [d["tool_name"] for d in evidence["dispatches"]] == ["notes_get"]
    assert evidence["dispatches"][0]["endpoint_url"] == "http://localhost:9105/notes/get"
    assert evidence["audits"]["notes"]["data"]["calls"]  # fetched as Claw-Eval's loop does
