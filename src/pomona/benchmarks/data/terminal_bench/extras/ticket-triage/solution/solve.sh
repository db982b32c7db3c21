#!/bin/bash
cd /app
python3 - <<'PY'
import json
import urllib.request

tickets = json.load(urllib.request.urlopen("http://api:8080/tickets", timeout=30))
low = sorted(t["id"] for t in tickets if t["priority"] == "low" and t["status"] == "open")
for ticket in low:
    request = urllib.request.Request(f"http://api:8080/tickets/{ticket}/close", method="POST")
    urllib.request.urlopen(request, timeout=30).read()
with open("closed.txt", "w") as f:
    f.writelines(f"{t}\n" for t in low)
PY
