#!/bin/bash
# Offline verifier writing harbor's reward.json (a flat {name: number} map).
if python3 -m pytest /tests/test_outputs.py -rA -p no:cacheprovider; then r=1; else r=0; fi
printf '{"reward": %s}\n' "$r" > /logs/verifier/reward.json
