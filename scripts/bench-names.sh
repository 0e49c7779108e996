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
#   create every algorithm's rate of making new locks with RECORDED locks
#          (default "10000 100000") already recorded at the nodes: a state
#          directory (STATE=synced, the default; `unsynced`: state_sync =
#          false; `none`: no state directory, the records kept in memory
#          only) and forget_after "0s" (never
#          forget, so every lock keeps its instance and, for the quorum
#          algorithms, its record), RECORDED locks used once each (`a0`..),
#          then CREATE new ones (default 20,000, `b0`..) used once each: the
#          entries a second of that second sweep, and the changes, batches
#          (one write and one flush each) and state bytes per change the
#          nodes wrote meanwhile (their /metrics).
#   restart
#          what a restart costs with RECORDED locks (default "100000
#          1000000") recorded: a state directory (STATE as for create)
#          and forget_after "0s", the locks used once each, then node 1
#          killed (SIGKILL) and started again through `coterie up`'s
#          console: the bytes its state directory holds per lock, the
#          time from the restart to the node's joining the cluster again
#          (its status says so; polled every 20 ms), and its resident
#          memory then.
#   philosophers
#          the dining philosophers: five clients, one per node, each
#          taking its two forks (`--names 5 --per-request 2 --ring`, all
#          or none, in name order) MEALS times (default 10,000 meals in
#          all), every entry checked per name at a witness: meals eaten,
#          meals per second, requests left unanswered (a deadlock leaves
#          them), and what the witness saw (overlaps, stale fences).
#          Default mutexes: ricart-agrawala, token-ring, maekawa.
#
# Usage: scripts/bench-names.sh [idle|busy|create|restart|philosophers|all] [MUTEX...]
#        (default all; every mutex). NAMES=100000 SETTLE_S=10 IDLE_S=10
#        CLIENTS=16 MANY=1000 DURATION=5s REPEAT=3 MEALS=10000
#        RECORDED="10000 100000" CREATE=20000 OUT=target/bench-names
#        COTERIE_BIN=... (another build; default: a fresh release build)
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
recorded="${RECORDED:-10000 100000}"
create="${CREATE:-20000}"
state="${STATE:-synced}"
out="${OUT:-target/bench-names}"
mkdir -p "$out"
if [ -n "${COTERIE_BIN:-}" ]; then
    bin="$COTERIE_BIN"
else
    cargo build --release -q -p coterie
    bin="$PWD/target/release/coterie"
fi
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
# waits until it agrees. Without a state directory, unless more `init`
# arguments follow the mutex.
start() {
    local mutex="$1"
    shift
    local extra=("$@")
    [ "${#extra[@]}" -gt 0 ] || extra=(--no-state-dir)
    cfg="$work/$mutex.toml"
    rm -rf "$work/state"
    "$bin" init --name names --nodes 5 --mutex "$mutex" --free-ports "${extra[@]}" \
        --heartbeat 50ms --failure-timeout 250ms --set "limits.max_names=$((names + 1000))" \
        --force --out "$cfg"
    # A job in the background of a script reads /dev/null unless told
    # otherwise: `console` names a pipe for `up`'s console steps.
    "$bin" up --config "$cfg" <"${console:-/dev/null}" >"$out/$mutex.up.log" 2>&1 &
    up_pid=$!
    status_until 100 0.2 \
        'length == 5 and all(.reachable and .joined) and ([.[].coordinator] | unique | length == 1)' \
        && return
    echo "the $mutex cluster never agreed (see $out/$mutex.up.log)" >&2
    exit 1
}

# Polls the cluster's status (up to TRIES times, PAUSE seconds apart)
# until the jq FILTER holds of it; whether it did.
status_until() {
    local tries="$1" pause="$2" filter="$3"
    for _ in $(seq "$tries"); do
        "$bin" status --config "$cfg" --json 2>/dev/null | jq -e "$filter" >/dev/null && return 0
        sleep "$pause"
    done
    return 1
}

# The `init` arguments for STATE, in `storage`.
storage_for_state() {
    case "$state" in
        synced) storage=() ;;
        unsynced) storage=(--set cluster.state_sync=false) ;;
        none) storage=(--no-state-dir) ;;
        *) echo "STATE is synced, unsynced or none, not $state" >&2; exit 2 ;;
    esac
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

# A counter summed over the nodes' /metrics.
metric() {
    local total=0 url v
    for url in $(grep -o 'http = "[^"]*"' "$cfg" | cut -d'"' -f2); do
        v="$(curl -s "http://$url/metrics" | awk -v m="$1" '$1 == m { print $2 }')"
        total=$((total + ${v:-0}))
    done
    echo "$total"
}

