#!/bin/bash
cd /app
python3 - <<'PY'
import csv
import json

items = json.load(open("inventory.json"))
by_sku = {item["sku"]: item for item in items}
with open("deliveries.csv") as f:
    for row in csv.DictReader(f):
        if row["sku"] in by_sku:
            by_sku[row["sku"]]["qty"] += int(row["qty"])
        else:
            item = {"sku": row["sku"], "name": row["name"], "qty": int(row["qty"])}
            items.append(item)
            by_sku[item["sku"]] = item
json.dump(items, open("inventory.json", "w"), indent=2)
with open("reports/low_stock.txt", "w") as f:
    f.writelines(item["sku"] + "\n" for item in items if item["qty"] < 5)
PY
