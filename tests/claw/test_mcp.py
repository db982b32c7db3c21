"""The MCP mechanism: one declarative McpServer, rendered into each harness's own config, and
a real harness calling the tool through the proxy's scripted model (inside a gateway sandbox,
the MCP relay spawned by the harness, the call landing in the mock service's audit)."""

from __future__ import annotations

import json
import tomllib

import pytest

from pomona.benchmarks.claw import runtime
from pomona.harnesses import run
from pomona.harnesses.base import RunContext
from pomona.harnesses.mcp import McpServer, McpUnsupported, check_unique, codex_toml
from pomona.harnesses.registry import get

MCP_HARNESSES = ["openclaw", "claude-code", "opencode", "hermes", "codex", "claw-eval"]
NOTE = runtime.Tool(
    "create_note",
    "Create a note.",
    {
        "type": "object",
        "properties": {"title": {"type": "string"}, "body": {"type": "string"}},
        "required": ["title"],
    },
    f"http://127.0.0.1:{runtime.PORT}/notes/create_note",
)
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
def notes_sandbox(proxy, client, unavailable):
    from pomona.harnesses import tools_mount
    from pomona.proxy.control import gateway

    if "claw-eval" in unavailable:
        pytest.skip(f"claw-eval: {unavailable['claw-eval']}")
    sb = client.create_sandbox(
        "host",
        network="gateway",
        gateway=gateway(proxy),
        mounts=[tools_mount()],
        timeout=1800,
    )
    runtime.install(sb, [NOTE], {}, ["notes"])
    yield sb
    sb.delete()


@pytest.mark.parametrize("harness", MCP_HARNESSES)
def test_the_harness_calls_the_mcp_tool_for_real(harness, need, notes_sandbox, proxy):
    need(harness)
    step = {
        "tool": "create_note",
        "server": runtime.MCP_NAME,
        "arguments": {"title": f"from {harness}", "body": "kept"},
    }
    result = run(
        harness,
        "Save a note for me.",
        notes_sandbox,
        "scripted",
        proxy,
        script=[json.dumps(step), json.dumps({"text": "Saved the note."})],
        mcp=[runtime.mcp_server()],
        timeout=600,
    )
    assert result.ok, (result.failure_message, result.stdout[-2000:], result.stderr[-2000:])
    assert result.final_answer and "Saved the note." in result.final_answer
    created = runtime.audit(notes_sandbox)["notes"].get("created_notes", [])
    assert {"title": f"from {harness}", "body": "kept"}.items() <= next(
        n for n in created if n["title"] == f"from {harness}"
    ).items()
