#!/usr/bin/env bash
# Build Pomona's two images with the local Docker engine:
#   pomona/pomona:TAG  the orchestrator, the proxy and the in-pod gate (deploy/Dockerfile)
#   pomona/tools:TAG   the harness payload (deploy/tools.Dockerfile), if TOOLS_DIR exists
# Usage: deploy/build-images.sh [TAG]   env: BASE (a Debian 12 image), TOOLS_DIR, PUSH=registry/prefix,
#   CA_BUNDLE (a CA bundle pip inside the build must trust: a TLS-intercepting proxy's)
# The build context holds only what the image needs (pyproject.toml, README.md, src/), staged in
# a temporary directory so a checkout's .venv and caches never travel to the engine.
set -euo pipefail
cd "$(dirname "$0")/.."
tag=${1:-latest}
base=${BASE:-debian:bookworm-slim}
tools=${TOOLS_DIR:-/var/cache/pomona/tools}
context=$(mktemp -d)
trap 'rm -rf "$context"' EXIT
cp pyproject.toml README.md "$context"/
if [ -n "${CA_BUNDLE:-}" ]; then cp "$CA_BUNDLE" "$context/ca-bundle.crt"; else : > "$context/ca-bundle.crt"; fi
# pin what the checkout's tested environment resolved (none: pip resolves from the index)
if [ -x .venv/bin/pip ]; then
  .venv/bin/pip freeze --exclude-editable 2>/dev/null | grep -v -e '^-e ' -e ' @ ' > "$context/constraints.txt"
else
  : > "$context/constraints.txt"
fi
cp -r src "$context"/src
find "$context" -name __pycache__ -prune -exec rm -rf {} +
docker build -q -f deploy/Dockerfile --build-arg BASE="$base" -t "pomona/pomona:$tag" "$context"
if [ -d "$tools" ]; then
  docker build -q -f deploy/tools.Dockerfile -t "pomona/tools:$tag" "$tools"
fi
if [ -n "${PUSH:-}" ]; then
  for image in pomona tools; do
    docker image inspect "pomona/$image:$tag" >/dev/null 2>&1 || continue
    docker tag "pomona/$image:$tag" "$PUSH/$image:$tag" && docker push "$PUSH/$image:$tag"
  done
fi
