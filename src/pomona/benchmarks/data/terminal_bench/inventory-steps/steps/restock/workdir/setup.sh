#!/bin/bash
# runs in the workdir, as the agent's user, before the step begins
set -e
mkdir -p reports
