#!/usr/bin/env bash
# Where a path's time goes next to its C floor: the user and system CPU
# each cycle costs, counted by the kernel, for a coterie path taken by the
# blocking C client (scripts/bench/coterie-lock.c) and for the bare C
# processes of that path's floor (scripts/bench/pingpong.c), one after the
# other, DURATION seconds each.
#
# Two paths, one from each of the two bench-vs tables in the guide
# (docs/src/measurements.md, "One lock against Redis and etcd" and "The
# lock where it is used"):
# - ricart-agrawala at n1: client -> n1, n1 -> its 4 peers and their 4
#   answers, n1 -> client: 10 messages a cycle. Floor: `pingpong N 4
#   star`, a C client asking a hub that asks 4 spokes, the same 10
#   messages among 6 processes.
# - roucairol-carvalho at n1, the same lock again (n1 keeps every
#   permission, so no peer message): client -> n1 -> client, 2 messages.
#   Floor: `pingpong N`, one bare round trip.
#
# The nodes' CPU comes from /proc/PID/stat (clock ticks) over the client's
# run, less what the same nodes spent over as long a quiet spell just
# before it (their heartbeats); the C programs' from getrusage of their
# waited processes (client and servers together, so the coterie rows give
# that total too). Messages are the same on both sides of a pair, and so
# are the system calls near enough (strace -c: a node makes an epoll_wait
# besides each recvfrom and sendto where a C process blocks in its read),
# so a gap in system time is the kernel's and a gap in user time is the
# node's own work per message.
#
# Usage: scripts/bench-cpu.sh [--json]   (DURATION=5, COTERIE_BIN=...)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/bench/cluster.sh
bench_start cpu "${1:-}"
cc -O2 -o "$work/pingpong" scripts/bench/pingpong.c
cc -O2 -o "$work/coterie-lock" scripts/bench/coterie-lock.c
hz="$(getconf CLK_TCK)"
rows="$work/rows.jsonl"

say() { $json || echo "  $*" >&2; }

# usage CMD...: runs CMD; prints its output's last line, then the user and
# system seconds of CMD and every process it waited for.
usage() {
    python3 -c 'import resource, subprocess, sys
out = subprocess.run(sys.argv[1:], capture_output=True, text=True, check=True).stdout
r = resource.getrusage(resource.RUSAGE_CHILDREN)
print(out.strip().splitlines()[-1])
print(r.ru_utime, r.ru_stime)' "$@"
}

# ticks PID...: "user system" clock ticks of each PID, a line each
# (fields 14 and 15, counted after the command's closing paren).
ticks() {
    local p
    for p in "$@"; do sed 's/.*) //' "/proc/$p/stat" | awk '{print $12, $13}'; done
}

# floor_row LABEL CYCLES ARG...: a row for `pingpong CYCLES ARG...`, which
# prints "RATE US".
floor_row() {
    local label="$1" cycles="$2" out rate cpu
    shift 2
    say "$label"
    out="$(usage "$work/pingpong" "$cycles" "$@")"
    rate="$(head -n 1 <<<"$out" | awk '{print $1}')"
    cpu="$(tail -n 1 <<<"$out")"
    jq -nc --arg path "$label" --argjson rate "$rate" --argjson cycles "$cycles" \
        --argjson u "${cpu% *}" --argjson s "${cpu#* }" \
        '{path: $path, cycles_per_s: $rate, cycles: $cycles,
          all_user_us: ($u * 1e6 / $cycles), all_system_us: ($s * 1e6 / $cycles)}' >>"$rows"
}

# coterie_row MUTEX LABEL: a 5-node cluster of MUTEX; a quiet spell, then
# the C client at n1, each DURATION seconds.
coterie_row() {
    local mutex="$1" label="$2" dir="$work/$1" pids=() i quiet0 quiet1 busy1 out port
    mkdir -p "$dir"
    write_cluster "$dir/cluster.toml" "$mutex" >/dev/null
    start_cluster "$bin" "$dir/cluster.toml" "$dir/up.log"
    for i in 1 2 3 4 5; do
        pids+=("$(pgrep -f -- "node --config $dir/cluster.toml --id $i\$")")
    done
    port="$(client_port "$dir/cluster.toml" 1)"
    say "$label: the nodes quiet, ${seconds}s"
    quiet0="$(ticks "${pids[@]}")"
    sleep "$seconds"
    quiet1="$(ticks "${pids[@]}")"
    say "$label: the C client at n1, ${seconds}s"
    out="$(usage "$work/coterie-lock" "$port" "$seconds")"
    busy1="$(ticks "${pids[@]}")"
    stop "$CLUSTER_PID"
    # Per node: busy ticks less quiet ticks (the quiet spell is as long).
    paste -d ' ' <(echo "$quiet0") <(echo "$quiet1") <(echo "$busy1") |
        jq -Rsc --arg path "$label" --argjson hz "$hz" --argjson report "$(head -n 1 <<<"$out")" \
            --argjson client "$(tail -n 1 <<<"$out" | jq -Rc 'split(" ") | map(tonumber)')" '
            ($report.cycles) as $c
            | [split("\n")[] | select(length > 0) | split(" ") | map(tonumber)
               | {user: ((.[4] - .[2]) - (.[2] - .[0])), system: ((.[5] - .[3]) - (.[3] - .[1]))}
               | map_values(. * 1e6 / $hz / $c)] as $nodes
            | {path: $path, cycles_per_s: $report.cycles_per_s, cycles: $c,
               client_user_us: ($client[0] * 1e6 / $c), client_system_us: ($client[1] * 1e6 / $c),
               n1_user_us: $nodes[0].user, n1_system_us: $nodes[0].system,
               peer_user_us: ([$nodes[1:][].user] | add / length),
               peer_system_us: ([$nodes[1:][].system] | add / length),
               all_user_us: ($client[0] * 1e6 / $c + ([$nodes[].user] | add)),
               all_system_us: ($client[1] * 1e6 / $c + ([$nodes[].system] | add))}' >>"$rows"
}

floor_row "C star: client, hub, 4 spokes (10 messages)" 20000 4 star
coterie_row ricart-agrawala "coterie ricart-agrawala at n1 (10 messages)"
floor_row "C round trip (2 messages)" 50000
coterie_row roucairol-carvalho "coterie roucairol-carvalho at n1, again (2 messages)"

if $json; then
    jq -s -c '{rows: .}' "$rows"
    exit 0
fi
echo "CPU per cycle, in microseconds, counted by the kernel (user / system); quiet nodes' own CPU taken out"
printf '%-55s %9s %15s %15s %15s %15s\n' path cycles/s "all processes" client n1 "each peer"
jq -r '[.path, (.cycles_per_s | round),
        "\(.all_user_us * 10 | round / 10) / \(.all_system_us * 10 | round / 10)",
        (if .n1_user_us then
           "\(.client_user_us * 10 | round / 10) / \(.client_system_us * 10 | round / 10)",
           "\(.n1_user_us * 10 | round / 10) / \(.n1_system_us * 10 | round / 10)",
           "\(.peer_user_us * 10 | round / 10) / \(.peer_system_us * 10 | round / 10)"
         else "-", "-", "-" end)] | @tsv' "$rows" |
    while IFS=$'\t' read -r path rate all client n1 peer; do
        printf '%-55s %9s %15s %15s %15s %15s\n' "$path" "$rate" "$all" "$client" "$n1" "$peer"
    done
