"""Harnesses that browse: the browser's MCP tools on a real session (hostile calls included), the
broker's guard, a refused page seen by the agent, and Claude Code and Codex solving a local task
through `pomona run --harness` with the oracle model, graded by the same oracle."""

from __future__ import annotations

import base64
import json
import shlex
import threading
from pathlib import Path
from typing import Any

import pytest

from pomona import cli, trajectories
from pomona.benchmarks.browser import scripts, suite
from pomona.benchmarks.browser.web import INSTALL_DIR
from pomona.browser_env import BrowserSession, NavigationFailed, SessionOptions
from pomona.browser_env.bridge import BACKEND_PORT, CALLS_PORT, HOME, PYTHON, McpBridge
from pomona.browser_env.tools import TOOL_NAMES, BrowserTools
from pomona.harnesses import payload, tools_mount
from pomona.run import run_benchmark

TASK = "Dictionary--2"  # type a word in the search field, open its entry, answer from it
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n").decode()[:8]  # how a PNG starts in base64


@pytest.fixture(scope="module")
def unavailable() -> dict[str, str]:
    report = payload.install(["claw-eval", "claude-code", "codex"])
    return {**report.unavailable, **report.failed}


@pytest.fixture(scope="module")
def site(client: Any) -> Any:
    task = next(t for t in suite.load("webvoyager-local") if t.id == TASK)
    options = SessionOptions(mounts=(tools_mount(),))
    with BrowserSession(client, web=suite.web_for(task), options=options) as session:
        suite.begin(session, task, seed=0)
        yield session


RELAY = (  # one call on the broker's calls port, as the MCP server makes it
    "import socket, sys\n"
    f"c = socket.create_connection(('127.0.0.1', {CALLS_PORT}), timeout=300)\n"
    "c.sendall(sys.stdin.buffer.read())\n"
    "print(c.makefile('rb').readline().decode().strip())\n"
)


def served(bridge: McpBridge, command: str) -> Any:
    """Run `command` in the bridge's sandbox while this thread serves its tool calls."""
    out: dict[str, Any] = {}
    caller = threading.Thread(
        target=lambda: out.update(r=bridge.sandbox.exec(command, timeout=300)), daemon=True
    )
    caller.start()
    bridge.serve_while(caller.is_alive)
    caller.join()
    return out["r"]


def text_of(answer: dict[str, Any]) -> str:
    return "\n".join(c["text"] for c in answer["content"] if c["type"] == "text")


def test_the_tools_on_a_session(site: Any) -> None:
    tools = BrowserTools(site)
    first = tools.call("browser_observe", {})
    assert not first["is_error"] and "URL: http://dictionary.pomona.test/" in text_of(first)
    image = next(c for c in first["content"] if c["type"] == "image")
    assert base64.b64decode(image["data"]).startswith(b"\x89PNG")
    field = next(m.index for m in tools.last.marks if m.typeable)
    for name, arguments, says in (
        ("browser_click", {"index": 999}, "no element [999]"),
        ("browser_click", {"index": "x"}, "must be an element's number"),
        ("browser_type", {"index": field}, "needs `text`"),
        ("browser_scroll", {"target": "WINDOW", "direction": "sideways"}, "up or down"),
        ("browser_hover", {}, "no tool 'browser_hover'"),
    ):
        answer = tools.call(name, arguments)
        assert answer["is_error"] and says in text_of(answer), (name, answer)
    assert tools.steps == []  # refused calls are no actions
    typed = tools.call("browser_type", {"index": field, "text": "ubiquitous"})
    assert not typed["is_error"] and "/word/ubiquitous" in tools.last.url
    assert tools.steps == [
        {"action": f"Type [{field}]; ubiquitous", "thought": "", "screenshot": 1}
    ]
    assert len(tools.screenshots) == 3 and set(TOOL_NAMES) >= {"browser_observe", "browser_click"}


def test_a_refused_page_is_the_agents_navigation_error(client: Any) -> None:
    options = SessionOptions(search_home="http://127.0.0.1:8801/")  # nothing listens there
    with BrowserSession(client, options=options) as session:
        with pytest.raises(NavigationFailed, match="ERR_CONNECTION_REFUSED"):
            session.goto("http://127.0.0.1:8801/")
        assert session.observe().screenshot  # the browser is fine and shows its error page
        answer = BrowserTools(session).call("browser_search", {})
        assert not answer["is_error"], answer
        assert text_of(answer).startswith("Error: the page could not be loaded")
        assert any(c["type"] == "image" for c in answer["content"])


