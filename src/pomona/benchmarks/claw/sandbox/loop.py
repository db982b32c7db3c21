"""Claw-Eval's native agent loop, Pomona's implementation: OpenAI function calling against the
episode's proxy, the task's tools taken from MCP servers (the same relay a real harness gets,
`ask_user` included on multi-turn tasks), plus a `shell` tool. It writes Claw-Eval's trace JSONL
(trace_start, message, tool_dispatch, trace_end) and prints the final answer as one JSON line
{"type": "final", "text": ...}.

    loop.py --base-url URL/v1 --model M --prompt TEXT --trace FILE [--mcp FILE]

--mcp: {"NAME": {"command": [argv], "env": {...}}}.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping
from contextlib import AsyncExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from openai import OpenAI

if TYPE_CHECKING:  # names only: the payload's openai need not have these modules
    from openai.types.chat import (
        ChatCompletionAssistantMessageParam,
        ChatCompletionMessageFunctionToolCallParam,
        ChatCompletionMessageParam,
        ChatCompletionToolParam,
    )

SYSTEM = (
    "You are a personal assistant acting for the user through the tools you are given. "
    "Look things up before you act, act only as the user asked, and finish with a short "
    "answer to the user that states what you found and what you did."
)
SHELL: ChatCompletionToolParam = {
    "type": "function",
    "function": {
        "name": "shell",
        "description": "Run a shell command in the working directory; returns its output.",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string"}},
            "required": ["command"],
        },
    },
}


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class Trace:
    def __init__(self, path: Path, trace_id: str):
        self.file, self.trace_id = path.open("a", encoding="utf-8"), trace_id

    def write(self, kind: str, **fields: Any) -> None:
        event = {"type": kind, "trace_id": self.trace_id, **fields, "timestamp": now()}
        self.file.write(json.dumps(event, ensure_ascii=False) + "\n")
        self.file.flush()


def blocks(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A chat message as Claw-Eval's content blocks (text, tool_use, tool_result)."""
    out: list[dict[str, Any]] = []
    if message.get("role") == "tool":
        return [
            {
                "type": "tool_result",
                "tool_use_id": message["tool_call_id"],
                "content": [{"type": "text", "text": message.get("content") or ""}],
            }
        ]
    if message.get("content"):
        out.append({"type": "text", "text": message["content"]})
    for call in message.get("tool_calls") or []:
        try:
            args = json.loads(call["function"]["arguments"] or "{}")
        except ValueError:
            args = {}
        out.append(
            {"type": "tool_use", "id": call["id"], "name": call["function"]["name"], "input": args}
        )
    return out


class Tools:
    """MCP tools (by name) plus the shell tool."""

    def __init__(self, workdir: str):
        self.workdir = workdir
        self.sessions: dict[
            str, tuple[ClientSession, str, str]
        ] = {}  # tool -> (session, its name, server)
        self.schemas: list[ChatCompletionToolParam] = [SHELL]

    async def connect(self, stack: AsyncExitStack, servers: dict[str, Any]) -> None:
        for name, spec in servers.items():
            params = StdioServerParameters(
                command=spec["command"][0], args=spec["command"][1:], env=spec.get("env") or None
            )
            read, write = await stack.enter_async_context(stdio_client(params))
            session = await stack.enter_async_context(ClientSession(read, write))
            await session.initialize()
            for tool in (await session.list_tools()).tools:
                key = tool.name if tool.name not in self.sessions else f"{name}__{tool.name}"
                self.sessions[key] = (session, tool.name, name)
                self.schemas.append(
                    {
                        "type": "function",
                        "function": {
                            "name": key,
                            "description": tool.description or key,
                            "parameters": tool.input_schema or {"type": "object", "properties": {}},
                        },
                    }
                )

    async def call(self, name: str, args: dict[str, Any]) -> tuple[int, str, str]:
        """(status, text, endpoint) of one call."""
        if name == "shell":
            proc = await asyncio.to_thread(
                subprocess.run,
                str(args.get("command") or ""),
                shell=True,
                cwd=self.workdir,
                capture_output=True,
                text=True,
                timeout=600,
                stdin=subprocess.DEVNULL,
            )
            text = (proc.stdout + proc.stderr)[-20000:] or f"(exit {proc.returncode})"
            return (200 if proc.returncode == 0 else 500), text, "shell"
        if name not in self.sessions:
            return 404, f"unknown tool {name!r}", ""
        session, tool, server = self.sessions[name]
        result = await session.call_tool(tool, args)
        text = "\n".join(getattr(c, "text", "") for c in result.content)
        return (500 if result.is_error else 200), text, f"mcp://{server}/{tool}"


async def run(args: argparse.Namespace) -> str:
    trace = Trace(Path(args.trace), str(uuid.uuid4()))
    trace.write("trace_start", task_id=args.task_id, model=args.model)
    client = OpenAI(base_url=args.base_url, api_key="sk-pomona", max_retries=2)
    messages: list[ChatCompletionMessageParam] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": args.prompt},
    ]
    trace.write("message", message={"role": "user", "content": blocks(messages[1])})
    final, turns = "", 0
    async with AsyncExitStack() as stack:
        tools = Tools(args.workdir)
        if args.mcp:
            await tools.connect(stack, json.loads(Path(args.mcp).read_text()))
        while turns < args.max_turns:
            turns += 1
            reply = (
                client.chat.completions.create(
                    model=args.model, messages=messages, tools=tools.schemas
                )
                .choices[0]
                .message
            )
            calls: list[ChatCompletionMessageFunctionToolCallParam] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.function.name, "arguments": c.function.arguments},
                }
                for c in reply.tool_calls or []
                if c.type == "function"  # the only tools this loop offers
            ]
            message: ChatCompletionAssistantMessageParam = {
                "role": "assistant",
                "content": reply.content or "",
            }
            if calls:
                message["tool_calls"] = calls
            messages.append(message)
            trace.write("message", message={"role": "assistant", "content": blocks(message)})
            if not calls:
                final = reply.content or ""
                break
            for call in calls:
                try:
                    call_args = json.loads(call["function"]["arguments"] or "{}")
                except ValueError:
                    call_args = {}
                t0 = time.monotonic()
                status, text, endpoint = await tools.call(call["function"]["name"], call_args)
                trace.write(
                    "tool_dispatch",
                    tool_use_id=call["id"],
                    tool_name=call["function"]["name"],
                    endpoint_url=endpoint,
                    request_body=call_args,
                    response_status=status,
                    response_body=text,
                    latency_ms=round((time.monotonic() - t0) * 1000, 1),
                )
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": text})
                trace.write("message", message={"role": "user", "content": blocks(messages[-1])})
    trace.write("trace_end", total_turns=turns)
    return final


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Claw-Eval's native loop")
    p.add_argument("--base-url", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--prompt", required=True)
    p.add_argument("--trace", required=True)
    p.add_argument("--task-id", default="")
    p.add_argument("--workdir", default=".")
    p.add_argument("--mcp")
    p.add_argument("--max-turns", type=int, default=30)
    args = p.parse_args(argv)
    final = asyncio.run(run(args))
    print(json.dumps({"type": "final", "text": final}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
