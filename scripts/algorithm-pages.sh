#!/usr/bin/env bash
# The guide's page for every algorithm, made from the algorithm's own file
# and from runs of coterie, so that none can say what the code does not:
# docs/src/algorithms/NAME.md and NAME.svg for the 11 mutual-exclusion and
# 3 election algorithms.
#
# Each page has:
# - the algorithm's `//!` header (source, assumptions, messages per entry,
#   state walk), as written in its file under crates/coterie-core/src/;
# - its messages per entry measured by the simulator (`coterie bench`, N =
#   3, 5, 7, 9) next to the range theory allows (the registry's claims,
#   which the conformance suite holds it to); for an election, the
#   messages its elections cost at start and after a crash (`coterie sim`);
# - a space-time diagram of a run on real processes (`coterie run`): two
#   requesters of scenarios/two-requesters.toml for a mutex, the crash of
#   the coordinator of scenarios/figures/bully-election.toml for an
#   election;
# - what it does under each fault, from `coterie sim` at N = 5: runs that
#   broke safety or fences, and runs that stalled (with --progress-only),
#   out of SEEDS.
#
# Usage: scripts/algorithm-pages.sh [NAME...]   (default: every algorithm)
# SEEDS=N seeds per fault row (default 100). COTERIE_BIN=PATH uses that
# build instead of building target/release/coterie.
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${COTERIE_BIN:-target/release/coterie}"
[ -n "${COTERIE_BIN:-}" ] || cargo build --release -q -p coterie
seeds="${SEEDS:-100}"
out=docs/src/algorithms
mkdir -p "$out"
say() { printf '[algorithm-pages] %s\n' "$*" >&2; }

mutexes=(centralized centralized-lending token-ring bakery lamport ricart-agrawala roucairol-carvalho raymond-k lodha-kshemkalyani maekawa tree-quorum)
elections=(bully ring garcia-molina)

# file NAME: the algorithm's source file.
file() {
    local dir=mutex
    case " ${elections[*]} " in *" $1 "*) dir=election ;; esac
    echo "crates/coterie-core/src/$dir/${1//-/_}.rs"
}

# header FILE: its `//!` lines as Markdown, the title line left out, and
# rustdoc's links to items shown as plain code.
header() {
    awk '!/^\/\/!/ { exit } { sub(/^\/\/! ?/, ""); print }' "$1" | sed '1{/^# /d}' | sed '1{/^$/d}' |
        sed -E 's/\[(`[^`]*`)\]\([^)]*\)/\1/g; s/\[(`[^`]*`)\]/\1/g'
}

# title FILE: the header's first line, without its `# `.
title() {
    sed -n '1s|^//! # ||p' "$1"
}

# faults NAME FLAGS...: the fault table's rows for a mutex (or, with
# --mutex centralized among FLAGS, for an election), in both partition
# modes: the failure detector trusted, and a majority deciding.
fault_rows() {
    local name="$1" what flags mode cells unsafe stalled
    shift
    while IFS='|' read -r what flags; do
        cells=""
        for mode in detector majority; do
            # (sim exits 1 when it finds a violation: that is the count wanted.)
            # shellcheck disable=SC2086
            unsafe="$("$bin" sim "$@" --nodes 5 $flags --partition-mode $mode --seeds "$seeds" --json || true)"
            # shellcheck disable=SC2086
            stalled="$("$bin" sim "$@" --nodes 5 $flags --partition-mode $mode --seeds "$seeds" --progress-only --json || true)"
            unsafe="$(jq .violations <<<"$unsafe")" stalled="$(jq .violations <<<"$stalled")"
            cells="$cells $unsafe | $stalled |"
            say "$name: $what ($mode): $unsafe unsafe, $stalled stalled of $seeds"
        done
        echo "| $what |$cells"
    done <<'ROWS'
none|
1 crash|--crashes 1
3 crashes|--crashes 3
1 pause (a frozen node)|--pauses 1
1 partition|--partitions 1
1 one-way partition|--one-way-partitions 1
3 connection resets|--resets 3
ROWS
}

