"""An MCP server (stdio) exposing a task's tools, each forwarded to its HTTP endpoint as a JSON
POST: the tools of a Claw-Eval task.yaml (`tools` + `tool_endpoints`) as a real harness takes
them. The services' own audit records every call; this server only relays.

A multi-turn task also gets `ask_user`: the simulated user, a model playing the task's persona
through a proxy episode of its own (opened beside the agent's), which answers the agent's
questions. Every harness reaches the user this way, whether or not it can continue a session.

    mcp_server.py --tools tools.json [--user user.json]
    tools.json: [{"name", "description", "input_schema", "url"}]
    user.json:  {"persona", "model", "proxy", "max_rounds", "script"?}
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

USER_RULES = (
    "You play a user talking to an assistant, in the persona below. Answer its questions "
    "briefly and truthfully from the persona. When you have nothing to add, reply with exactly "
    "[DONE].\n\nPersona:\n{persona}"
)
ASK_USER = {
    "name": "ask_user",
    "description": "Ask the user a question and wait for their answer.",
    "input_schema": {
        "type": "object",
        "properties": {"question": {"type": "string"}},
        "required": ["question"],
    },
}


def _post(url: str, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json", "Authorization": "Bearer sk-pomona"},
    )
    with urllib.request.urlopen(request, timeout=300) as r:
        return json.loads(r.read())


class SimulatedUser:
    """The persona's side of the conversation: the agent's questions are its input, its own
    earlier answers its replies, so a scripted user steps through its script statelessly."""

    def __init__(self, spec: dict[str, Any]):
        self.spec, self.base = spec, ""
        self.turns: list[tuple[str, str]] = []  # (the agent's question, the user's answer)

    def ask(self, question: str) -> str:
        if len(self.turns) >= int(self.spec.get("max_rounds", 3)):
            return "(the user does not answer any more questions)"
        if not self.base:
            body = {
                "model": self.spec["model"],
                "tool_less_calls": "main",
                "metadata": {"role": "simulated-user"},
            }
            if self.spec.get("script"):
                body["script"] = self.spec["script"]
            self.base = _post(f"{self.spec['proxy']}/episodes", body)["base_url"]
        messages = [{"role": "system", "content": USER_RULES.format(persona=self.spec["persona"])}]
        for asked, answered in self.turns:
            messages += [
                {"role": "user", "content": asked},
                {"role": "assistant", "content": answered},
            ]
        messages.append({"role": "user", "content": question})
        reply = _post(
            f"{self.base}/chat/completions", {"model": self.spec["model"], "messages": messages}
        )
        answer = (reply["choices"][0]["message"].get("content") or "").strip()
        self.turns.append((question, answer))
        return "(the user has nothing to add)" if "[DONE]" in answer or not answer else answer


def forward(url: str, arguments: dict[str, Any], timeout: float = 60) -> tuple[int, str]:
    """POST the arguments; (status, body text). An unreachable service is status 503."""
    request = urllib.request.Request(
        url,
        data=json.dumps(arguments).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as r:
            return r.status, r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8", "replace")
    except (urllib.error.URLError, OSError) as e:
        return 503, json.dumps({"error": f"service unreachable: {e}"})


def build(tools: list[dict[str, Any]], user: SimulatedUser | None = None) -> Server:
    if user is not None:
        tools = [*tools, ASK_USER]
    by_name = {t["name"]: t for t in tools}

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
        tool = by_name.get(params.name)
        if tool is None:
            text, error = f"unknown tool {params.name!r}", True
        elif tool is ASK_USER and user is not None:
            question = str((params.arguments or {}).get("question") or "")
            try:
                text, error = await asyncio.to_thread(user.ask, question), False
            except (urllib.error.URLError, OSError, ValueError, KeyError) as e:
                text, error = f"the user could not be reached: {e}", True
        else:
            status, text = await asyncio.to_thread(forward, tool["url"], params.arguments or {})
            error = status >= 400
        return types.CallToolResult(content=[types.TextContent(text=text)], is_error=error)

    return Server("pomona-claw", on_list_tools=list_tools, on_call_tool=call_tool)


async def serve(tools: list[dict[str, Any]], user: SimulatedUser | None) -> None:
    server = build(tools, user)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description="MCP server relaying a task's tools to its services")
    p.add_argument("--tools", type=Path, required=True)
    p.add_argument("--user", type=Path, help="the simulated user (multi-turn tasks)")
    args = p.parse_args(argv)
    user = (
        SimulatedUser(json.loads(args.user.read_text()))
        if args.user and args.user.is_file()
        else None
    )
    asyncio.run(serve(json.loads(args.tools.read_text()), user))


if __name__ == "__main__":
    main()
