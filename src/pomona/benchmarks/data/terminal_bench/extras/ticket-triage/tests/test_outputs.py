import json
from pathlib import Path

LOW = [101, 103, 105]


def test_only_the_low_priority_tickets_are_closed():
    tickets = json.loads(Path("/srv/api/export.json").read_text())
    closed = sorted(t["id"] for t in tickets if t["status"] == "closed")
    assert closed == LOW


def test_the_report_lists_them():
    assert Path("/app/closed.txt").read_text().split() == [str(i) for i in LOW]
