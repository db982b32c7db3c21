"""The mock services an assistant works against: mail, calendar, todo, contacts, notes, web
search over a local corpus, finance. One process serves them all on one port, each under its own
prefix (`POST /mail/send_message`), from seeded JSON fixtures, and keeps an audit log of every
call. It runs as root inside the sandbox with its state in memory: the agent (another user)
can call the services, as a tool would, but cannot read or rewrite the audit, reset the state or
kill the process. `GET /NAME/audit` and `POST /NAME/reset` need the admin token.

    services.py --port 9100 --fixtures DIR --token-file FILE     serve
    services.py --port 9100 --token-file FILE --dump             print every audit as JSON

A call's audit entry: {"endpoint", "request_body", "response_status", "response_body", "ts"};
each service also lists its state changes under keys such as "sent", "drafts", "created_events".
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

# action -> (kind, collection, audit key). Kinds: list (filter by the fields given), get / update
# / delete (by id), create (new id), search (words over text fields).
ACTIONS: dict[str, dict[str, tuple[str, str, str]]] = {
    "mail": {
        "list_messages": ("list", "messages", ""),
        "get_message": ("get", "messages", ""),
        "search_messages": ("search", "messages", ""),
        "send_message": ("create", "outbox", "sent"),
        "save_draft": ("create", "drafts", "drafts"),
        "delete_message": ("delete", "messages", "deleted"),
    },
    "calendar": {
        "list_events": ("list", "events", ""),
        "get_event": ("get", "events", ""),
        "create_event": ("create", "events", "created_events"),
        "update_event": ("update", "events", "updated_events"),
        "delete_event": ("delete", "events", "deleted_events"),
    },
    "todo": {
        "list_tasks": ("list", "tasks", ""),
        "create_task": ("create", "tasks", "created_tasks"),
        "update_task": ("update", "tasks", "updated_tasks"),
        "delete_task": ("delete", "tasks", "deleted_tasks"),
    },
    "contacts": {
        "search_contacts": ("search", "contacts", ""),
        "get_contact": ("get", "contacts", ""),
        "update_contact": ("update", "contacts", "updated_contacts"),
    },
    "notes": {
        "list_notes": ("list", "notes", ""),
        "get_note": ("get", "notes", ""),
        "search_notes": ("search", "notes", ""),
        "create_note": ("create", "notes", "created_notes"),
        "update_note": ("update", "notes", "updated_notes"),
    },
    "web": {
        "search": ("search", "pages", ""),
        "fetch": ("get", "pages", ""),
    },
    "finance": {
        "list_accounts": ("list", "accounts", ""),
        "list_transactions": ("list", "transactions", ""),
        "create_transfer": ("create", "transfers", "transfers"),
        "create_invoice": ("create", "invoices", "invoices"),
    },
}
MAX_BODY = 1 << 20


class ServiceError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class Service:
    """One service's collections and audit."""

    def __init__(self, name: str, fixture: dict[str, Any]):
        self.name = name
        self.fixture = fixture
        self.lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        with self.lock:
            self.data: dict[str, list[dict[str, Any]]] = copy.deepcopy(
                {k: v for k, v in self.fixture.items() if isinstance(v, list)}
            )
            self.audit: dict[str, list[Any]] = {"calls": []}
            self.counter = 0

    def _find(self, collection: str, key: Any) -> dict[str, Any]:
        for item in self.data.setdefault(collection, []):
            if str(item.get("id")) == str(key) or (
                collection == "pages" and item.get("url") == key
            ):
                return item
        raise ServiceError(404, f"{self.name}: no {collection[:-1]} {key!r}")

    def act(self, action: str, body: dict[str, Any]) -> Any:
        kind, collection, audit_key = ACTIONS[self.name][action]
        items = self.data.setdefault(collection, [])
        if kind == "list":
            return [
                i
                for i in items
                if all(str(i.get(k)) == str(v) for k, v in body.items() if v not in (None, ""))
            ]
        if kind == "search":
            words = str(body.get("query") or "").lower().split()
            if not words:
                raise ServiceError(400, f"{self.name}.{action}: query is required")
            hits = [i for i in items if all(w in json.dumps(i).lower() for w in words)]
            return hits[: int(body.get("limit") or 10)]
        key = body.get("id") or body.get("url")
        if kind == "create":
            self.counter += 1
            item = {"id": f"{self.name}-new-{self.counter}", **body}
            items.append(item)
        elif kind == "get":
            if key is None:
                raise ServiceError(400, f"{self.name}.{action}: id is required")
            return self._find(collection, key)
        elif kind == "update":
            item = self._find(collection, key)
            item.update({k: v for k, v in body.items() if k != "id"})
        else:  # delete
            item = self._find(collection, key)
            items.remove(item)
        self.audit.setdefault(audit_key, []).append(copy.deepcopy(item))
        return item

    def call(self, action: str, body: dict[str, Any]) -> tuple[int, Any]:
        with self.lock:
            try:
                if action not in ACTIONS[self.name]:
                    raise ServiceError(404, f"{self.name} has no action {action!r}")
                status, result = 200, self.act(action, body)
            except ServiceError as e:
                status, result = e.status, {"error": str(e)}
            self.audit["calls"].append(
                {
                    "endpoint": f"/{self.name}/{action}",
                    "request_body": body,
                    "response_status": status,
                    "response_body": result,
                    "ts": time.time(),
                }
            )
            return status, result


