#!/usr/bin/env bash
# Builds BrowserGym (the comparison point of perf/browser_bench.py) in its own venv, cached in
# /var/cache/pomona: browsergym-core 0.14.3 pins playwright==1.44, which cannot share a venv
# with Pomona's newer Playwright. Prints the venv's python.
set -euo pipefail
venv=/var/cache/pomona/browsergym-venv
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import browsergym.miniwob" 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q browsergym-core==0.14.3 browsergym-miniwob==0.14.3 miniwob==1.1.0 \
    2> >(grep -v "is ignored: it is neither" >&2)
fi
echo "$venv/bin/python"
