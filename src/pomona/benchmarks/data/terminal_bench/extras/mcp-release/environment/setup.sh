#!/bin/bash
# The release registry: a small MCP server speaking JSON-RPC over stdio (no SDK needed), which
# keeps the published versions in /app/.registry/published.json.
set -e
echo 2.4.1 > VERSION
mkdir -p .registry
cat > .registry/server.py <<'PY'
import json
import sys
from pathlib import Path

STATE = Path("/app/.registry/published.json")
TOOLS = [
    {"name": "publish", "description": "Publish a release version to the registry.",
     "inputSchema": {"type": "object", "properties": {"version": {"type": "string"}},
                     "required": ["version"]}},
    {"name": "published", "description": "List the versions published so far.",
     "inputSchema": {"type": "object", "properties": {}}},
]


def call(name, args):
    versions = json.loads(STATE.read_text()) if STATE.exists() else []
    if name == "publish":
        version = str(args.get("version", "")).strip()
        if not version:
            return "error: no version given", True
        versions.append(version)
        STATE.write_text(json.dumps(versions))
        return f"published {version}", False
    if name == "published":
        return json.dumps(versions), False
    return f"error: no tool {name}", True


def answer(message):
    method, params = message.get("method"), message.get("params") or {}
    if method == "initialize":
        return {"protocolVersion": params.get("protocolVersion", "2025-06-18"),
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "registry", "version": "1.0"}}
    if method == "tools/list":
        return {"tools": TOOLS}
    if method == "tools/call":
        text, failed = call(params.get("name"), params.get("arguments") or {})
        return {"content": [{"type": "text", "text": text}], "isError": failed}
    if method == "ping":
        return {}
    raise LookupError(method)


for line in sys.stdin:
    if not line.strip():
        continue
    message = json.loads(line)
    if "id" not in message:
        continue  # a notification: nothing to answer
    try:
        reply = {"jsonrpc": "2.0", "id": message["id"], "result": answer(message)}
    except LookupError as e:
        reply = {"jsonrpc": "2.0", "id": message["id"],
                 "error": {"code": -32601, "message": f"unknown method {e}"}}
    sys.stdout.write(json.dumps(reply) + "\n")
    sys.stdout.flush()
PY
