"""The ticket service: a small JSON API over HTTP, its state in /srv/api/state.json.

    GET  /health                 200 once it serves
    GET  /tickets                every ticket: [{"id", "title", "priority", "status"}]
    POST /tickets/<id>/close     close one ticket
"""

import json
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

STATE = Path("/srv/api/state.json")
TICKETS = [
    {"id": 101, "title": "Typo on the login page", "priority": "low"},
    {"id": 102, "title": "Checkout fails for saved cards", "priority": "high"},
    {"id": 103, "title": "Footer logo is blurry", "priority": "low"},
    {"id": 104, "title": "Password reset mail is late", "priority": "medium"},
    {"id": 105, "title": "Dark mode colours are off", "priority": "low"},
]


def load():
    if not STATE.exists():
        STATE.write_text(json.dumps([dict(t, status="open") for t in TICKETS]))
    return json.loads(STATE.read_text())


class Handler(BaseHTTPRequestHandler):
    def reply(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/health":
            self.reply(200, {"ok": True})
        elif self.path == "/tickets":
            self.reply(200, load())
        else:
            self.reply(404, {"error": "not found"})

    def do_POST(self):
        parts = self.path.strip("/").split("/")
        if len(parts) != 3 or parts[0] != "tickets" or parts[2] != "close":
            return self.reply(404, {"error": "not found"})
        tickets = load()
        for ticket in tickets:
            if str(ticket["id"]) == parts[1]:
                ticket["status"] = "closed"
                STATE.write_text(json.dumps(tickets))
                return self.reply(200, ticket)
        self.reply(404, {"error": f"no ticket {parts[1]}"})

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    load()
    ThreadingHTTPServer(("0.0.0.0", 8080), Handler).serve_forever()
