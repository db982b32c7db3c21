import json
from pathlib import Path

EXPECTED = [
    {"sku": "A100", "name": "hex bolts", "qty": 40},
    {"sku": "A200", "name": "lock nuts", "qty": 3},
    {"sku": "B300", "name": "flat washers", "qty": 12},
    {"sku": "C400", "name": "door hinges", "qty": 0},
]


def test_inventory_json():
    assert json.loads(Path("/app/inventory.json").read_text()) == EXPECTED
