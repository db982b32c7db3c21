import json
from pathlib import Path

EXPECTED = [
    {"sku": "A100", "name": "hex bolts", "qty": 40},
    {"sku": "A200", "name": "lock nuts", "qty": 23},
    {"sku": "B300", "name": "flat washers", "qty": 12},
    {"sku": "C400", "name": "door hinges", "qty": 2},
    {"sku": "D500", "name": "shelf brackets", "qty": 4},
]


def test_inventory_after_the_delivery():
    assert json.loads(Path("/app/inventory.json").read_text()) == EXPECTED


def test_low_stock_report():
    lines = Path("/app/reports/low_stock.txt").read_text().split()
    assert lines == ["C400", "D500"]
