"""An MCP server (stdio) exposing a task's tools, each forwarded to its HTTP endpoint as a JSON
POST: the tools of a Claw-Eval task.yaml (`tools` + `tool_endpoints`) as a real harness takes
them. The services' own audit records every call; this server only relays.

    mcp_server.py --tools tools.json      # [{"name", "description", "input_schema", "url"}]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server


def forward(url: str, arguments: dict[str, Any], timeout: float = 60) -> tuple[int, str]:
    """POST the arguments; (status, body text). An unreachable service is status 503."""
    request = urllib.request.Request(
        url, data=json.dumps(arguments).encode(), method="POST",
        headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as r:
            return r.status, r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8", "replace")
    except (urllib.error.URLError, OSError) as e:
        return 503, json.dumps({"error": f"service unreachable: {e}"})


def build(tools: list[dict[str, Any]]) -> Server:
    by_name = {t["name"]: t for t in tools}

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[
            types.Tool(name=t["name"], description=t.get("description") or t["name"],
                       input_schema=t.get("input_schema") or {"type": "object", "properties": {}})
            for t in tools])

    async def call_tool(ctx: Any, params: Any) -> types.CallToolResult:
        tool = by_name.get(params.name)
        if tool is None:
            text, error = f"unknown tool {params.name!r}", True
        else:
            status, text = await asyncio.to_thread(forward, tool["url"], params.arguments or {})
            error = status >= 400
        return types.CallToolResult(content=[types.TextContent(text=text)], is_error=error)

    return Server("pomona-claw", on_list_tools=list_tools, on_call_tool=call_tool)


async def serve(tools: list[dict[str, Any]]) -> None:
    server = build(tools)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description="MCP server relaying a task's tools to its services")
    p.add_argument("--tools", type=Path, required=True)
    args = p.parse_args(argv)
    asyncio.run(serve(json.loads(args.tools.read_text())))


if __name__ == "__main__":
    main()
