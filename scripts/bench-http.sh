#!/usr/bin/env bash
# The HTTP/JSON API's lock cycles (acquire + release, keep-alive) next to
# coterie's binary protocol and etcd's JSON gateway, all on this machine in
# one run: cycles per second and the median time to acquire, from 1 client
# and from 16.
#
# What each side does per cycle:
# - coterie over HTTP (`coterie workload --http`, a Rust client on hyper):
#   one session per client (POST /v1/sessions), then POST
#   /v1/locks/default/acquire and POST /v1/locks/default/release on one
#   keep-alive HTTP/1.1 connection: 2 round trips.
# - coterie's binary protocol (`coterie workload`), the same lock, twice:
#   "2 requests" releases and then asks again, 2 round trips like HTTP;
#   "chained" sends the release with the next request (what the binary
#   client does when it asks again at once), 1 round trip a cycle.
# - etcd (scripts/bench/etcd-lock.py, one process per client, each on one
#   keep-alive connection to the v3 JSON gateway, the clients spread over
#   three members): POST /v3/lock/lock and /v3/lock/unlock, each a raft
#   write committed by a majority, each member fsyncing its log. coterie's
#   centralized lock is not replicated and writes nothing to disk per
#   grant (see scripts/bench-vs.sh): the rows compare what a user of each
#   gets per cycle, not equal guarantees.
# The coterie cluster: 5 nodes, centralized under bully, n5 coordinating;
# "at n5" is a client at the coordinator, "at n1" one at another node (its
# node forwards to the coordinator: 2 peer messages more a cycle), and 16
# clients are dealt over the 5 nodes, all on one lock.
#
# Usage: scripts/bench-http.sh [--json]   (--json: the rows as a JSON array)
# DURATION=SECONDS per run (default 5). COTERIE_BIN=PATH measures that
# build instead of building target/release/coterie. etcd: apt-get install
# etcd-server etcd-client (skipped, with a note, when not installed).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/bench/cluster.sh
source scripts/bench/cluster.sh
bench_start bench-http "$@"
rows="$work/rows.jsonl"
: >"$rows"
notes=()


say() { echo "bench-http: $*" >&2; }

# row SYSTEM WHERE CLIENTS REPORT: a row from a client's JSON report
# (etcd-lock: cycles_per_s, acquire_p50_us; coterie workload:
# throughput_per_s, latency_ms.p50).
row() {
    jq -c --arg system "$1" --arg where "$2" --argjson clients "$3" \
        '{system: $system, where: $where, clients: $clients,
          cycles_per_s: ((.cycles_per_s // .throughput_per_s) | round),
          p50_acquire_us: ((.acquire_p50_us // (.latency_ms.p50 * 1000)) | round)}' \
        <<<"$4" >>"$rows"
}

if command -v etcd >/dev/null && command -v etcdctl >/dev/null; then
    mkdir -p "$work/etcd"
    start_etcd "$work/etcd"
    for clients in 1 16; do
        say "etcd: $clients client(s), ${seconds}s"
        report="$(python3 scripts/bench/etcd-lock.py "$ETCD_ENDPOINTS" "$clients" "$seconds")"
        row "etcd JSON gateway" "3 members" "$clients" "$report"
    done
    for pid in "${ETCD_PIDS[@]}"; do stop "$pid"; done
else
    notes+=("etcd: skipped, no etcd/etcdctl (apt-get install etcd-server etcd-client)")
fi

mkdir -p "$work/coterie"
config="$work/coterie/cluster.toml"
write_cluster "$config" centralized
start_cluster "$bin" "$config" "$work/coterie/up.log"
up=$CLUSTER_PID
# Place by place, the three ways back to back, so that they meet alike
# whatever else this machine is doing.
for scope in n5 n1 16; do
    case "$scope" in
        n5) args=(--node 5 --clients 1) clients=1 where="at n5, the coordinator" ;;
        n1) args=(--node 1 --clients 1) clients=1 where="at n1" ;;
        16) args=(--total-clients 16) clients=16 where="over the 5 nodes" ;;
    esac
    for way in http chained two; do
        case "$way" in
            http) flags=(--http) system="coterie HTTP" ;;
            chained) flags=() system="coterie binary, chained" ;;
            two) flags=(--no-chain) system="coterie binary, 2 requests" ;;
        esac
        say "$system: $clients client(s) $where, ${seconds}s"
        report="$("$bin" workload --config "$config" "${args[@]}" "${flags[@]}" \
            --requests 100000000 --duration "${seconds}s" --no-witness --json)"
        row "$system" "$where" "$clients" "$report"
    done
done
stop "$up"

# Each coterie row's ratios to etcd (same client count) and, for HTTP, to
# the binary protocol at the same place.
jq -s '
    (map(select(.system == "etcd JSON gateway") | {key: (.clients | tostring), value: .cycles_per_s})
        | from_entries) as $etcd
    | (map(select(.system | startswith("coterie binary")) | {key: "\(.system)|\(.where)", value: .cycles_per_s})
        | from_entries) as $binary
    | map(. + {
        vs_etcd: (if .system == "etcd JSON gateway" or $etcd[.clients | tostring] == null then null
                  else (.cycles_per_s / $etcd[.clients | tostring] * 10 | round / 10) end),
        vs_binary_chained: (if .system == "coterie HTTP"
                  then (.cycles_per_s / $binary["coterie binary, chained|\(.where)"] * 100 | round / 100) else null end),
        vs_binary_2_requests: (if .system == "coterie HTTP"
                  then (.cycles_per_s / $binary["coterie binary, 2 requests|\(.where)"] * 100 | round / 100) else null end)
      })' "$rows" >"$work/table.json"

if $json; then
    cat "$work/table.json"
else
    jq -r '
        (["system", "where", "clients", "cycles/s", "p50 acquire us", "x etcd", "x binary chained", "x binary 2 req"]),
        (.[] | [.system, .where, .clients, .cycles_per_s, .p50_acquire_us,
                (.vs_etcd // "-"), (.vs_binary_chained // "-"), (.vs_binary_2_requests // "-")])
        | @tsv' "$work/table.json" | column -t -s $'\t'
fi
for n in "${notes[@]}"; do echo "$n" >&2; done
