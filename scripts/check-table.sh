#!/usr/bin/env bash
# The README's table of `coterie check`: every mutex at N = 3, one request
# per node, under bully, ring and garcia-molina, without faults and with
# one crash. Each check runs alone (one core), stops at MAX_STATES distinct
# states, and prints one line as it ends (distinct states, depth, seconds,
# verdict); at the end, the table in Markdown.
#
# Usage: scripts/check-table.sh [MAX_STATES] [MUTEX...]
#        (default 5000000 distinct states; every mutex in the registry)
#        CRASHES="0 1" by default: the fault columns to fill.
#        TICKS=2 by default: a message takes one to TICKS ticks (bakery
#        always 1).
#        NAMES=1, PER_REQUEST=1 by default: the locks the requests spread
#        over, and how many each takes at once (`check --names`,
#        `--per-request`).
set -euo pipefail
cd "$(dirname "$0")/.."
max_states="${1:-5000000}"
shift || true
cargo build --release -q
bin=target/release/coterie
if [ "$#" -gt 0 ]; then
    mutexes=("$@")
else
    # The registry's names, as an unknown name's error lists them.
    known="$( ("$bin" check --mutex '?' 2>&1 || true) | sed -n 's/.*(known: \(.*\))/\1/p')"
    IFS=', ' read -r -a mutexes <<<"$known"
fi
elections=(bully ring garcia-molina)
out="$(mktemp)"
trap 'rm -f "$out"' EXIT

for mutex in "${mutexes[@]}"; do
    # Bakery's eight messages a node, each with two delays, are past any
    # bound CI affords; with one-tick messages every order of simultaneous
    # events is still tried.
    ticks="${TICKS:-2}"
    [ "$mutex" = bakery ] && ticks=1
    for crashes in ${CRASHES:-0 1}; do
        for election in "${elections[@]}"; do
            json="$("$bin" check --mutex "$mutex" --election "$election" --nodes 3 \
                --requests 1 --crashes "$crashes" --delay-ticks "$ticks" \
                --names "${NAMES:-1}" --per-request "${PER_REQUEST:-1}" \
                --max-states "$max_states" --json 2>/dev/null || true)"
            line="$(printf '%s' "$json" | jq -r '
                [.distinct_states, .max_depth, (.seconds * 10 | round / 10),
                 ((if .exhausted then "exhausted" else "bound hit" end)
                  + (if .violations > 0 then ", " + ([.counterexamples[].invariant] | join(", ")) else "" end))]
                | @tsv')"
            printf '%s\t%s\t%s\t%s\t%s\n' "$mutex" "$election" "$crashes" "$ticks" "$line" | tee -a "$out" >&2
        done
    done
done

python3 - "$out" <<'EOF'
import sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])]
cells = {}
for mutex, election, crashes, ticks, distinct, depth, secs, verdict in rows:
    text = f"{int(distinct):,} ({float(secs):.1f} s)"
    if verdict != "exhausted":
        text = f"{verdict}: {int(distinct):,} ({float(secs):.0f} s)"
    if ticks != "2":
        text += f", `--delay-ticks {ticks}`"
    cells[(mutex, election, crashes)] = text
mutexes = list(dict.fromkeys(r[0] for r in rows))
print("| mutex | bully | ring | garcia-molina | 1 crash: bully | ring | garcia-molina |")
print("|---|---|---|---|---|---|---|")
for m in mutexes:
    row = [cells.get((m, e, c), "") for c in ("0", "1") for e in ("bully", "ring", "garcia-molina")]
    print(f"| `{m}` | " + " | ".join(row) + " |")
depths = [int(r[5]) for r in rows]
print(f"\nRuns are up to {max(depths)} steps deep.")
EOF
