#!/bin/bash
set -e
export GIT_AUTHOR_NAME=dev GIT_AUTHOR_EMAIL=dev@example.invalid GIT_COMMITTER_NAME=dev GIT_COMMITTER_EMAIL=dev@example.invalid
mkdir -p project && cd project
git init -q -b main
git config user.name dev && git config user.email dev@example.invalid
mkdir -p config src
printf '[db]\nuser = app\n' > config/credentials.ini
echo 'print("v1")' > src/app.py
git add -A && git commit -qm "initial"
printf '[db]\nuser = app\npassword = hunter2\nport = 5433\n' > config/credentials.ini
git commit -qam "rotate credentials"
echo 'print("v2")' > src/app.py
git commit -qam "v2"
git rm -q config/credentials.ini && git commit -qm "cleanup"
echo 'print("v3")' > src/app.py
git commit -qam "v3"
