#!/bin/sh
# Pomona's witness around node, installed in a verifier sandbox in place of the image's `node`
# (the binary is kept beside it as node.pomona-real). Any run that is not `node --test` is the
# binary's own. A `node --test` run gets Pomona's reporter (node_witness.mjs) before its own
# reporters, each paired with the destination node would have given it, and every process of
# the run preloads the guard (node_guard.mjs). See pomona/benchmarks/verification/witness.py.
real="$(dirname "$0")/node.pomona-real"
here=/run/pomona-witness
testing=0 reporters=0 destinations=0
for arg in "$@"; do
  case "$arg" in
    --test|--test=*) testing=1 ;;
    --test-reporter|--test-reporter=*) reporters=$((reporters + 1)) ;;
    --test-reporter-destination|--test-reporter-destination=*) destinations=$((destinations + 1)) ;;
    -*) ;;
    *) break ;;
  esac
done
if [ "$testing" = 0 ]; then
  exec "$real" "$@"
fi
if [ "$reporters" = 0 ]; then
  set -- --test-reporter=spec --test-reporter-destination=stdout "$@"
elif [ "$reporters" = 1 ] && [ "$destinations" = 0 ]; then
  set -- --test-reporter-destination=stdout "$@"
fi
export NODE_OPTIONS="--import=$here/node_guard.mjs${NODE_OPTIONS:+ $NODE_OPTIONS}"
exec "$real" --test-reporter="$here/node_witness.mjs" --test-reporter-destination=stderr "$@"
