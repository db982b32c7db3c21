#!/bin/bash
set -e
cd /app/project
commit=$(git rev-list -n 1 HEAD -- config/credentials.ini)
git checkout "$commit^" -- config/credentials.ini
git commit -qm "restore config/credentials.ini"
