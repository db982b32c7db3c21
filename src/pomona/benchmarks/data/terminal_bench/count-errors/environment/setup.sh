#!/bin/bash
set -e
mkdir -p logs
python3 - <<'PY'
import random
random.seed(7)
levels = ["INFO", "DEBUG", "WARN", "ERROR", "ERRORS", "error"]
for service, n in [("api", 120), ("db", 80), ("worker", 60), ("cache", 30)]:
    with open(f"logs/{service}.log", "w") as f:
        for i in range(n):
            level = random.choice(levels) if service != "cache" else "INFO"
            f.write(f"2026-01-01T10:{i // 60:02d}:{i % 60:02d} {level} event {i}\n")
PY
