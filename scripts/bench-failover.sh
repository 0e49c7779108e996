#!/usr/bin/env bash
# How long a cluster takes to agree on a new coordinator, over many runs.
#
# Runs `coterie demo` RUNS times per election algorithm and fault, and
# reports the median, 90th percentile and maximum of the time from the
# coordinator's failure to all survivors agreeing (and from its return to
# all nodes agreeing again). Faults: kill (SIGKILL: connections close, a
# redial is refused) and stop (SIGSTOP: only the heartbeat timeout, 250 ms,
# can tell).
#
# Usage: scripts/bench-failover.sh [RUNS] [ELECTIONS]   (default: 20 "bully ring garcia-molina")
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-20}"
elections="${2:-bully ring garcia-molina}"
cargo build --release -q
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

for election in $elections; do
    for fault in kill stop; do
        for i in $(seq "$runs"); do
            target/release/coterie demo --election "$election" --fault "$fault" \
                --duration 1500ms --json >"$out/$election-$fault-$i.json"
            printf '\r  %s %s %d/%d' "$election" "$fault" "$i" "$runs" >&2
        done
    done
done
printf '\r%40s\r' '' >&2

python3 - "$out" "$runs" $elections <<'PY'
import json, statistics, sys, glob, os
out, runs, elections = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
def pct(xs, q):
    xs = sorted(xs); return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]
print(f"{'ELECTION':<13} {'FAULT':<5} {'AFTER':<8} {'MEDIAN ms':>10} {'P90 ms':>8} {'MAX ms':>8}  RUNS")
for e in elections:
    for fault in ("kill", "stop"):
        reports = [json.load(open(p)) for p in sorted(glob.glob(os.path.join(out, f"{e}-{fault}-*.json")))]
        for index, label in ((1, "failure"), (2, "return")):
            xs = [r["elections"][index]["duration_ms"] for r in reports]
            print(f"{e:<13} {fault:<5} {label:<8} {statistics.median(xs):>10.1f} {pct(xs, .9):>8.1f} {max(xs):>8.1f}  {len(xs)}")
        bad = [r for r in reports if r["violations"]]
        if bad:
            print(f"  {len(bad)} runs of {e}/{fault} saw violations")
PY
