#!/bin/bash
cd /app
python3 - <<'PY'
import json
import re

words = re.findall(r"[a-z']+", open("book.txt").read().lower())
queries = [q.strip() for q in open("queries.txt") if q.strip()]
json.dump({q: words.count(q) for q in queries}, open("counts.json", "w"))
PY
