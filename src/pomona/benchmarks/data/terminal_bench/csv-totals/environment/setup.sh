#!/bin/bash
set -e
python3 - <<'PY'
import random
random.seed(11)
regions = ["north", "south", "east", "west", "central"]
with open("sales.csv", "w") as f:
    f.write("date,region,product,amount\n")
    for i in range(400):
        f.write(f"2026-02-{i % 28 + 1:02d},{random.choice(regions)},p{random.randint(1, 9)},"
                f"{random.randint(100, 99999) / 100:.2f}\n")
PY