def test_the_broker_serves_calls_and_refuses_an_impostor(site: Any, unavailable: dict) -> None:
    if "claw-eval" in unavailable:
        pytest.skip(f"the MCP server's CPython: {unavailable['claw-eval']}")
    bridge = McpBridge(site)
    try:
        server = bridge.install()
        assert server.command[:2] == (PYTHON, f"{HOME}/mcp_server.py")
        sandbox = site.sandbox
        assert sandbox.exec(f"cat {HOME}/token", timeout=30).exit_code != 0  # root's only
        site_data = f"{INSTALL_DIR}/data/dictionary.json"  # the agent reads the sites by browsing
        assert sandbox.exec(f"cat {site_data}", timeout=30).exit_code != 0
        # the agent's user poses as the backend, then calls a tool like an MCP server would
        probe = (
            "import json, socket\n"
            "try:\n"
            f"    s = socket.create_connection(('127.0.0.1', {BACKEND_PORT}), timeout=5)\n"
            "    s.sendall(b'guess\\n')\n"
            "    dropped = s.recv(10) == b''\n"
            "except ConnectionRefusedError:\n"
            "    dropped = True  # Pomona's side is connected: the port is closed\n"
            "print(json.dumps({'impostor_dropped': dropped}))\n"
            f"c = socket.create_connection(('127.0.0.1', {CALLS_PORT}), timeout=300)\n"
            "f = c.makefile('rwb')\n"
            'f.write(b\'{"tool": "browser_observe", "arguments": {}}\\nnot json\\n\')\n'
            "f.flush()\n"
            "print(f.readline().decode().strip()); print(f.readline().decode().strip())\n"
        )
        result = served(bridge, f"{PYTHON} -c {shlex.quote(probe)}")
        lines = [json.loads(x) for x in result.stdout.splitlines()]
        assert result.exit_code == 0 and lines[0] == {"impostor_dropped": True}, result
        assert not lines[1]["is_error"] and "URL: http://dictionary.pomona.test/" in text_of(
            lines[1]
        )
        assert lines[2]["is_error"]  # a line that is no call gets an error, and the broker lives on
        # the browser dies under the harness: the call says so, and the episode's failure is infra
        sandbox.exec("pkill -9 -f -- --user-data-dir=/tmp/pomona-chromium", timeout=30)
        call = (
            f"printf '%s\\n' '{{\"tool\": \"browser_observe\"}}' | {PYTHON} -c {shlex.quote(RELAY)}"
        )
        answer = json.loads(served(bridge, call).stdout)
        assert answer["is_error"] and "the browser failed" in text_of(answer)
        assert bridge.failure is not None and bridge.failure.kind == "sandbox"
    finally:
        bridge.close()


@pytest.mark.parametrize("harness", ["claude-code", "codex", "opencode", "hermes", "openclaw"])
def test_a_harness_browses_a_local_task(
    harness: str, browser_state: str, tmp_path: Path, unavailable: dict[str, str]
) -> None:
    for name in ("claw-eval", harness):
        if name in unavailable:
            pytest.skip(f"{name}: {unavailable[name]}")
    result = run_benchmark(
        "webvoyager-local", harness, "oracle", trajectories=tmp_path / "runs", task_ids=[TASK],
        state_dir=browser_state, progress=False, concurrency=1, timeout=300,
    )  # fmt: skip
    record = result.records[0]
    assert record.failure_kind == "none", record.failure_message
    assert record.resolved and record.harness == harness and "latin" in record.final_answer.lower()
    assert [c["passed"] for c in record.score["details"]["checks"]] == [True, True]
    calls = trajectories.read(tmp_path / "runs", "calls").to_pylist()
    mine = [c for c in calls if c["episode"] == record.episode]
    assert any("browser_type" in (c["response"] or "") for c in mine)  # the model's tool call
    if harness == "hermes":  # keeps images as files and gives the model their paths
        assert any("MEDIA:" in (c["request"] or "") for c in mine)
        assert not any('"browser_navigate"' in (c["request"] or "") for c in mine)  # its own
    else:
        assert any(PNG in (c["request"] or "") for c in mine)  # and the screenshot it got back
    rows = trajectories.read(tmp_path / "runs", "episodes").to_pylist()
    assert [(r["harness"], r["failure_kind"]) for r in rows if r["episode"] == record.episode] == [
        (harness, "none")
    ]
    messages = json.loads(
        (result.trajectories / "browser" / result.run_id / "webvoyager" / f"task{TASK}"
         / "interact_messages.json").read_text()
    )  # fmt: skip
    assert messages[1]["content"].startswith("Now given a task:")
    assert messages[-1]["content"].endswith(f"ANSWER; {record.final_answer}")
    assert scripts.final_answer("ANSWER; Latin.") == "Latin."


def test_a_harness_without_mcp_is_refused_in_words(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["run", "--benchmark", "webvoyager-local", "--harness", "pi", "--trajectories",
            str(tmp_path / "runs")]  # fmt: skip
    assert cli.main(argv) == 2
    assert "pi has no MCP client" in capsys.readouterr().err
