#!/usr/bin/env bash
# Builds LiteLLM's own proxy (the comparison point of perf/proxy_bench.py) in its own venv,
# cached in /var/cache/pomona. `litellm[proxy]` 1.110.2 cannot be installed from the registry
# reachable here (it needs a `litellm-proxy` package that is not there), so this installs
# litellm itself plus the modules its proxy imports.
set -euo pipefail
venv=/var/cache/pomona/litellm-proxy-venv
if [ ! -x "$venv/bin/litellm" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q litellm==1.110.2 websockets uvicorn fastapi backoff orjson \
    python-multipart redis apscheduler PyJWT cryptography semver expression fastapi_sso mcp \
    soundfile uvloop 2> >(grep -v "is ignored: it is neither" >&2)
fi
echo "$venv/bin/litellm"
