#!/usr/bin/env bash
# Every test: the workspace's unit, simulator, node and CLI tests, then the
# docker compose end-to-end test when a Docker engine answers.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo test --workspace --release

if docker info >/dev/null 2>&1; then
    scripts/docker-e2e.sh
else
    echo "docker-e2e: skipped (no Docker engine answers)"
fi