mutex_page() {
    local name="$1" src page="$out/$1.md"
    src="$(file "$name")"
    say "$name: measuring messages"
    local bench
    bench="$("$bin" bench --mutex "$name" --nodes 3,5,7,9 --seeds 5 --json)"
    say "$name: a run on real processes"
    "$bin" run scenarios/two-requesters.toml --mutex "$name" --diagram "$out/$name.svg" \
        --from 1000ms --until 1015ms >/dev/null 2>&1
    {
        echo "# \`$name\`: $(title "$src" | sed 's/^`[^`]*` — //')"
        echo
        echo "> Made by \`scripts/algorithm-pages.sh\` from [its file](../../../$src) and runs of"
        echo "> coterie: change those, then run it again. \`mutex = \"$name\"\` in \`[cluster]\`."
        echo
        header "$src"
        echo
        echo "## Messages per entry, measured"
        echo
        echo "In the simulator (\`coterie bench --mutex $name --nodes 3,5,7,9 --seeds 5\`),"
        echo "next to the range theory allows, which the conformance suite holds it"
        echo "to: *light* is one request at a time in the cluster (from a node that"
        echo "is not the coordinator), *heavy* every node always wanting, *burst*"
        echo "every node asking at the same instant. Synchronisation delay in mean"
        echo "message delays, from a release to the next grant while someone waits."
        echo
        echo "| N | light | theory | heavy | theory | burst | theory | sync delay |"
        echo "|---|---|---|---|---|---|---|---|"
        jq -r 'def r: . * 100 | round / 100;
               def range: map(r) | if .[0] == .[1] then "\(.[0])" else "\(.[0])–\(.[1])" end;
               .[] | "| \(.nodes) | \(.light_messages_per_entry | r) | \(if .theory.light_at_coordinator == .theory.light then (.theory.light | range) else "\(.theory.light | range) (\(.theory.light_at_coordinator | range) at the coordinator)" end) | \(.heavy_messages_per_entry | r) | \(.theory.heavy | range) | \(.burst_messages_per_entry | r) | \(.theory.burst | range) | \(.sync_delay | r) |"' <<<"$bench"
        echo
        echo "## A run, drawn"
        echo
        echo "Three node processes, n1 and n2 asking again and again, n3 never"
        echo "asking but answering (\`coterie run scenarios/two-requesters.toml --mutex"
        echo "$name --diagram $name.svg --from 1000ms --until 1015ms\`): a line per"
        echo "node, an arrow per message, a bar per stay in the critical section with"
        echo "its fence."
        echo
        echo "![$name on three real processes]($name.svg)"
        echo
        echo "## Under faults"
        echo
        echo "Runs of the simulator at N = 5 that broke safety or a fence, and runs"
        echo "that stalled (judged with \`--progress-only\`), of $seeds seeded runs each"
        echo "(\`coterie sim --mutex $name --nodes 5 FAULT --partition-mode MODE --seeds"
        echo "$seeds\`), with the failure detector trusted (\`detector\`) and with a"
        echo "majority deciding who is down (\`majority\`, [partitions](../membership.md))."
        echo "A partition or a pause breaks every algorithm that trusts its failure"
        echo "detector, but for the quorum ones, which never lend a permission on a"
        echo "timeout; in majority mode none breaks (a paused holder whose lease ran"
        echo "out is a frozen client's lease overlap, not counted here)."
        echo
        echo "| fault | unsafe (detector) | stalled (detector) | unsafe (majority) | stalled (majority) |"
        echo "|---|---|---|---|---|"
        fault_rows "$name" --mutex "$name"
    } >"$page"
    say "$page"
}

election_page() {
    local name="$1" src page="$out/$1.md" scenario=bully-election span=30ms around=election
    src="$(file "$name")"
    [ "$name" = ring ] && scenario=ring-election span=60ms
    # This bully's survivors leave the election to the highest of them,
    # which wins at once: its COORDINATOR is the first message after a crash.
    [ "$name" = bully ] && around=coordinator
    say "$name: a run on real processes"
    local try
    for try in 1 2 3; do
        "$bin" run "scenarios/figures/$scenario.toml" --election "$name" --diagram "$out/$name.svg" \
            --around "$around" --from 900ms --span "$span" >/dev/null 2>&1 && break
        say "$name: no election drawn; again ($try)"
    done
    {
        echo "# \`$name\`: $(title "$src" | sed 's/^`[^`]*` — //')"
        echo
        echo "> Made by \`scripts/algorithm-pages.sh\` from [its file](../../../$src) and runs of"
        echo "> coterie: change those, then run it again. \`election = \"$name\"\` in \`[cluster]\`."
        echo
        header "$src"
        echo
        echo "## Messages, measured"
        echo
        echo "In the simulator under \`centralized\`, $seeds seeded runs each: the"
        echo "election layer's messages in a whole run of the default workload"
        echo "(the start-up election, a coordinator's periodic"
        echo "checks where the algorithm has them, and with a crash what follows"
        echo "it), per run, in majority mode, the default"
        echo "(\`coterie sim --mutex centralized --election $name --nodes N [--crashes 1] --seeds $seeds\`)."
        echo
        echo "| N | no fault | with 1 crash |"
        echo "|---|---|---|"
        local n quiet crashed per='[.messages_by_kind | to_entries[] | select(.key | test("^(election|ok|coordinator|status_poll|status|new_state|ack|refuse)$")) | .value] | add // 0'
        for n in 3 5 7 9; do
            quiet="$("$bin" sim --mutex centralized --election "$name" --nodes "$n" --seeds "$seeds" --json | jq "($per) / .seeds | . * 10 | round / 10")"
            crashed="$("$bin" sim --mutex centralized --election "$name" --nodes "$n" --crashes 1 --seeds "$seeds" --json | jq "($per) / .seeds | . * 10 | round / 10")"
            echo "| $n | $quiet | $crashed |"
        done
        echo
        echo "## A run, drawn"
        echo
        echo "Five node processes; the coordinator n5 is killed and the others elect"
        echo "the next (\`coterie run scenarios/figures/$scenario.toml --election $name"
        echo "--diagram $name.svg --around $around --from 900ms --span $span\`)."
        echo
        echo "![$name after the coordinator's crash]($name.svg)"
        echo
        echo "## Under faults"
        echo
        echo "Runs of the simulator at N = 5, under \`centralized\` (which trusts the"
        echo "election's coordinator), that broke safety or a fence, and runs that"
        echo "stalled (judged with \`--progress-only\`: no agreement on a coordinator,"
        echo "or no progress), of $seeds seeded runs each, in both partition modes"
        echo "([partitions](../membership.md))."
        echo
        echo "| fault | unsafe (detector) | stalled (detector) | unsafe (majority) | stalled (majority) |"
        echo "|---|---|---|---|---|"
        fault_rows "$name" --mutex centralized --election "$name"
    } >"$page"
    say "$page"
}

names=("$@")
[ ${#names[@]} -gt 0 ] || names=("${mutexes[@]}" "${elections[@]}")
for name in "${names[@]}"; do
    case " ${elections[*]} " in
        *" $name "*) election_page "$name" ;;
        *) case " ${mutexes[*]} " in
               *" $name "*) mutex_page "$name" ;;
               *) echo "no algorithm $name" >&2; exit 2 ;;
           esac ;;
    esac
done
