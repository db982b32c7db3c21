#!/bin/bash
cd /app
python3 - <<'PY'
import csv
from collections import defaultdict
from decimal import Decimal
totals = defaultdict(Decimal)
with open("sales.csv") as f:
    for row in csv.DictReader(f):
        totals[row["region"]] += Decimal(row["amount"])
with open("totals.csv", "w") as f:
    f.write("region,total\n")
    for region, total in sorted(totals.items(), key=lambda kv: -kv[1]):
        f.write(f"{region},{total:.2f}\n")
PY
