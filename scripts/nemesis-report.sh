#!/usr/bin/env bash
# The nemesis report: every mutex algorithm on 5 real nodes under the mixed
# nemesis (kills, pauses, frozen waiters and holders, partitions in network
# namespaces — halves, a bridge, a majorities ring —, clock steps and drift,
# lost, truncated and rolled-back state files), then under the issue's
# pause nemesis (one node SIGSTOPped for 1.2 s every 2 s) without and with
# a lock delay, then under lost, rolled-back and truncated state files and
# stepped clocks alone. Every client operation is recorded and the history
# checked; the tables are Markdown, ready for docs/src/nemesis.md.
# `coterie nemesis --report-from OUT/NAME` checks a kept run's histories
# again with the checker of today.
#
# Usage: scripts/nemesis-report.sh
#        DURATION=300s PAUSE_DURATION=30s DISK_CLOCK_DURATION=60s SEED=1
#        ELECTION=bully PARTITIONS=majority (or detector) OUT=target/nemesis
#        COTERIE_BIN=target/release/coterie (built when unset)
# The histories, node logs and a timeline.svg per run are kept under OUT.
# Run as root to partition in network namespaces (else the agents' own
# partition fault is used); `apt-get install faketime` for clock faults.
set -euo pipefail
cd "$(dirname "$0")/.."
duration="${DURATION:-300s}"
pause_duration="${PAUSE_DURATION:-30s}"
seed="${SEED:-1}"
election="${ELECTION:-bully}"
partitions="${PARTITIONS:-majority}"
out="${OUT:-target/nemesis}"
if [ -z "${COTERIE_BIN:-}" ]; then
    cargo build --release -q
    COTERIE_BIN=target/release/coterie
fi
# A copy, so that a rebuild meanwhile does not change the nodes a run restarts.
bin="$out/coterie"
mkdir -p "$out"
cp "$COTERIE_BIN" "$bin"

run() { # name, then nemesis flags
    local name="$1"
    shift
    echo "== $name: coterie nemesis $*" >&2
    # The verdict is in the table: the run's exit status only says whether
    # any run failed, which the table shows too.
    "$bin" nemesis --mutex all --election "$election" --partition-mode "$partitions" \
        --seed "$seed" --out "$out/$name" "$@" \
        > "$out/$name.txt" || true
    grep '^|' "$out/$name.txt" > "$out/$name.md"
    cat "$out/$name.md"
}

run mixed --duration "$duration"
run pause --faults pause --every 2s --duration "$pause_duration"
run pause-lock-delay --faults pause --every 2s --duration "$pause_duration" --lock-delay 1s
run disk-clock --faults disk,clock --every 2s --duration "${DISK_CLOCK_DURATION:-60s}"
echo "tables in $out/*.md, histories and timelines in $out/*/" >&2
