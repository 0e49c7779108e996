#!/usr/bin/env bash
# What connection resets cost when the sessions hide them: a 5-node cluster
# on free local ports, two clients per node through the witness for 8 s,
# once quietly and once while node 5 (the coordinator) has its peer
# connections broken every 300 ms for 6 s (`coterie fault reset --every
# 300ms --for 6s`). Prints entries/s, latency p50/p99/max, unanswered
# requests and the witness's verdict for each run, side by side.
#
# Usage: scripts/bench-resets.sh [MUTEX ...]   (default: ricart-agrawala maekawa)
set -euo pipefail
cd "$(dirname "$0")/.."
mutexes=("$@")
[ ${#mutexes[@]} -gt 0 ] || mutexes=(ricart-agrawala maekawa)

cargo build --release -q
bin=target/release/coterie
source scripts/bench/cluster.sh
work="$(mktemp -d "${TMPDIR:-/tmp}/coterie-bench-resets.XXXXXX")"
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT

one_run() { # mutex, resets: yes|no
    local mutex="$1" resets="$2" dir="$work/$1-$2"
    mkdir -p "$dir"
    local witness_port
    witness_port="$(free_ports 1)"
    write_cluster "$dir/cluster.toml" "$mutex" --witness "127.0.0.1:$witness_port"
    "$bin" witness --listen "127.0.0.1:$witness_port" 2>"$dir/witness.log" &
    local witness=$!
    start_cluster "$bin" "$dir/cluster.toml" "$dir/up.log"
    local up=$CLUSTER_PID
    local fault=""
    if [ "$resets" = yes ]; then
        (sleep 1 && "$bin" fault --config "$dir/cluster.toml" --node 5 reset --every 300ms --for 6s \
            >"$dir/fault.log" 2>&1) &
        fault=$!
    fi
    "$bin" workload --config "$dir/cluster.toml" --clients 2 --requests 100000000 --duration 8s --json |
        jq -r --arg what "$mutex, $([ "$resets" = yes ] && echo 'node 5 reset every 300 ms for 6 s' || echo 'no fault')" \
            '"\($what)\t\(.throughput_per_s | round)/s\tp50 \(.latency_ms.p50) ms\tp99 \(.latency_ms.p99) ms\tmax \(.latency_ms.max) ms\tunanswered \(.unanswered // 0)\tviolations \(.violations)\tstale \(.stale_fences)"'
    [ -z "$fault" ] || wait "$fault" || echo "  (coterie fault reset failed: $(tail -n 1 "$dir/fault.log"))"
    [ -z "$fault" ] || echo "  $(grep -h 'reset' "$dir/fault.log" | head -n 1)"
    kill "$up" "$witness" 2>/dev/null || true
    wait "$up" "$witness" 2>/dev/null || true
}

for mutex in "${mutexes[@]}"; do
    one_run "$mutex" no
    one_run "$mutex" yes
done
