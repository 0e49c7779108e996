#!/usr/bin/env bash
# coterie's lock next to what a user would reach for instead, all on this
# machine in one run: lock cycles (acquire + release) per second and the
# median time to acquire, with 1 client and with 5 contending clients.
#
# What each side does per cycle:
# - loopback floor: scripts/bench/pingpong.c, a bare TCP round trip
#   between two processes (TCP_NODELAY, blocking reads). The floor for a
#   cycle is 2 round trips (acquire, release), so "floor" below is
#   pingpong's round trips/s / 2 and every row's share is of that; the
#   floor row's "p50 acquire" is pingpong's mean round trip. Its second
#   row is the floor for 5 contending clients, one per node: the next
#   holder enters only once news of the release has come to it, a chain
#   of at least 3 messages between processes (client -> its node -> the
#   next holder's node -> client); `pingpong N 3` passes a message round
#   a ring of 3 processes, and a hand-over costs 3 of its hops (its "p50
#   acquire" is those 3 hops). Redis's chain is 2 (client -> server ->
#   client).
# - Redis (scripts/bench/redis-lock.c, a C client speaking RESP, one
#   connection and token per client process): a single redis-server,
#   `--save '' --appendonly no`: in memory, no replication, no durability.
#   Acquire = SET lock TOKEN NX PX 30000, sent again at once on nil (how a
#   Redis lock client waits); release = compare-and-delete, EVALSHA of the
#   script loaded once per connection with SCRIPT LOAD. 2 round trips per
#   uncontended cycle; under contention the waiters spin on SET.
# - etcd, if etcd and etcdctl are installed (scripts/bench/etcd-lock.py,
#   python over the v3 JSON gateway, one HTTP connection per client, the
#   clients spread over the members): three members, data in a temporary
#   directory. One lease per client; acquire = POST /v3/lock/lock, release
#   = POST /v3/lock/unlock: 2 round trips, each a raft write committed by a
#   majority, every member fsyncing its log: replicated and durable.
# - coterie (`coterie workload --no-witness`, one tokio client task per
#   client): 5 nodes under bully (n5 coordinates), restarted for each
#   mutex. centralized, client at the coordinator: 2 client round trips;
#   at another node 3 (client -> node -> coordinator and back, then the
#   release). ricart-agrawala: 2 client round trips plus 2(N-1) = 8 peer
#   messages per entry (a request to every peer, a reply from each).
#   token-ring, every node wanting: the token's hop to the next node, 1 to
#   2 peer messages per entry (N+2 when a lone client wakes a parked ring).
#   Durability: these clusters have no `state_dir`, so nothing is written
#   to disk. With one, a node writes a record only when its epoch changes
#   or its clock passes a reserve (once per 65,536 ticks); for centralized,
#   token-ring and ricart-agrawala nothing is written per grant (only the
#   quorum algorithms persist per grant), so a grant is as volatile as a
#   Redis SET here: the coordinator's queue and the token live in memory.
#   Grants are not replicated either: a new coordinator rebuilds the queue
#   from the nodes' requests.
#
# Usage: scripts/bench-vs.sh [--json]   (--json: the rows as a JSON array)
# DURATION=SECONDS per run (default 5). COTERIE_BIN=PATH measures that
# build instead of building target/release/coterie.
# Redis: apt-get install redis-server. etcd: apt-get install etcd-server
# etcd-client. Each is skipped, with a note, when it is not installed.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/bench/cluster.sh
source scripts/bench/cluster.sh
bench_start bench-vs "$@"
rows="$work/rows.jsonl"
notes="$work/notes"
: >"$rows"
: >"$notes"

say() { echo "bench-vs: $*" >&2; }
note() { echo "$*" >>"$notes"; say "$*"; }

# row SYSTEM WHERE REPORT CLIENTS [MESSAGES]: a row from a client's JSON
# report (redis-lock, etcd-lock: cycles_per_s, acquire_p50_us; coterie
# workload: throughput_per_s, latency_ms.p50), with MESSAGES, the mutex
# messages the whole cluster sent meanwhile, per entry.
row() {
    jq -c --arg system "$1" --arg where "$2" --argjson clients "$4" --argjson messages "${5:-0}" '
        def r: . * 100 | round / 100;
        {system: $system, where: $where, clients: $clients}
        + if .latency_ms then
              {cycles_per_s: (.throughput_per_s | r), p50_acquire_us: (.latency_ms.p50 * 1000 | r),
               p99_acquire_us: (.latency_ms.p99 * 1000 | r),
               messages_per_entry: ($messages / ([.entries, 1] | max) | r)}
          else
              {cycles_per_s: (.cycles_per_s | r), p50_acquire_us: (.acquire_p50_us | r),
               p99_acquire_us: (.acquire_p99_us | r)}
          end' <<<"$3" >>"$rows"
}

# mutex_sent FILE: mutex messages sent so far by every node of FILE.
# (workload's own messages_per_entry counts only the nodes it drives.)
mutex_sent() {
    "$bin" status --config "$1" --json |
        jq 'map(.mutex_messages_sent // 0) | add'
}

# wait_tcp PORT: until something listens on 127.0.0.1:PORT (10 s at most).
wait_tcp() {
    for _ in $(seq 100); do
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        sleep 0.1
    done
    echo "nothing listens on 127.0.0.1:$1" >&2
    return 1
}

