#!/usr/bin/env bash
# How fast one client can acquire and release the lock, next to the floor
# this machine sets: a bare TCP round trip between two processes.
#
# An entry at the coordinator costs 2 client round trips (acquire, release);
# at another node 3 (client -> node -> coordinator and back, then release).
# The script starts a 5-node centralized cluster on free local ports, runs
# one client with no witness at the coordinator and at another node, and
# prints throughput, p50 latency and the share of the floor reached.
#
# Usage: scripts/bench-lock.sh [REQUESTS]   (default 30000 per run)
set -euo pipefail
cd "$(dirname "$0")/.."
requests="${1:-30000}"

cargo build --release -q
bin=target/release/coterie
work="$(mktemp -d)"
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT

cc -O2 -o "$work/pingpong" scripts/bench/pingpong.c
read -r rtt_per_s rtt_us < <("$work/pingpong" 50000)

source scripts/bench/cluster.sh
write_cluster "$work/cluster.toml" centralized
start_cluster "$bin" "$work/cluster.toml" "$work/up.log"

run() { # node, round trips per entry
    "$bin" workload --config "$work/cluster.toml" --node "$1" --clients 1 --requests "$requests" --no-chain --no-witness --json |
        jq -r --argjson floor "$(jq -n "$rtt_per_s / $2")" --arg where "$([ "$1" = 5 ] && echo coordinator || echo "other node")" \
            '"\($where)\t\(.throughput_per_s | round)/s\tp50 \(.latency_ms.p50 * 1000 | round) us\tfloor \($floor | round)/s\t\(.throughput_per_s / $floor * 100 | round)% of floor"'
}
echo "loopback round trip between two processes: ${rtt_us} us (${rtt_per_s}/s)"
echo "one client, acquire + release, centralized, 5 nodes, $requests entries:"
run 5 2
run 1 3
