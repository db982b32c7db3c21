"""MCP servers for any harness: one declarative description, rendered by each adapter into the
harness's own configuration (its config file or flags), so a task or an environment says once
which tools it brings and every MCP-capable harness gets them the way its users would set them up.

    browser = McpServer("browser", command=("/opt/pomona/tools/bin/playwright-mcp", "--headless"))
    mail = McpServer("mail", url="http://127.0.0.1:9100/mcp", headers={"Authorization": "Bearer x"})
    run("claude-code", prompt, sandbox, model, proxy, mcp=[browser, mail])

A stdio server is a command the harness spawns inside the sandbox (give an absolute path: some
harnesses start servers with a reduced environment); an HTTP server is a Streamable HTTP URL as
the sandbox reaches it. How each harness names the tools it gets (the scripted model matches
all of these):

    claude-code  mcp__SERVER__TOOL      codex     mcp__SERVER__TOOL     opencode  SERVER_TOOL
    openclaw     SERVER__TOOL, behind its Tool Search (tool_search / tool_call)
    hermes       mcp__SERVER__TOOL      kimi      TOOL
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pomona.errors import PomonaError, UsageError

_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,47}$")


class McpUnsupported(PomonaError, ValueError):
    """The harness has no MCP client Pomona can configure."""


@dataclass(frozen=True, eq=False)
class McpServer:
    """One MCP server: a stdio `command` (argv) with `env`, or a Streamable HTTP `url` with
    `headers`. `name` becomes part of tool names, so it is kept to letters, digits, _ and -."""

    name: str
    command: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    url: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise UsageError(
                f"MCP server name {self.name!r}: use 1-48 letters, digits, _ or -, "
                "starting with a letter (it becomes part of every tool name)"
            )
        if bool(self.command) == bool(self.url):
            raise UsageError(f"MCP server {self.name!r}: give either a command or a url")
        if self.url and not self.url.startswith(("http://", "https://")):
            raise UsageError(f"MCP server {self.name!r}: url must be http(s), not {self.url!r}")
        object.__setattr__(self, "command", tuple(self.command))
        for label, values in (("env", self.env), ("headers", self.headers)):
            if not all(isinstance(k, str) and isinstance(v, str) for k, v in values.items()):
                raise UsageError(f"MCP server {self.name!r}: {label} must map strings to strings")

    @property
    def stdio(self) -> bool:
        return bool(self.command)


def check_unique(servers: Iterable[McpServer]) -> tuple[McpServer, ...]:
    chosen = tuple(servers)
    names = [s.name for s in chosen]
    duplicated = sorted({n for n in names if names.count(n) > 1})
    if duplicated:
        raise UsageError(f"MCP server names must be unique: {', '.join(duplicated)}")
    return chosen


# --- one renderer per configuration dialect ---------------------------------------------------


def mcp_servers_json(servers: Iterable[McpServer]) -> dict[str, Any]:
    """The `mcpServers` JSON file Claude Code (--mcp-config) and Kimi (--mcp-config-file) read."""
    out: dict[str, Any] = {}
    for s in servers:
        if s.stdio:
            out[s.name] = {
                "type": "stdio",
                "command": s.command[0],
                "args": list(s.command[1:]),
                "env": dict(s.env),
            }
        else:
            out[s.name] = {"type": "http", "url": s.url, "headers": dict(s.headers)}
    return {"mcpServers": out}


def _toml(value: Any) -> str:
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{json.dumps(k)} = {_toml(v)}" for k, v in value.items()) + " }"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return json.dumps(value)  # a JSON string or number is a valid TOML basic string or number


def codex_toml(servers: Iterable[McpServer]) -> str:
    """`[mcp_servers.NAME]` tables of Codex's config.toml."""
    tables = []
    for s in servers:
        fields: dict[str, object]
        if s.stdio:
            fields = {"command": s.command[0], "args": list(s.command[1:]), "env": dict(s.env)}
        else:
            fields = {"url": s.url, "http_headers": dict(s.headers)}
        # `codex exec` 0.171 otherwise starts its first turn before a server has listed its
        # tools, so they are never offered; required servers are waited for (or fail the run)
        fields["required"] = True
        body = "".join(f"{k} = {_toml(v)}\n" for k, v in fields.items())
        tables.append(f"\n[mcp_servers.{json.dumps(s.name)}]\n{body}")
    return "".join(tables)


def openclaw_servers(servers: Iterable[McpServer]) -> dict[str, Any]:
    """OpenClaw's `mcp.servers` map (stdio, or Streamable HTTP)."""
    out: dict[str, Any] = {}
    for s in servers:
        if s.stdio:
            out[s.name] = {"command": s.command[0], "args": list(s.command[1:]), "env": dict(s.env)}
        else:
            out[s.name] = {"url": s.url, "transport": "streamable-http", "headers": dict(s.headers)}
    return out


def opencode_servers(servers: Iterable[McpServer]) -> dict[str, Any]:
    """OpenCode's `mcp` map: `local` servers take the whole argv, `remote` ones a URL."""
    out: dict[str, Any] = {}
    for s in servers:
        if s.stdio:
            out[s.name] = {
                "type": "local",
                "command": list(s.command),
                "environment": dict(s.env),
                "enabled": True,
            }
        else:
            out[s.name] = {
                "type": "remote",
                "url": s.url,
                "headers": dict(s.headers),
                "enabled": True,
            }
    return out


def hermes_servers(servers: Iterable[McpServer]) -> dict[str, Any]:
    """Hermes' `mcp_servers` map in config.yaml."""
    out: dict[str, Any] = {}
    for s in servers:
        if s.stdio:
            out[s.name] = {"command": s.command[0], "args": list(s.command[1:]), "env": dict(s.env)}
        else:
            out[s.name] = {"url": s.url, "headers": dict(s.headers)}
    return out
