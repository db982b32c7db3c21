#!/bin/bash
# The agent's side holds nothing of its own: the tickets live in the `api` service.
set -e
