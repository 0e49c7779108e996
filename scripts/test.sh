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
# Installs Debian package $1 unless file $2 exists; $3 says what for.
install_deb() {
    [ -e "$2" ] || ! command -v apt-get >/dev/null 2>&1 && return 0
    echo "installing $1 for $3"
    sudo_ apt-get install -y -q "$1" >/dev/null 2>&1 \
        || { sudo_ apt-get update -q >/dev/null 2>&1 && sudo_ apt-get install -y -q "$1" >/dev/null 2>&1; } \
        || echo "could not install $1"
}
# libfaketime for the nemesis's clock faults (without it the nemesis runs
# without them); Prometheus, which scrapes a cluster's /metrics in a test.
install_deb faketime /usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1 "the nemesis's clock faults"
install_deb prometheus /usr/bin/prometheus "the metrics test"
# jq, which the guide's examples use (crates/coterie/tests/docs.rs runs them).
install_deb jq /usr/bin/jq "the guide's examples"
# Python packages (schemathesis, for the OpenAPI test) in a virtual
# environment of the project's own, made again when the list changes.
venv=target/py
if ! cmp -s scripts/requirements.txt "$venv/requirements.txt"; then
    echo "installing Python packages into $venv for the API's tests"
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q -r scripts/requirements.txt
    cp scripts/requirements.txt "$venv/requirements.txt"
fi

cargo test --workspace --release 2>&1 | tee "$log"
# The node's in-process cluster suite and the CLI and HTTP suites again,
# every cluster over TLS (the tests that speak the plain wire by hand, or
# test the secret itself, skip themselves).
echo "== the node's cluster suite and the CLI and HTTP suites over TLS (COTERIE_TEST_TLS=1)"
COTERIE_TEST_TLS=1 cargo test --release -p coterie-node --test cluster 2>&1 | tee -a "$log"
COTERIE_TEST_TLS=1 cargo test --release -p coterie --test cli --test http 2>&1 | tee -a "$log"
count() { grep -oE "test result: [a-zA-Z]+\. [0-9]+ passed; [0-9]+ failed" "$log" | awk -v f="$1" '{ s += $f } END { print s + 0 }'; }
passed="$(count 4)"
failed="$(count 6)"

# The dashboard in a real browser: headless Chromium driven by selenium
# through chromedriver, both Debian's, installed here when missing.
browser() { command -v chromium || command -v chromium-browser || command -v google-chrome; }
if ! browser >/dev/null 2>&1; then
    install_deb chromium /usr/bin/chromium "the dashboard's browser test"
fi
install_deb chromium-driver /usr/bin/chromedriver "the dashboard's browser test"
if browser >/dev/null 2>&1; then
    if "$venv/bin/python" scripts/browser-test.py --bin target/release/coterie; then
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
