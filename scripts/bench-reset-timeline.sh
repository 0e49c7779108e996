#!/usr/bin/env bash
# How quickly the sessions make good a reset: plays
# scenarios/connection-resets.toml (5 nodes, ricart-agrawala, two clients
# per node, the coordinator's peer connections broken every 300 ms for
# 6 s) with each grant logged, then reads the nodes' logs: for each reset,
# how long until every connection was dialled again, until the next grant
# anywhere, and the gap between the grants either side of it, next to the
# gaps between grants over the whole run.
#
# Usage: scripts/bench-reset-timeline.sh
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q
out="$(RUST_LOG=info,coterie_node::agent=debug target/release/coterie run scenarios/connection-resets.toml 2>/dev/null)"
echo "$out" | grep -E "entries in|PASSED|FAILED"
logs="$(echo "$out" | sed -n 's/.*logs in \([^ ]*\)$/\1/p' | head -1)"
python3 - "$logs" <<'EOF'
import bisect, datetime, glob, statistics, sys
logs = sys.argv[1]
at = lambda line: datetime.datetime.fromisoformat(line[:26]).timestamp() * 1e3
grants, resets, dials = [], [], []
for path in glob.glob(f"{logs}/node*.log"):
    coordinator = path.endswith("node5.log")
    for line in open(path):
        if "granted node=" in line or "first grant of this epoch" in line:
            grants.append(at(line))
        elif coordinator and "fault injected" in line and "Reset" in line:
            resets.append(at(line))
        elif coordinator and "connected to peer" in line:
            dials.append(at(line))
grants.sort()
gaps = sorted(b - a for a, b in zip(grants, grants[1:]))
med = statistics.median
print(f"{len(grants)} grants; gap between grants: median {med(gaps):.2f} ms, "
      f"p99 {gaps[int(len(gaps) * 0.99)]:.2f} ms, max {gaps[-1]:.2f} ms")
redial, first, spanning = [], [], []
for t in resets:
    back = [d for d in dials if t <= d < t + 250][:4]
    if back:
        redial.append(max(back) - t)
    i = bisect.bisect(grants, t)
    if 0 < i < len(grants):
        first.append(grants[i] - t)
        spanning.append(grants[i] - grants[i - 1])
for name, xs in [("every connection dialled again", redial),
                 ("first grant after the reset", first),
                 ("gap between the grants either side", spanning)]:
    print(f"{len(resets)} resets; {name}: median {med(xs):.2f} ms, max {max(xs):.2f} ms")
EOF
