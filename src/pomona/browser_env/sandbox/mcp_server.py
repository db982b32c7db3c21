"""Inside a browser sandbox: the MCP server (stdio) a harness spawns to get the browser's tools.
It lists the tools and passes each call to the broker (broker.py), which hands it to Pomona's
side, where the browser is driven; the answer (text and a screenshot) comes back as the tool's
result. Runs on the tools payload's CPython, which carries the `mcp` SDK.

    mcp_server.py --tools tools.json --broker-port Q
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
from pathlib import Path
from typing import Any

import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

CALL_TIMEOUT = 600.0  # a page load may be retried; the harness's own tool timeout is the limit


def relay(port: int, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=CALL_TIMEOUT) as conn:
            stream = conn.makefile("rwb")
            stream.write(json.dumps({"tool": name, "arguments": arguments}).encode() + b"\n")
            stream.flush()
            line = stream.readline()
    except OSError as e:
        line = b""
        reason = str(e)
    else:
        reason = "the broker closed the connection"
    if not line:
        return {"content": [{"type": "text", "text": f"Error: {reason}"}], "is_error": True}
    return json.loads(line)


def content_of(items: list[dict[str, Any]]) -> list[Any]:
    out: list[Any] = []
    for item in items:
        if item.get("type") == "image":
            out.append(types.ImageContent(data=item["data"], mime_type=item["mimeType"]))
        else:
            out.append(types.TextContent(text=str(item.get("text", ""))))
    return out


def build(tools: list[dict[str, Any]], port: int) -> Server:
    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(
            tools=[
                types.Tool(
                    name=t["name"], description=t["description"], input_schema=t["input_schema"]
                )
                for t in tools
            ]
        )

    async def call_tool(ctx: Any, params: Any) -> types.CallToolResult:
        answer = await asyncio.to_thread(relay, port, params.name, params.arguments or {})
        return types.CallToolResult(
            content=content_of(answer.get("content") or []), is_error=bool(answer.get("is_error"))
        )

    return Server("pomona-browser", on_list_tools=list_tools, on_call_tool=call_tool)


async def serve(tools: list[dict[str, Any]], port: int) -> None:
    server = build(tools, port)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description="MCP server for the sandbox's browser")
    p.add_argument("--tools", type=Path, required=True)
    p.add_argument("--broker-port", type=int, required=True)
    args = p.parse_args(argv)
    asyncio.run(serve(json.loads(args.tools.read_text()), args.broker_port))


if __name__ == "__main__":
    main()