create() {
    local tsv="$out/create-$state.tsv"
    printf 'mutex\trecorded\tcreated\tentries_per_s\tchanges\tbatches\tbytes_per_change\tlog_bytes_per_change\n' >"$tsv"
    for mutex in "${mutexes[@]}"; do
        for k in $recorded; do
            local max=$((k + create + 1000)) storage
            storage_for_state
            start "$mutex" --http --set cluster.forget_after=0s --set "limits.max_names=$max" \
                "${storage[@]}"
            "$bin" workload --config "$cfg" --no-witness --names "$k" --name-prefix a --skew sweep \
                --requests $(((k + 4) / 5)) --answer-within 120s --json >/dev/null
            local c0 b0 l0 f0 c1 b1 l1 f1 rate
            c0="$(metric coterie_state_changes_total)"
            f0="$(metric coterie_state_batches_total)"
            l0="$(metric coterie_state_log_bytes_total)"
            b0=$((l0 + $(metric coterie_state_snapshot_bytes_total)))
            rate="$("$bin" workload --config "$cfg" --no-witness --names "$create" --name-prefix b \
                --skew sweep --requests $(((create + 4) / 5)) --answer-within 120s --json \
                | jq '.throughput_per_s | floor')"
            c1="$(metric coterie_state_changes_total)"
            f1="$(metric coterie_state_batches_total)"
            l1="$(metric coterie_state_log_bytes_total)"
            b1=$((l1 + $(metric coterie_state_snapshot_bytes_total)))
            printf '%s\t%d\t%d\t%d\t%d\t%d\t%s\t%s\n' "$mutex" "$k" "$create" "$rate" "$((c1 - c0))" \
                "$((f1 - f0))" \
                "$(awk -v b=$((b1 - b0)) -v c=$((c1 - c0)) 'BEGIN { printf "%.0f", c ? b / c : 0 }')" \
                "$(awk -v b=$((l1 - l0)) -v c=$((c1 - c0)) 'BEGIN { printf "%.0f", c ? b / c : 0 }')" \
                | tee -a "$tsv" >&2
            stop
        done
    done
    column -t -s $'\t' "$tsv"
}

# Node 1's state files, in bytes.
state_bytes() {
    du -cb "$work"/state/*node1.* 2>/dev/null | awk 'END { print $1 }'
}

restart() {
    local tsv="$out/restart-$state.tsv" k
    printf 'mutex\trecorded\tstate_bytes_per_lock\trestart_to_joined_ms\trss_mb_after\n' >"$tsv"
    for mutex in "${mutexes[@]}"; do
        for k in ${RECORDED:-100000 1000000}; do
            local storage
            [ "$state" != none ] || { echo "restart needs a state directory: STATE=none" >&2; exit 2; }
            storage_for_state
            # `up` takes its console steps (kill 1, restart 1) from a pipe.
            console="$work/console"
            rm -f "$console"
            mkfifo "$console"
            exec 3<>"$console" # held open: `up` never reads an end of file
            names=$k start "$mutex" --set cluster.forget_after=0s "${storage[@]}"
            "$bin" workload --config "$cfg" --no-witness --names "$k" --name-prefix a --skew sweep \
                --requests $(((k + 4) / 5)) --answer-within 300s --json >/dev/null
            local bytes t0 t1 pid
            bytes="$(state_bytes)"
            echo "kill 1" >&3
            status_until 500 0.02 '.[] | select(.id == 1) | .reachable | not' || true
            t0="$(date +%s%N)"
            echo "restart 1" >&3
            status_until 3000 0.02 '.[] | select(.id == 1) | .reachable and .joined' \
                || { echo "node 1 of $mutex never joined again" >&2; exit 1; }
            t1="$(date +%s%N)"
            grep -q "^coterie up: restart n1" "$out/$mutex.up.log" \
                || { echo "node 1 of $mutex was not restarted (see $out/$mutex.up.log)" >&2; exit 1; }
            pid="$(pgrep -f -- "node --config $cfg --id 1\$" | head -1)"
            printf '%s\t%d\t%s\t%d\t%s\n' "$mutex" "$k" \
                "$(awk -v b="$bytes" -v k="$k" 'BEGIN { printf "%.1f", b / k }')" \
                "$(((t1 - t0) / 1000000))" \
                "$(awk '/^VmRSS:/ { printf "%.1f", $2 / 1024 }' "/proc/$pid/status")" \
                | tee -a "$tsv" >&2
            exec 3>&-
            console=""
            stop
        done
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
    create) create ;;
    restart) restart ;;
    philosophers) philosophers ;;
    all) idle; busy; create; restart; philosophers ;;
    *) echo "usage: $0 [idle|busy|create|restart|philosophers|all] [MUTEX...]" >&2; exit 2 ;;
esac
