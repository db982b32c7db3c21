#!/bin/bash
# The answer key lives on a grading service. Without it there is no verdict: exit before
# writing a reward (the trial errors) rather than score the agent 0.
set -e
python3 - <<'PY'
import os
import urllib.request

url = os.environ.get("ANSWER_KEY_URL", "")
if not url:
    raise SystemExit("ANSWER_KEY_URL is not set: no grading service to ask")
with urllib.request.urlopen(url, timeout=30) as response:
    open("/tmp/answer-key.json", "wb").write(response.read())
PY
set +e
python3 -m pytest /tests/test_outputs.py -rA -p no:cacheprovider
if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
