#!/usr/bin/env bash
# Every test: the workspace's unit, simulator, node and CLI tests, the
# dashboard in a real browser (Chromium installed when missing), then the
# docker compose end-to-end test when a Docker engine answers. Ends with one
# line that counts them all.
set -euo pipefail
cd "$(dirname "$0")/.."

log="$(mktemp)"
trap 'rm -f "$log"' EXIT

sudo_() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo -n "$@"; fi; }
# libfaketime for the nemesis's clock faults (Debian's package).
if [ ! -e /usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing faketime for the nemesis's clock faults"
    sudo_ apt-get install -y -q faketime >/dev/null 2>&1 \
        || { sudo_ apt-get update -q >/dev/null 2>&1 && sudo_ apt-get install -y -q faketime >/dev/null 2>&1; } \
        || echo "could not install faketime: the nemesis runs without clock faults"
fi

cargo test --workspace --release 2>&1 | tee "$log"
count() { grep -oE "test result: [a-zA-Z]+\. [0-9]+ passed; [0-9]+ failed" "$log" | awk -v f="$1" '{ s += $f } END { print s + 0 }'; }
passed="$(count 4)"
failed="$(count 6)"

# The dashboard in a real browser: headless Chromium, installed here when
# it is missing (Debian's package).
browser() { command -v chromium || command -v chromium-browser || command -v google-chrome; }
if ! browser >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
    echo "installing chromium for the dashboard's browser test"
    sudo_ apt-get install -y -q chromium >/dev/null 2>&1 \
        || { sudo_ apt-get update -q >/dev/null 2>&1 && sudo_ apt-get install -y -q chromium >/dev/null 2>&1; } \
        || echo "could not install chromium"
fi
if browser >/dev/null 2>&1; then
    if python3 scripts/browser-test.py --bin target/release/coterie; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1))
    fi
else
    echo "browser test: FAILED: no Chromium, and it could not be installed"
    failed=$((failed + 1))
fi

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
