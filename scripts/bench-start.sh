#!/usr/bin/env bash
# How a large cluster starts and fails over on this one machine, per
# election algorithm: `coterie demo --nodes N --json`, REPEAT times each.
# For each run it prints the round of the epoch the cluster first agreed
# on (1 = the first election was the only one), how long the agreement at
# start took once every node was listening, the rounds the coordinator's
# kill cost and the time from the kill to agreement, and the entries the
# workload made; then the medians per election.
#
# Next to the ring's kill time it prints that election's floor on this
# machine: a ring election after the coordinator's loss is 2(N-1) messages
# in sequence (an ELECTION round and a COORDINATOR round of the N-1 live
# nodes), and `pingpong LAPS N` (scripts/bench/pingpong.c) times one hop
# round a ring of N bare C processes on loopback.
#
# Each run waits first until the kernel's connection-tracking table (when
# netfilter tracks connections) is below CONNTRACK_BELOW entries: it keeps
# a closed connection for two minutes, a 128-node run opens some 22,000,
# and a full table drops new connections' first packets silently, so
# back-to-back runs would time the kernel's SYN retransmissions (1 s, then
# 3 s) instead of the cluster (see docs/src/measurements.md, "Start-up and
# failover at 128 nodes").
#
# Usage: scripts/bench-start.sh [ELECTION...]   (default: bully ring garcia-molina)
#        NODES=128 REPEAT=5 MUTEX=centralized DURATION=2s JSON=1
#        CONNTRACK_BELOW=120000
# Run it on a quiet machine: N processes share its cores.
set -euo pipefail
cd "$(dirname "$0")/.."
elections=("$@")
[ "${#elections[@]}" -gt 0 ] || elections=(bully ring garcia-molina)
nodes="${NODES:-128}"
repeat="${REPEAT:-5}"
mutex="${MUTEX:-centralized}"
duration="${DURATION:-2s}"
cargo build --release -q -p coterie
bin="$PWD/target/release/coterie"
runs="$(mktemp)"
pingpong="$(mktemp)"
trap 'rm -f "$runs" "$pingpong"' EXIT
cc -O2 -o "$pingpong" scripts/bench/pingpong.c
echo "  floor: a message round a ring of $nodes C processes, 100 laps ..." >&2
read -r _ hop_us < <("$pingpong" 100 "$nodes")
conntrack=/proc/sys/net/netfilter/nf_conntrack_count
# Waits until the connection-tracking table has room for a run (above).
wait_for_conntrack() {
    [ -r "$conntrack" ] || return 0
    local below="${CONNTRACK_BELOW:-120000}" said=
    while [ "$(cat "$conntrack")" -gt "$below" ]; do
        [ -n "$said" ] || echo "  waiting for the connection-tracking table to drain below $below ..." >&2
        said=1
        sleep 2
    done
}
for election in "${elections[@]}"; do
    for i in $(seq 1 "$repeat"); do
        wait_for_conntrack
        echo "  $election, run $i of $repeat ..." >&2
        "$bin" demo --nodes "$nodes" --mutex "$mutex" --election "$election" \
            --duration "$duration" --json 2>/dev/null |
            python3 -c '
import json, sys
r = json.load(sys.stdin)
e = r["elections"]
print(json.dumps({"election": sys.argv[1], "start_round": e[0]["round"],
    "start_ms": e[0]["duration_ms"],
    "kill_rounds": e[1]["round"] - e[0]["round"] if len(e) > 1 else None,
    "kill_ms": e[1]["duration_ms"] if len(e) > 1 else None,
    "entries": r["entries"], "violations": r["violations"], "failed": r["failed"]}))
' "$election" >>"$runs" || echo "{\"election\": \"$election\", \"failed\": [\"demo failed\"]}" >>"$runs"
    done
done
python3 - "$runs" "$nodes" "$mutex" "${JSON:-0}" "$hop_us" <<'EOF'
import json, statistics, sys
runs = [json.loads(line) for line in open(sys.argv[1])]
nodes, mutex, as_json = sys.argv[2], sys.argv[3], sys.argv[4] == "1"
hop_us = float(sys.argv[5])
# The ring's election after a loss: 2(N-1) hops in sequence, at the bare C
# ring's speed per hop. The others fan out, and have no such chain floor.
floor_ms = {"ring": 2 * (int(nodes) - 1) * hop_us / 1000}
def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None
summary = []
for election in dict.fromkeys(r["election"] for r in runs):
    mine = [r for r in runs if r["election"] == election and "start_round" in r]
    summary.append({
        "election": election, "nodes": int(nodes), "mutex": mutex, "runs": len(mine),
        "start_rounds": [r["start_round"] for r in mine],
        "start_ms_median": med([r["start_ms"] for r in mine]),
        "kill_rounds": [r["kill_rounds"] for r in mine],
        "kill_ms_median": med([r["kill_ms"] for r in mine]),
        "kill_ms": [round(r["kill_ms"], 1) for r in mine if r["kill_ms"] is not None],
        "entries_median": med([r["entries"] for r in mine]),
        "failed_runs": sum(1 for r in runs if r["election"] == election and r["failed"]),
        "c_hop_us": hop_us,
        "kill_floor_ms": floor_ms.get(election),
    })
if as_json:
    print(json.dumps(summary, indent=2))
    sys.exit(0)
print(f"{nodes} nodes, {mutex}; a hop round a ring of {nodes} C processes: {hop_us:.1f} µs")
print(f"{'election':<15} {'start rounds':<18} {'start ms (med)':>14} {'kill rounds':<14} {'kill ms':<32} {'kill ms (med)':>13} {'floor ms':>9} {'entries':>8} {'failed':>6}")
for s in summary:
    fmt = lambda x: "-" if x is None else f"{x:.0f}"
    print(f"{s['election']:<15} {str(s['start_rounds']):<18} {fmt(s['start_ms_median']):>14} "
          f"{str(s['kill_rounds']):<14} {str(s['kill_ms']):<32} {fmt(s['kill_ms_median']):>13} "
          f"{fmt(s['kill_floor_ms']):>9} {fmt(s['entries_median']):>8} {s['failed_runs']:>6}")
EOF
