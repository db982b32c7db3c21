"""The MCP mechanism: one declarative McpServer, rendered into each harness's own config, and
a real harness calling an official Claw-Eval task's tool through the proxy's scripted model
(inside the task's gateway sandbox: the relay spawned by the harness, the call dispatched by
Claw-Eval's own ToolDispatcher on the trusted host, answered by its mock service)."""

from __future__ import annotations

import json
import tomllib

import pytest

from pomona.benchmarks.claw import runtime
from pomona.harnesses import run
from pomona.harnesses.base import RunContext
from pomona.harnesses.mcp import McpServer, McpUnsupported, check_unique, codex_toml
from pomona.harnesses.registry import get

# every MCP-taking harness calls a real MCP server in tests/browser/test_mcp.py; here the Claw
# harness and one assistant CLI play a Claw task's tools through its relay
MCP_HARNESSES = ["openclaw", "claude-code"]
TASK = "T099_pinbench_second_brain_recall"  # notes_list, notes_get
STDIO = McpServer("tools", command=("/opt/bin/srv", "--x", 'a "quoted" arg'), env={"K": "v"})
HTTP = McpServer("web", url="http://127.0.0.1:9/mcp", headers={"Authorization": "Bearer t"})


def test_bad_declarations_are_refused_with_the_reason():
    with pytest.raises(ValueError, match="either a command or a url"):
        McpServer("x")
    with pytest.raises(ValueError, match="either a command or a url"):
        McpServer("x", command=("a",), url="http://h/mcp")
    with pytest.raises(ValueError, match="letters, digits"):
        McpServer("../etc", command=("a",))
    with pytest.raises(ValueError, match="http"):
        McpServer("x", url="file:///etc/passwd")
    with pytest.raises(ValueError, match="unique"):
        check_unique([STDIO, McpServer("tools", url="http://h/mcp")])


def _ctx(tmp: str = "/r") -> RunContext:
    return RunContext(
        prompt="p",
        model="m",
        base_url="http://p/e/k/v1",
        anthropic_base_url="http://p/e/k",
        dialect="chat",
        workdir="/w",
        run_dir=tmp,
        timeout=60,
        mcp=(STDIO, HTTP),
    )


def test_each_harness_renders_both_kinds_into_its_own_config():
    claude = get("claude-code").launch(_ctx())
    cfg = json.loads(claude.files["/r/mcp.json"])["mcpServers"]
    assert cfg["tools"] == {
        "type": "stdio",
        "command": "/opt/bin/srv",
        "args": ["--x", 'a "quoted" arg'],
        "env": {"K": "v"},
    }
    assert cfg["web"]["url"] == "http://127.0.0.1:9/mcp" and "--strict-mcp-config" in claude.argv
    codex = tomllib.loads(get("codex").launch(_ctx()).files["/r/codex-home/config.toml"])
    assert codex["mcp_servers"]["tools"]["args"] == ["--x", 'a "quoted" arg']
    assert codex["mcp_servers"]["web"]["http_headers"] == {"Authorization": "Bearer t"}
    assert codex["model_provider"] == "proxy"  # the provider table is intact
    openclaw = json.loads(get("openclaw").launch(_ctx()).files["/r/openclaw.json"])["mcp"][
        "servers"
    ]
    assert openclaw["web"]["transport"] == "streamable-http" and openclaw["tools"]["env"] == {
        "K": "v"
    }
    opencode = json.loads(get("opencode").launch(_ctx()).files["/r/opencode.json"])["mcp"]
    assert opencode["tools"]["command"] == ["/opt/bin/srv", "--x", 'a "quoted" arg']
    assert opencode["web"]["type"] == "remote"
    import yaml

    hermes = yaml.safe_load(get("hermes").launch(_ctx()).files["/r/hermes-home/config.yaml"])
    assert hermes["mcp_servers"]["tools"]["command"] == "/opt/bin/srv"
    assert codex_toml([]) == ""


def test_a_harness_without_an_mcp_client_is_refused_before_it_runs(need, sandbox_for, proxy):
    need("pi")
    with pytest.raises(McpUnsupported, match="pi has no MCP client"):
        run("pi", "x", sandbox_for(), "scripted", proxy, script=[], mcp=[STDIO])


@pytest.fixture(scope="module")
def notes_sandbox(need, proxy, client, claw_eval_checkout):
    from pomona.benchmarks.stage import SandboxStage
    from tests.claw.conftest import solved

    [task] = solved("claw-eval", [TASK])
    stage = SandboxStage(task, client, proxy, ttl=1800)
    stage.start()
    yield stage.sandbox
    stage.close()


@pytest.mark.parametrize("harness", MCP_HARNESSES)
def test_the_harness_calls_the_mcp_tool_for_real(harness, need, notes_sandbox, proxy):
    need(harness)
    step = {"tool": "notes_get", "server": runtime.MCP_NAME, "arguments": {"note_id": "mem_001"}}
    before = len(runtime.ctl(notes_sandbox, "finish")["dispatches"])
    result = run(
        harness,
        "What is my team's secret phrase? It is in my notes.",
        notes_sandbox,
        "scripted",
        proxy,
        script=[json.dumps(step), json.dumps({"text": "purple elephant sunrise"})],
        mcp=[runtime.relay()],
        timeout=600,
    )
    assert result.ok, (result.failure_message, result.stdout[-2000:], result.stderr[-2000:])
    assert result.final_answer and "purple elephant sunrise" in result.final_answer
    dispatched = runtime.ctl(notes_sandbox, "finish")["dispatches"][before:]
    assert [(d["tool_name"], d["request_body"], d["response_status"]) for d in dispatched] == [
        ("notes_get", {"note_id": "mem_001"}, 200)
    ]
    assert "purple elephant sunrise" in json.dumps(dispatched[0]["response_body"])
