#!/usr/bin/env bash
# What TLS costs, path by path: two 3-node ricart-agrawala clusters run at
# once on loopback, one with a shared secret (the HMAC handshake, then
# plain TCP), one from `coterie init --tls` (TLS on every port), and the
# same commands against each in turn, A B A B, RUNS pairs:
#   cycles  `coterie workload --clients 2 --requests 1500 --no-witness`
#           (9,000 chained lock cycles through the client and peer ports)
#   https   `coterie workload --http --clients 2 --requests 500 --no-witness`
#           (3,000 cycles over the HTTP API, two requests each)
#   connect `coterie lock --try jobs -- true` (a process: connect,
#           handshake, lock, release)
# Prints, per path, the median wall time of each side and the median and
# range of the pair-by-pair ratio TLS / secret.
#
# Usage: scripts/bench-tls.sh [RUNS]        (default 9)
# Environment: COTERIE_BIN (default target/release/coterie, built if absent)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RUNS="${1:-9}"
BIN="${COTERIE_BIN:-$ROOT/target/release/coterie}"
[ -x "$BIN" ] || (cd "$ROOT" && cargo build --release -p coterie --bin coterie)
TMP="$(mktemp -d "${TMPDIR:-/tmp}/coterie-bench-tls.XXXXXX")"
PIDS=()
cleanup() {
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$TMP"
}
trap cleanup EXIT

mkdir -p "$TMP/secret" "$TMP/tls"
echo "a secret for the measurement" >"$TMP/secret/secret"
common=(--nodes 3 --mutex ricart-agrawala --free-ports --http --no-state-dir)
"$BIN" init "${common[@]}" --set security.secret_file=secret --set security.api_token_file=tokens \
    -o "$TMP/secret/cluster.toml"
echo "token" >"$TMP/secret/tokens"
"$BIN" init "${common[@]}" --tls -o "$TMP/tls/cluster.toml"
for side in secret tls; do
    "$BIN" up --config "$TMP/$side/cluster.toml" >"$TMP/$side/up.log" 2>&1 &
    PIDS+=($!)
done
for side in secret tls; do
    for _ in $(seq 100); do
        "$BIN" lock --config "$TMP/$side/cluster.toml" --try warmup -- true 2>/dev/null && break
        sleep 0.1
    done
done

# seconds CMD...: the command's wall time, in seconds (bash's clock).
seconds() {
    local start="$EPOCHREALTIME"
    "$@" >/dev/null 2>&1
    local end="$EPOCHREALTIME"
    python3 -c "print($end - $start)"
}

declare -A ARGS=(
    [cycles]="workload --clients 2 --requests 1500 --no-witness"
    [https]="workload --http --clients 2 --requests 500 --no-witness"
    [connect]="lock --node 1 --try jobs -- true"
)
export COTERIE_TOKEN=token
for path in cycles https connect; do
    read -r -a args <<<"${ARGS[$path]}"
    : >"$TMP/$path.times"
    for _ in $(seq "$RUNS"); do
        a="$(seconds "$BIN" "${args[0]}" --config "$TMP/secret/cluster.toml" "${args[@]:1}")"
        b="$(seconds "$BIN" "${args[0]}" --config "$TMP/tls/cluster.toml" "${args[@]:1}")"
        echo "$a $b" >>"$TMP/$path.times"
    done
    python3 - "$path" "$TMP/$path.times" <<'EOF'
import statistics, sys
path, file = sys.argv[1], sys.argv[2]
pairs = [tuple(map(float, line.split())) for line in open(file) if line.strip()]
secret, tls = [p[0] for p in pairs], [p[1] for p in pairs]
ratios = sorted(t / s for s, t in pairs)
print(f"{path:8} secret {statistics.median(secret) * 1000:8.1f} ms   "
      f"tls {statistics.median(tls) * 1000:8.1f} ms   "
      f"tls/secret x{statistics.median(ratios):.2f} ({ratios[0]:.2f}-{ratios[-1]:.2f}), "
      f"{len(pairs)} pairs")
EOF
done
