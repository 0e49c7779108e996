#!/usr/bin/env bash
# What a node's message events cost: the lock's throughput from one client
# at n1 of a 5-node centralized cluster whose coordinator is n5 (so each
# entry is 3 messages: REQUEST, GRANT, RELEASE; no witness), for
#   base      a binary built from BASE (default: the commit before nodes
#             could report their messages to a watcher),
#   head      this tree, nobody watching,
#   watch     this tree, `coterie watch` on every node (events only),
#   messages  this tree, `coterie watch --diagram` (every message sent
#             and delivered, streamed to the watcher).
# The four are measured in turn, ROUNDS times, in one run; it prints each
# one's median and its ratio to base.
#
# Usage: scripts/bench-watch-cost.sh [ROUNDS] [REQUESTS] [BASE]
#        (default 5 rounds, 20000 entries per measurement, BASE 12d41eb^)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-5}"
requests="${2:-20000}"
base="${3:-12d41eb^}"
root="$PWD"
work="$(mktemp -d)"
cleanup() {
    kill $(jobs -p) 2>/dev/null || true
    wait 2>/dev/null || true
    git -C "$root" worktree remove --force "$work/base" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

# The base is built into a target/ of its own (target/baseline, kept for
# the next run): cargo names a workspace crate's artifacts without its
# path, so two trees sharing one target/ would each take the other's
# artifacts for fresh.
echo "building $base and this tree" >&2
git worktree add --detach -q "$work/base" "$base"
(cd "$work/base" && CARGO_TARGET_DIR="$root/target/baseline" cargo build --release -q)
cp target/baseline/release/coterie "$work/coterie-base"
cargo build --release -q
cp target/release/coterie "$work/coterie-head"
if cmp -s "$work/coterie-base" "$work/coterie-head"; then
    echo "the two binaries are the same: is $base this tree?" >&2
    exit 1
fi

source scripts/bench/cluster.sh

# measure BIN [WATCH-ARGS...]: entries/s of one client at n1.
measure() {
    local bin="$1"
    shift
    write_cluster "$work/cluster.toml" centralized
    start_cluster "$bin" "$work/cluster.toml" "$work/up.log"
    local watcher=""
    if [ "$#" -gt 0 ]; then
        "$work/coterie-head" watch --config "$work/cluster.toml" --duration 10m "$@" >/dev/null 2>&1 &
        watcher=$!
        sleep 0.5
    fi
    "$bin" workload --config "$work/cluster.toml" --node 1 --clients 1 --requests "$requests" \
        --no-witness --json | jq '.throughput_per_s | round'
    [ -n "$watcher" ] && kill -INT "$watcher" 2>/dev/null && wait "$watcher" 2>/dev/null || true
    kill "$CLUSTER_PID" 2>/dev/null
    wait "$CLUSTER_PID" 2>/dev/null || true
}

declare -A results
for round in $(seq "$rounds"); do
    results[base]+="$(measure "$work/coterie-base") "
    results[head]+="$(measure "$work/coterie-head") "
    results[watch]+="$(measure "$work/coterie-head" --grants) "
    results[messages]+="$(measure "$work/coterie-head" --diagram "$work/run.svg") "
    echo "round $round/$rounds done" >&2
done

python3 - "$rounds" "$requests" "$base" "${results[base]}" "${results[head]}" "${results[watch]}" "${results[messages]}" <<'PY'
import statistics, sys
rounds, requests, base = sys.argv[1:4]
runs = {name: [int(x) for x in text.split()] for name, text in zip(["base", "head", "watch", "messages"], sys.argv[4:])}
floor = statistics.median(runs["base"])
print(f"one client at n1, the coordinator n5, centralized, 5 nodes, {requests} entries, {rounds} rounds (median entries/s):")
for name, what in [("base", f"built from {base}"), ("head", "this tree, nobody watching"),
                   ("watch", "coterie watch --grants on every node"),
                   ("messages", "coterie watch --diagram (every message)")]:
    m = statistics.median(runs[name])
    print(f"  {name:<9} {m:>7.0f}/s  {m / floor:>6.1%} of base   {what}   runs: {' '.join(map(str, runs[name]))}")
PY