floor_run() {
    say "loopback: pingpong, 50000 round trips"
    cc -O2 -o "$work/pingpong" scripts/bench/pingpong.c
    local rtt_per_s rtt_us
    read -r rtt_per_s rtt_us < <("$work/pingpong" 50000)
    echo "{\"system\":\"loopback floor\",\"where\":\"2 bare round trips\",\"clients\":1,\"cycles_per_s\":$(jq -n "$rtt_per_s / 2"),\"p50_acquire_us\":$rtt_us,\"round_trip_us\":$rtt_us,\"round_trips_per_s\":$rtt_per_s}" >>"$rows"
    say "loopback: a ring of 3 processes, 20000 laps"
    local hops_per_s hop_us
    read -r hops_per_s hop_us < <("$work/pingpong" 20000 3)
    echo "{\"system\":\"loopback floor\",\"where\":\"3-message hand-over chain\",\"clients\":5,\"cycles_per_s\":$(jq -n "$hops_per_s / 3"),\"p50_acquire_us\":$(jq -n "$hop_us * 3"),\"hop_us\":$hop_us,\"hops_per_s\":$hops_per_s}" >>"$rows"
}

redis_run() {
    if ! command -v redis-server >/dev/null; then
        note "redis: skipped, no redis-server (apt-get install redis-server)"
        return 0
    fi
    cc -O2 -o "$work/redis-lock" scripts/bench/redis-lock.c
    local port dir="$work/redis" pid clients report
    mkdir -p "$dir"
    port="$(free_ports 1)"
    redis-server --port "$port" --bind 127.0.0.1 --dir "$dir" --save '' --appendonly no \
        --daemonize no >"$dir/log" 2>&1 &
    pid=$!
    wait_tcp "$port"
    for clients in 1 5; do
        say "redis: $clients client(s), ${seconds}s"
        report="$("$work/redis-lock" "$port" "$clients" "$seconds")"
        row redis "SET NX + EVALSHA" "$report" "$clients"
    done
    stop "$pid"
}

etcd_run() {
    if ! command -v etcd >/dev/null || ! command -v etcdctl >/dev/null; then
        note "etcd: skipped, no etcd/etcdctl (apt-get install etcd-server etcd-client)"
        return 0
    fi
    local i clients report
    mkdir -p "$work/etcd"
    start_etcd "$work/etcd"
    for clients in 1 5; do
        say "etcd: $clients client(s), ${seconds}s"
        report="$(python3 scripts/bench/etcd-lock.py "$ETCD_ENDPOINTS" "$clients" "$seconds")"
        row etcd "3 members, v3 lock API" "$report" "$clients"
    done
    for i in "${ETCD_PIDS[@]}"; do stop "$i"; done
}

# coterie_run MUTEX SCOPE...: one cluster of MUTEX, one workload per SCOPE
# (a node id: 1 client there; all: one client at every node).
coterie_run() {
    local mutex="$1" dir="$work/coterie-$1" up scope clients where args report before after
    shift
    mkdir -p "$dir"
    write_cluster "$dir/cluster.toml" "$mutex"
    start_cluster "$bin" "$dir/cluster.toml" "$dir/up.log"
    up=$CLUSTER_PID
    for scope in "$@"; do
        if [ "$scope" = all ]; then
            args=() clients=5 where="one client per node"
        else
            args=(--node "$scope") clients=1 where="at n$scope"
            [ "$scope" = 5 ] && where="at n5, the coordinator"
        fi
        say "coterie $mutex: $clients client(s) $where, ${seconds}s"
        before="$(mutex_sent "$dir/cluster.toml")"
        report="$("$bin" workload --config "$dir/cluster.toml" "${args[@]}" --clients 1 \
            --requests 100000000 --duration "${seconds}s" --no-witness --json)"
        after="$(mutex_sent "$dir/cluster.toml")"
        row "coterie $mutex" "$where" "$report" "$clients" "$((after - before))"
    done
    stop "$up"
}

note "temporary files (etcd's data) under $work: $(df -T "$work" | awk 'NR==2 {print $2 " on " $1}')"
floor_run
redis_run
etcd_run
coterie_run centralized 5 1 all
coterie_run token-ring all
coterie_run ricart-agrawala 1 all

python3 - "$rows" "$json" "$notes" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
floor = next(r["cycles_per_s"] for r in rows if r["system"] == "loopback floor")
redis = {r["clients"]: r["cycles_per_s"] for r in rows if r["system"] == "redis"}
for r in rows:
    base = redis.get(r["clients"])
    r["ratio_to_redis"] = round(r["cycles_per_s"] / base, 3) if base else None
    r["share_of_floor"] = round(r["cycles_per_s"] / floor, 3)
if sys.argv[2] == "true":
    print(json.dumps(rows, indent=2))
    sys.exit()
f = rows[0]
print(f"loopback round trip between two processes: {f['round_trip_us']} us ({f['round_trips_per_s']}/s);"
      f" floor = 2 round trips per cycle = {floor:.0f} cycles/s")
head = ("system", "clients", "cycles/s", "p50 acquire", "vs Redis", "of floor")
w = max(len(f"{r['system']}, {r['where']}") for r in rows)
print(f"{head[0]:<{w}}  {head[1]:>7}  {head[2]:>9}  {head[3]:>11}  {head[4]:>8}  {head[5]:>8}")
print("-" * (w + 54))
for r in rows:
    x, share = r["ratio_to_redis"], r["share_of_floor"]
    ratio = "-" if x is None else f"{x:.2f}x" if x >= 0.1 else f"{x:.3f}x"
    share = f"{share:.0%}" if share >= 0.1 else f"{share:.1%}"
    print(f"{r['system'] + ', ' + r['where']:<{w}}  {r['clients']:>7}  {r['cycles_per_s']:>9.0f}"
          f"  {r['p50_acquire_us']:>8.0f} us  {ratio:>8}  {share:>8}")
for line in open(sys.argv[3]):
    print(line.rstrip())
EOF
