#!/bin/bash
cd /app
python3 - <<'PY'
import json
from pathlib import Path
counts = {p.stem: sum(1 for l in p.read_text().splitlines() if l.split(" ")[1:2] == ["ERROR"])
          for p in Path("logs").glob("*.log")}
Path("report.json").write_text(json.dumps(counts, indent=2))
PY
