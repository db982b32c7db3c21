"""The mock services as a real HTTP server: seeded fixtures, actions, the audit, the admin
token that keeps the audit and reset from the agent, and bad input answered with a status."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer

import httpx
import pytest

from pomona.benchmarks.claw.sandbox import services

TOKEN = "grader-secret"


@pytest.fixture
def hub() -> Iterator[str]:
    fixtures = {
        "mail": {"messages": [{"id": "m1", "from": "a@x.example", "subject": "Hi"}]},
        "web": {"pages": [{"id": "w1", "url": "https://kb/p", "text": "Lisbon tiles"}]},
    }

    class Handler(services.Handler):
        pass

    Handler.services = {n: services.Service(n, fixtures.get(n, {})) for n in services.ACTIONS}
    Handler.token = TOKEN
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_actions_change_state_and_every_call_is_audited(hub):
    assert httpx.post(f"{hub}/mail/get_message", json={"id": "m1"}).json()["subject"] == "Hi"
    sent = httpx.post(f"{hub}/mail/send_message", json={"to": "b@x.example", "body": "yo"})
    assert sent.status_code == 200 and sent.json()["id"].startswith("mail-new-")
    assert httpx.post(f"{hub}/mail/get_message", json={"id": "nope"}).status_code == 404
    assert (
        httpx.post(f"{hub}/web/search", json={"query": "lisbon"}).json()[0]["url"] == "https://kb/p"
    )
    audit = httpx.get(f"{hub}/mail/audit", headers={"X-Pomona-Admin": TOKEN}).json()
    assert [c["response_status"] for c in audit["calls"]] == [200, 200, 404]
    assert audit["sent"] == [{"id": sent.json()["id"], "to": "b@x.example", "body": "yo"}]


def test_the_agent_cannot_read_the_audit_or_reset(hub):
    assert httpx.get(f"{hub}/mail/audit").status_code == 403
    assert httpx.get(f"{hub}/mail/audit", headers={"X-Pomona-Admin": "guess"}).status_code == 403
    assert httpx.post(f"{hub}/mail/reset").status_code == 403
    httpx.post(f"{hub}/mail/send_message", json={"to": "b@x.example"})
    assert httpx.post(f"{hub}/mail/reset", headers={"X-Pomona-Admin": TOKEN}).status_code == 200
    audit = httpx.get(f"{hub}/mail/audit", headers={"X-Pomona-Admin": TOKEN}).json()
    assert audit == {"calls": []}


def test_bad_input_gets_a_status_not_a_crash(hub):
    assert httpx.post(f"{hub}/mail/send_message", content=b"{not json").status_code == 400
    assert httpx.post(f"{hub}/mail/send_message", content=b"[1, 2]").status_code == 400
    assert httpx.post(f"{hub}/mail/no_such_action", json={}).status_code == 404
    assert httpx.post(f"{hub}/nothing/here", json={}).status_code == 404
    assert httpx.post(f"{hub}/web/search", json={}).status_code == 400
    big = httpx.post(f"{hub}/mail/send_message", content=b"x" * (services.MAX_BODY + 1))
    assert big.status_code == 413
    assert httpx.get(f"{hub}/health").json()["ok"] is True


def test_unknown_services_are_refused_at_start(tmp_path):
    token = tmp_path / "t"
    token.write_text("x")
    with pytest.raises(SystemExit):
        services.main(["--token-file", str(token), "--services", "mail,bank"])
    assert json.loads(json.dumps(services.ACTIONS["finance"]["create_transfer"])) == [
        "create",
        "transfers",
        "transfers",
    ]