class Handler(BaseHTTPRequestHandler):
    server_version = "pomona-mock"
    services: dict[str, Service] = {}
    token = ""

    def log_message(self, *args: Any) -> None:
        pass

    def _send(self, status: int, value: Any) -> None:
        data = json.dumps(value).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _admin(self) -> bool:
        return bool(self.token) and self.headers.get("X-Pomona-Admin") == self.token

    def _route(self) -> tuple[Service | None, str]:
        parts = self.path.split("?", 1)[0].strip("/").split("/")
        if len(parts) != 2 or parts[0] not in self.services:
            return None, ""
        return self.services[parts[0]], parts[1]

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self.path == "/health":
            return self._send(200, {"ok": True, "services": sorted(self.services)})
        service, action = self._route()
        if service is None or action != "audit":
            return self._send(404, {"error": f"no route GET {self.path}"})
        if not self._admin():
            return self._send(403, {"error": "the audit is for the grader"})
        with service.lock:
            return self._send(200, copy.deepcopy(service.audit))

    def do_POST(self) -> None:  # noqa: N802
        service, action = self._route()
        if service is None:
            return self._send(404, {"error": f"no service at {self.path}"})
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            return self._send(413, {"error": "request body too large"})
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
            if not isinstance(body, dict):
                raise ValueError("the body must be a JSON object")
        except ValueError as e:
            return self._send(400, {"error": f"bad JSON: {e}"})
        if action == "reset":
            if not self._admin():
                return self._send(403, {"error": "reset is for the grader"})
            service.reset()
            return self._send(200, {"ok": True})
        status, result = service.call(action, body)
        return self._send(status, result)


def load_services(fixtures: Path | None, names: list[str]) -> dict[str, Service]:
    out = {}
    for name in names:
        path = fixtures / f"{name}.json" if fixtures else None
        fixture = json.loads(path.read_text()) if path and path.is_file() else {}
        out[name] = Service(name, fixture)
    return out


def dump(port: int, token: str) -> dict[str, Any]:
    """Every service's audit, fetched as the grader (run as root inside the sandbox)."""
    base = f"http://127.0.0.1:{port}"
    with urllib.request.urlopen(f"{base}/health", timeout=10) as r:
        names = json.loads(r.read())["services"]
    out = {}
    for name in names:
        req = urllib.request.Request(f"{base}/{name}/audit", headers={"X-Pomona-Admin": token})
        with urllib.request.urlopen(req, timeout=10) as r:
            out[name] = json.loads(r.read())
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--port", type=int, default=9100)
    p.add_argument("--fixtures", type=Path)
    p.add_argument("--services", default=",".join(ACTIONS))
    p.add_argument("--token-file", type=Path, required=True)
    p.add_argument("--dump", action="store_true")
    args = p.parse_args(argv)
    token = args.token_file.read_text().strip()
    if args.dump:
        json.dump(dump(args.port, token), sys.stdout)
        return 0
    names = [n for n in args.services.split(",") if n]
    unknown = sorted(set(names) - set(ACTIONS))
    if unknown:
        p.error(f"unknown services {unknown}; known: {sorted(ACTIONS)}")
    Handler.services, Handler.token = load_services(args.fixtures, names), token
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    print(f"serving {','.join(names)} on 127.0.0.1:{args.port}", flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
