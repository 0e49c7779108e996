#!/usr/bin/env bash
# Every test: the workspace's unit, simulator, node and CLI tests, the
# dashboard in a real browser (Chromium installed when missing), then the
# docker compose end-to-end test when a Docker engine answers. Ends with one
# line that counts them all.
set -euo pipefail
cd "$(dirname "$0")/.."

log="$(mktemp)"
trap 'rm -f "$log" "$log.book"' EXIT

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

# The workspace's tests, under cargo-nextest (each test a process of its
# own, tests of different binaries side by side, each one timed; see
# .config/nextest.toml), built with the `ci` profile: the release profile
# without whole-program LTO (Cargo.toml). COTERIE_DEEP=1 runs the deep
# sizes instead of CI's (docs/src/testing.md).
profile=ci
bin="$PWD/target/$profile/coterie"
junit=(target/nextest/default/junit.xml target/nextest/tls/junit.xml)
rm -f "${junit[@]}"
nextest() { PATH="$PWD/$venv/bin:$PATH" cargo nextest "$@"; }
built=0
nextest run --workspace --cargo-profile "$profile" || true
[ -e "${junit[0]}" ] || { echo "the tests did not build"; built=1; }
# The node's in-process cluster suite and the CLI and HTTP suites again,
# every cluster over TLS (the tests that speak the plain wire by hand, or
# test the secret itself, skip themselves): built already, the same
# workspace and profile.
echo "== the node's cluster suite and the CLI and HTTP suites over TLS (COTERIE_TEST_TLS=1)"
COTERIE_TEST_TLS=1 nextest run --workspace --cargo-profile "$profile" --profile tls \
    -E 'binary(=cluster) | binary(=cli) | binary(=http)' || true
[ -e "${junit[1]}" ] || { echo "the TLS run did not start"; built=1; }
# The doc tests, which nextest does not run.
doc_status=0
cargo test --workspace --profile "$profile" --doc 2>&1 | tee "$log" || doc_status=1
doc() { grep -oE "test result: [a-zA-Z]+\. [0-9]+ passed; [0-9]+ failed" "$log" | awk -v f="$1" '{ s += $f } END { print s + 0 }'; }
read -r passed failed < <(python3 scripts/junit-summary.py --counts "${junit[@]}")
passed=$((passed + $(doc 4)))
doc_failed="$(doc 6)"
[ "$doc_status" -eq 0 ] || [ "$doc_failed" -gt 0 ] || doc_failed=1
failed=$((failed + doc_failed + built))
others=()

# The guide, built as a book: a page missing from SUMMARY.md's list, or a
# list entry with no page, fails (docs/book.toml: create-missing = false).
if "$venv/bin/mdbook" build docs -d "$PWD/target/book" >"$log.book" 2>&1; then
    passed=$((passed + 1))
else
    cat "$log.book"
    failed=$((failed + 1)); others+=("mdbook build docs")
fi

# The dashboard in a real browser: headless Chromium driven by selenium
# through chromedriver, both Debian's, installed here when missing.
browser() { command -v chromium || command -v chromium-browser || command -v google-chrome; }
if ! browser >/dev/null 2>&1; then
    install_deb chromium /usr/bin/chromium "the dashboard's browser test"
fi
install_deb chromium-driver /usr/bin/chromedriver "the dashboard's browser test"
if browser >/dev/null 2>&1; then
    if "$venv/bin/python" scripts/browser-test.py --bin "$bin"; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1)); others+=("scripts/browser-test.py")
    fi
else
    echo "browser test: FAILED: no Chromium, and it could not be installed"
    failed=$((failed + 1)); others+=("scripts/browser-test.py (no Chromium)")
fi

if docker info >/dev/null 2>&1; then
    if COTERIE_BIN="$bin" scripts/docker-e2e.sh; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1)); others+=("scripts/docker-e2e.sh")
    fi
else
    echo "docker-e2e: skipped (no Docker engine answers)"
fi

echo
echo "the slowest tests:"
python3 scripts/junit-summary.py --slowest 15 "${junit[@]}"
if [ "$failed" -gt 0 ]; then
    echo "failed:"
    python3 scripts/junit-summary.py --failed "${junit[@]}"
    [ "$built" -eq 0 ] || echo "  the build"
    [ "$doc_failed" -eq 0 ] || echo "  the doc tests (cargo test --doc)"
    for other in "${others[@]}"; do echo "  $other"; done
fi
echo "tests: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
