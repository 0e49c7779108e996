#!/usr/bin/env bash
# What many named locks cost, on real node processes (5 nodes, one
# machine), for each algorithm:
#
#   idle   NAMES locks (default 100,000), each used once (`workload
#          --names NAMES --skew sweep`: five clients, one per node, take
#          them in turn), then left alone. After SETTLE_S seconds (default
#          10: idle locks are forgotten after the nodes' forget_after, 5 s)
#          the nodes' sent-message counters are read twice, IDLE_S apart:
#          the messages per second beyond heartbeats. And the nodes'
#          resident memory (VmRSS, summed) before the locks and after:
#          the bytes an idle lock leaves behind, over the cluster and per
#          node; with the instances and remnants the nodes still keep.
#   busy   CLIENTS clients (default 16) over MANY locks (default 1,000,
#          uniform) against the same clients on one lock, DURATION each
#          (default 5 s), without a witness, REPEAT times in turn (default
#          3): the median entries per second of each, and their ratio.
#   philosophers
#          the dining philosophers: five clients, one per node, each
#          taking its two forks (`--names 5 --per-request 2 --ring`, all
#          or none, in name order) MEALS times (default 10,000 meals in
#          all), every entry checked per name at a witness: meals eaten,
#          meals per second, requests left unanswered (a deadlock leaves
#          them), and what the witness saw (overlaps, stale fences).
#          Default mutexes: ricart-agrawala, token-ring, maekawa.
#
# Usage: scripts/bench-names.sh [idle|busy|philosophers|all] [MUTEX...]
#        (default all; every mutex). NAMES=100000 SETTLE_S=10 IDLE_S=10
#        CLIENTS=16 MANY=1000 DURATION=5s REPEAT=3 MEALS=10000
#        OUT=target/bench-names
# Prints a table per part, and writes each as TSV in OUT. Run it on a
# quiet machine: every node is a process, and the numbers are what five
# processes cost the cores there are.
set -euo pipefail
cd "$(dirname "$0")/.."
part="${1:-all}"
shift || true
names="${NAMES:-100000}"
settle_s="${SETTLE_S:-10}"
idle_s="${IDLE_S:-10}"
clients="${CLIENTS:-16}"
many="${MANY:-1000}"
duration="${DURATION:-5s}"
repeat="${REPEAT:-3}"
meals="${MEALS:-10000}"
out="${OUT:-target/bench-names}"
mkdir -p "$out"
cargo build --release -q -p coterie
bin="$PWD/target/release/coterie"
if [ "$#" -gt 0 ]; then
    mutexes=("$@")
elif [ "$part" = philosophers ]; then
    mutexes=(ricart-agrawala token-ring maekawa)
else
    known="$( ("$bin" sim --mutex '?' 2>&1 || true) | sed -n 's/.*(known: \(.*\))/\1/p')"
    IFS=', ' read -r -a mutexes <<<"$known"
fi
work="$(mktemp -d)"
up_pid=""
witness_pid=""
stop() {
    [ -z "$up_pid" ] || { kill "$up_pid" 2>/dev/null || true; wait "$up_pid" 2>/dev/null || true; }
    [ -z "$witness_pid" ] || { kill "$witness_pid" 2>/dev/null || true; wait "$witness_pid" 2>/dev/null || true; }
    up_pid="" witness_pid=""
}
trap 'stop; rm -rf "$work"' EXIT

# Starts a 5-node cluster of `mutex` (its configuration in $cfg) and
# waits until it agrees.
start() {
    local mutex="$1"
    cfg="$work/$1.toml"
    "$bin" init --name names --nodes 5 --mutex "$mutex" --free-ports --no-state-dir \
        --heartbeat 50ms --failure-timeout 250ms --set "limits.max_names=$((names + 1000))" \
        --force --out "$cfg"
    "$bin" up --config "$cfg" >"$out/$mutex.up.log" 2>&1 &
    up_pid=$!
    for _ in $(seq 100); do
        if "$bin" status --config "$cfg" --json 2>/dev/null \
            | jq -e 'length == 5 and all(.reachable and .joined) and ([.[].coordinator] | unique | length == 1)' >/dev/null; then
            return
        fi
        sleep 0.2
    done
    echo "the $mutex cluster never agreed (see $out/$mutex.up.log)" >&2
    exit 1
}

# The nodes' resident memory, in kB, summed.
rss_kb() {
    local cfg="$1" total=0 pid kb
    for pid in $(pgrep -f -- "node --config $cfg --id"); do
        kb="$(awk '/^VmRSS:/ { print $2 }' "/proc/$pid/status")"
        total=$((total + kb))
    done
    echo "$total"
}

# Every message the nodes sent but heartbeats, summed.
sent() {
    "$bin" status --config "$1" --json | jq '[.[].messages_sent | to_entries[] | select(.key != "heartbeat") | .value] | add // 0'
}

