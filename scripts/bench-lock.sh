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
    "$bin" workload --config "$work/cluster.toml" --node "$1" --clients 1 --requests "$requests" --no-witness --json |
        python3 -c "import json,sys
r=json.load(sys.stdin); floor=$rtt_per_s/$2
print(f'{\"coordinator\" if $1==5 else \"other node\":<12} {r[\"throughput_per_s\"]:>9.0f}/s  p50 {r[\"latency_ms\"][\"p50\"]*1000:>6.0f} us  floor {floor:>7.0f}/s  {r[\"throughput_per_s\"]/floor:>5.0%} of floor')"
}
echo "loopback round trip between two processes: ${rtt_us} us (${rtt_per_s}/s)"
echo "one client, acquire + release, centralized, 5 nodes, $requests entries:"
run 5 2
run 1 3
