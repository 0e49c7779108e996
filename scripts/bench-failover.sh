#!/usr/bin/env bash
# How long a cluster takes to agree on a new coordinator, over many runs.
#
# Runs `coterie demo` RUNS times per partition mode, election algorithm
# and fault, and reports the median, 90th percentile and maximum of the
# time from the coordinator's failure to all survivors agreeing (and from
# its return to all nodes agreeing again). Faults: kill (SIGKILL:
# connections close, a redial is refused), stop (SIGSTOP: only the
# heartbeat timeout, 250 ms, can tell) and partition (the coordinator cut
# off from every peer, then healed). Modes: majority (the survivors also
# wait out the lost node's lease before they move on) and detector.
#
# It also draws the distributions, a dot per run and a bar at the median,
# per mode, election and fault, to an SVG (default docs/src/failover.svg;
# SVG=FILE to choose).
#
# Usage: scripts/bench-failover.sh [RUNS] [ELECTIONS] [FAULTS]
#   defaults: 20 "bully ring garcia-molina" "kill stop partition";
#   MODES="majority detector"
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-20}"
elections="${2:-bully ring garcia-molina}"
faults="${3:-kill stop partition}"
modes="${MODES:-majority detector}"
cargo build --release -q
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

for mode in $modes; do
    for election in $elections; do
        for fault in $faults; do
            for i in $(seq "$runs"); do
                target/release/coterie demo --election "$election" --fault "$fault" \
                    --partition-mode "$mode" --duration 1500ms --json \
                    >"$out/$mode-$election-$fault-$i.json" || true
                printf '\r  %s %s %s %d/%d' "$mode" "$election" "$fault" "$i" "$runs" >&2
            done
        done
    done
done
printf '\r%50s\r' '' >&2

python3 - "$out" "$runs" "${SVG:-docs/src/failover.svg}" "$modes" "$faults" $elections <<'PY'
import json, statistics, sys, glob, os
out, runs, svg_path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
modes, faults, elections = sys.argv[4].split(), sys.argv[5].split(), sys.argv[6:]
def pct(xs, q):
    xs = sorted(xs); return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]
def reports_of(mode, e, fault):
    paths = sorted(glob.glob(os.path.join(out, f"{mode}-{e}-{fault}-*.json")))
    return [json.load(open(p)) for p in paths]
print(f"{'MODE':<9} {'ELECTION':<13} {'FAULT':<9} {'AFTER':<8} {'MEDIAN ms':>10} {'P90 ms':>8} {'MAX ms':>8}  RUNS  STALE FENCES")
for mode in modes:
    for e in elections:
        for fault in faults:
            reports = reports_of(mode, e, fault)
            stale = sum(r["stale_fences"] for r in reports)
            for index, label in ((1, "failure"), (2, "return")):
                xs = [r["elections"][index]["duration_ms"] for r in reports]
                print(f"{mode:<9} {e:<13} {fault:<9} {label:<8} {statistics.median(xs):>10.1f} "
                      f"{pct(xs, .9):>8.1f} {max(xs):>8.1f}  {len(xs):>4}  {stale if index == 1 else ''}")
            bad = [r for r in reports if r["violations"]]
            if bad:
                print(f"  {len(bad)} runs of {mode}/{e}/{fault} saw violations")

# The distributions: one row per mode, election, fault and moment, a dot
# per run (log scale: a kill takes milliseconds, a hang hundreds), the
# median a bar.
rows = []
for mode in modes:
    for e in elections:
        for fault in faults:
            reports = reports_of(mode, e, fault)
            for index, label in ((1, "failure"), (2, "return")):
                xs = [r["elections"][index]["duration_ms"] for r in reports]
                rows.append((f"{mode}: {e} {fault}, after {label}", fault, xs))
import math
lo = min(min(xs) for _, _, xs in rows if xs); hi = max(max(xs) for _, _, xs in rows if xs)
lo, hi = 10 ** math.floor(math.log10(max(lo, 0.1))), 10 ** math.ceil(math.log10(max(hi, 1)))
W, left, right, top, row_h = 1000, 330, 30, 40, 22
H = top + row_h * len(rows) + 50
x = lambda v: left + (math.log10(max(v, lo)) - math.log10(lo)) / (math.log10(hi) - math.log10(lo)) * (W - left - right)
colours = {"kill": "#d62728", "stop": "#1f77b4", "partition": "#9467bd"}
svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
       '<rect width="100%" height="100%" fill="white"/>',
       f'<text x="{W/2}" y="20" text-anchor="middle">time to agree on a coordinator after a failure and after the return ({runs} demo runs each, scripts/bench-failover.sh)</text>']
decade = lo
while decade <= hi:
    svg.append(f'<line x1="{x(decade):.1f}" y1="{top-6}" x2="{x(decade):.1f}" y2="{H-44}" stroke="#ddd"/>'
               f'<text x="{x(decade):.1f}" y="{H-28}" text-anchor="middle">{decade:g} ms</text>')
    decade *= 10
for i, (label, fault, xs) in enumerate(rows):
    y = top + row_h * i + row_h / 2
    colour = colours.get(fault, "#444")
    svg.append(f'<text x="{left-8}" y="{y+4:.1f}" text-anchor="end">{label}</text>')
    for v in xs:
        svg.append(f'<circle cx="{x(v):.1f}" cy="{y:.1f}" r="3.5" fill="{colour}" fill-opacity="0.55"/>')
    if xs:
        m = statistics.median(xs)
        svg.append(f'<line x1="{x(m):.1f}" y1="{y-9:.1f}" x2="{x(m):.1f}" y2="{y+9:.1f}" stroke="black" stroke-width="2"><title>median {m:.1f} ms</title></line>')
svg.append(f'<text x="{left}" y="{H-8}">red: SIGKILL (connections close); blue: SIGSTOP (only the heartbeat timeout tells); purple: cut off from every peer; black bar: the median</text>')
svg.append('</svg>')
open(svg_path, "w").write("\n".join(svg) + "\n")
print(f"plot: {svg_path}")
PY
