#!/bin/bash
cd /app
python3 - <<'PY'
import csv
import json

with open("inventory.csv") as f:
    rows = [{"sku": r["sku"], "name": r["name"], "qty": int(r["qty"])} for r in csv.DictReader(f)]
with open("inventory.json", "w") as f:
    json.dump(rows, f, indent=2)
PY
