import csv
from collections import defaultdict
from decimal import Decimal
from pathlib import Path


def expected():
    totals = defaultdict(Decimal)
    with open("/app/sales.csv") as f:
        for row in csv.DictReader(f):
            totals[row["region"]] += Decimal(row["amount"])
    return [[r, f"{t:.2f}"] for r, t in sorted(totals.items(), key=lambda kv: -kv[1])]


def test_totals():
    rows = list(csv.reader(Path("/app/totals.csv").read_text().splitlines()))
    assert rows[0] == ["region", "total"]
    assert rows[1:] == expected()