idle() {
    local tsv="$out/idle.tsv"
    printf 'mutex\tnames\tentries_per_s\tmsgs_per_s_idle\tinstances_left\tremnants\trss_before_mb\trss_after_mb\tbytes_per_name\tbytes_per_name_per_node\n' >"$tsv"
    for mutex in "${mutexes[@]}"; do
        start "$mutex"
        # Warm up (the default lock, the allocator) before the first count.
        "$bin" workload --config "$cfg" --no-witness --requests 200 --json >/dev/null
        before="$(rss_kb "$cfg")"
        per_client=$(((names + 4) / 5))
        rate="$("$bin" workload --config "$cfg" --no-witness --names "$names" --skew sweep \
            --requests "$per_client" --answer-within 60s --json | jq '.throughput_per_s | floor')"
        sleep "$settle_s"
        m0="$(sent "$cfg")"
        sleep "$idle_s"
        m1="$(sent "$cfg")"
        after="$(rss_kb "$cfg")"
        left="$("$bin" status --config "$cfg" --json | jq '[.[].names - 1] | add')"
        remnants="$("$bin" status --config "$cfg" --json | jq '[.[].remnants] | add')"
        per_s="$(awk -v a="$m0" -v b="$m1" -v s="$idle_s" 'BEGIN { printf "%.1f", (b - a) / s }')"
        bytes="$(awk -v a="$before" -v b="$after" -v n="$names" 'BEGIN { printf "%.0f", (b - a) * 1024 / n }')"
        printf '%s\t%d\t%d\t%s\t%d\t%d\t%.1f\t%.1f\t%d\t%d\n' "$mutex" "$names" "$rate" "$per_s" \
            "$left" "$remnants" "$(echo "$before / 1024" | bc -l)" "$(echo "$after / 1024" | bc -l)" \
            "$bytes" "$((bytes / 5))" | tee -a "$tsv" >&2
        stop
    done
    column -t -s $'\t' "$tsv"
}

median() { printf '%s\n' "$@" | sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : int((v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }

busy() {
    local tsv="$out/busy.tsv"
    printf 'mutex\tclients\tone_lock_per_s\tmany_locks_per_s\tmany_locks\tratio\n' >"$tsv"
    for mutex in "${mutexes[@]}"; do
        start "$mutex"
        run() {
            "$bin" workload --config "$cfg" --no-witness --total-clients "$clients" --requests 100000000 \
                --duration "$duration" --answer-within 30s --json "$@" | jq '.throughput_per_s | floor'
        }
        # Turn about, so that a slow moment of the machine hits both.
        ones=() spreads=()
        for _ in $(seq "$repeat"); do
            ones+=("$(run)")
            spreads+=("$(run --names "$many")")
        done
        one="$(median "${ones[@]}")"
        spread="$(median "${spreads[@]}")"
        ratio="$(awk -v a="$one" -v b="$spread" 'BEGIN { printf "%.2f", b / (a > 0 ? a : 1) }')"
        printf '%s\t%d\t%d\t%d\t%d\t%s\n' "$mutex" "$clients" "$one" "$spread" "$many" "$ratio" \
            | tee -a "$tsv" >&2
        stop
    done
    column -t -s $'\t' "$tsv"
}

philosophers() {
    local tsv="$out/philosophers.tsv"
    printf 'mutex\tmeals\tmeals_per_s\tunanswered\toverlaps\tstale_fences\n' >"$tsv"
    for mutex in "${mutexes[@]}"; do
        start "$mutex"
        local witness
        witness="127.0.0.1:$(port)"
        "$bin" witness --listen "$witness" >"$out/$mutex.witness.log" 2>&1 &
        witness_pid=$!
        sleep 0.3
        local report
        report="$("$bin" workload --config "$cfg" --witness "$witness" --clients 1 \
            --names 5 --per-request 2 --ring --requests "$((meals / 5))" --answer-within 30s --json)"
        local seen
        seen="$("$bin" witness --check "$witness" --json || true)"
        printf '%s\t%d\t%d\t%d\t%d\t%d\n' "$mutex" \
            "$(jq '.entries' <<<"$report")" "$(jq '.throughput_per_s | floor' <<<"$report")" \
            "$(jq '.unanswered' <<<"$report")" "$(jq '.violations' <<<"$seen")" \
            "$(jq '.stale_fences' <<<"$seen")" | tee -a "$tsv" >&2
        stop
    done
    column -t -s $'\t' "$tsv"
}

case "$part" in
    idle) idle ;;
    busy) busy ;;
    philosophers) philosophers ;;
    all) idle; busy; philosophers ;;
    *) echo "usage: $0 [idle|busy|philosophers|all] [MUTEX...]" >&2; exit 2 ;;
esac
