"""The agent side of a Claw-Eval task's tools: an MCP server (stdio) that a harness spawns, as
the agent's user, offering the task's tools as its task.yaml declares them (name, description,
input schema) and relaying each call to the trusted host (HOME/tools.sock), which dispatches it
with Claw-Eval's own ToolDispatcher and records it. A multi-turn task adds `ask_user`: its
simulated user, answered by Claw-Eval's UserAgent on the host.

    claw_relay.py          (no arguments: everything comes from the host)
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # pomona-python runs with -I

from claw_common import TOOLS_SOCKET, request  # noqa: E402

ASK_USER = "ask_user"
ASK_USER_DESCRIPTION = (
    "Ask the user a question and wait for their reply. The user may not give every piece of "
    "information at first: ask for what is missing before you answer."
)


def _ask_user_tool(suffix: str) -> dict[str, Any]:
    description = f"{ASK_USER_DESCRIPTION}\n\n{suffix}" if suffix else ASK_USER_DESCRIPTION
    return {
        "name": ASK_USER,
        "description": description,
        "input_schema": {
            "type": "object",
            "properties": {"question": {"type": "string", "description": "What to ask."}},
            "required": ["question"],
        },
    }


def build(listing: dict[str, Any]) -> Server:
    tools = list(listing["tools"])
    if listing.get("ask_user") is not None:
        tools.append(_ask_user_tool(listing["ask_user"]))

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(
            tools=[
                types.Tool(
                    name=t["name"],
                    description=t.get("description") or t["name"],
                    input_schema=t.get("input_schema") or {"type": "object", "properties": {}},
                )
                for t in tools
            ]
        )

    async def call_tool(ctx: Any, params: Any) -> types.CallToolResult:
        arguments = dict(params.arguments or {})
        message: dict[str, Any]
        if params.name == ASK_USER and listing.get("ask_user") is not None:
            message = {"op": "ask_user", "question": str(arguments.get("question") or "")}
        else:
            message = {"op": "call", "name": params.name, "input": arguments}
        try:
            reply = await asyncio.to_thread(request, TOOLS_SOCKET, message)
        except OSError as e:
            reply = {"text": f"the task's tools are unreachable: {e}", "is_error": True}
        return types.CallToolResult(
            content=[types.TextContent(text=str(reply.get("text", "")))],
            is_error=bool(reply.get("is_error")),
        )

    return Server("claw-eval", on_list_tools=list_tools, on_call_tool=call_tool)


async def serve() -> None:
    server = build(await asyncio.to_thread(request, TOOLS_SOCKET, {"op": "tools"}))
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    asyncio.run(serve())
