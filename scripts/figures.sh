#!/usr/bin/env bash
# The diagrams the guide shows, drawn from runs: every one is a command a
# reader can run. Writes docs/src/figures/*.svg.
#
# Usage: scripts/figures.sh        (uses target/release/coterie; builds it
#                                   first unless COTERIE_BIN names one)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="${COTERIE_BIN:-target/release/coterie}"
[ -n "${COTERIE_BIN:-}" ] || cargo build --release -q -p coterie
OUT=docs/src/figures
mkdir -p "$OUT"

say() { printf '[figures] %s\n' "$*"; }

# Ricart-Agrawala on three nodes, two entries each, from the start: the
# bully election, then REQUEST/REPLY rounds and the critical sections.
"$BIN" sim --mutex ricart-agrawala --election bully --nodes 3 --requests 2 --seed 3 \
    --diagram "$OUT/sim-ricart-agrawala.svg" >/dev/null
say "$OUT/sim-ricart-agrawala.svg"

# A split brain caught by the simulator: in detector mode centralized
# trusts timeouts, a partition gives the minority side a coordinator of its
# own, and two nodes hold at once. The window is the moment it happens.
"$BIN" sim --mutex centralized --election bully --nodes 5 --partitions 1 --seed 1 \
    --partition-mode detector \
    --diagram "$OUT/sim-split-brain.svg" --from 1030ms --until 1070ms >/dev/null || true
say "$OUT/sim-split-brain.svg"

# The textbook's two requesters on real processes: Ricart-Agrawala's
# REQUEST/REPLY rounds and the critical sections taking turns.
"$BIN" run scenarios/two-requesters.toml --diagram "$OUT/real-two-requesters.svg" \
    --from 1000ms --until 1015ms >/dev/null
say "$OUT/real-two-requesters.svg"

# The textbook's figures, from real processes (scenarios/figures/): each
# drawn around the first message of the kind it is about. Real timing
# decides whether requests cross (an INQUIRE, a FLUSH): a run without one
# is played again, five times at most.
figure() {   # figure NAME SCENARIO KIND FROM SPAN
    local try
    for try in 1 2 3 4 5; do
        if "$BIN" run "scenarios/figures/$2.toml" --diagram "$OUT/$1.svg" \
            --around "$3" --from "$4" --span "$5" >/dev/null 2>"$OUT/.err"; then
            rm -f "$OUT/.err"
            say "$OUT/$1.svg"
            return 0
        fi
        say "$1: $(tail -n 1 "$OUT/.err"); again ($try)"
    done
    rm -f "$OUT/.err"
    return 1
}
figure real-bully-election bully-election coordinator 900ms 30ms
figure real-ring-election ring-election election 900ms 60ms
figure real-maekawa-inquire maekawa-inquire inquire 500ms 12ms
figure real-lk-flush lk-flush flush 500ms 4ms
