#!/usr/bin/env bash
# Every test: the workspace's unit, simulator, node and CLI tests, then the
# docker compose end-to-end test when a Docker engine answers. Ends with one
# line that counts them all.
set -euo pipefail
cd "$(dirname "$0")/.."

log="$(mktemp)"
trap 'rm -f "$log"' EXIT

cargo test --workspace --release 2>&1 | tee "$log"
count() { grep -oE "test result: [a-zA-Z]+\. [0-9]+ passed; [0-9]+ failed" "$log" | awk -v f="$1" '{ s += $f } END { print s + 0 }'; }
passed="$(count 4)"
failed="$(count 6)"

if docker info >/dev/null 2>&1; then
    if scripts/docker-e2e.sh; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1))
    fi
else
    echo "docker-e2e: skipped (no Docker engine answers)"
fi

echo
echo "tests: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
