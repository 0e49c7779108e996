#!/usr/bin/env bash
# coterie's lock next to what a user would reach for instead, all on this
# machine in one run: lock cycles (acquire + release) per second and the
# median time to acquire, with 1 client and with 5 contending clients.
#
# What each side does per cycle:
# - loopback floor: scripts/bench/pingpong.c, a bare TCP round trip
#   between two processes (TCP_NODELAY, blocking reads). Its first row
#   is 2 round trips a cycle (acquire, release: Redis's path); every
#   row's own floor is its hops at pingpong's rate (below); the floor
#   row's "p50 acquire" is pingpong's mean round trip. Its second
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
#   uncontended cycle; under contention the waiters spin on SET. With one
#   client, again pipelined (`redis-lock ... pipelined`): the release and
#   the next SET in one write, one round trip a cycle, which is what
#   coterie's chained cycle does; "vs pipelined" compares each row with it.
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
#   2 peer messages per entry (N+2 when a lone client elsewhere wakes a
#   parked ring, 0 when the parker enters again).
#   Durability: these clusters have no `state_dir`, so nothing is written
#   to disk. With one, a node writes a record only when its epoch changes
#   or its clock passes a reserve (once per 65,536 ticks); for centralized,
#   token-ring and ricart-agrawala nothing is written per grant (only the
#   quorum algorithms persist per grant), so a grant is as volatile as a
#   Redis SET here: the coordinator's queue and the token live in memory.
#   Grants are not replicated either: a new coordinator rebuilds the queue
#   from the nodes' requests.
#
# - roucairol-carvalho, one client at n1 taking the same lock again and
#   again: n1 keeps every peer's permission, so an entry is the client's
#   one round trip to its own node (release sent with the next acquire)
#   and 0 peer messages (2(N-1) per half a million entries renew the fence
#   reservation). No lock server can do this: its lock lives at the server.
# - centralized-lending, the same: the coordinator lends the lock to n1,
#   which asked twice in a row, and n1's entries issue the loan's fences
#   with no peer message (3 per 1,024 entries to renew the loan).
# - token-ring, the same: the token parks at n1 after its first entry
#   there (N + 2 messages), and stays while nobody else asks for it.
#
# - coterie from a blocking C client (scripts/bench/coterie-lock.c, the
#   chained cycle of the rows above with one connection and blocking
#   reads, as redis-lock.c takes Redis): the same paths without coterie's
#   tokio client, so that the node is compared with the Redis server
#   client for client. Rows for every single-client path on loopback.
# - coterie from its blocking Rust client (coterie_client::blocking, run
#   by the example crates/coterie-client/examples/lock-loop.rs): the same
#   rows, from the library a Rust program would use without tokio.
#
# Each row has its own floor: the one-way messages on its critical path
# per cycle ("hops": 2 for one round trip), at pingpong's speed per hop;
# "of floor" is the row's rate over that. A path on which a node must
# hear from every peer (ricart-agrawala at n1: its request goes to 4
# peers and all 4 answer) has a measured floor instead: pingpong's star,
# a C client asking a hub that asks 4 spokes, 10 messages a cycle as the
# path has, 4 of them in a row.
#
# With latency (DELAY_US, default 250, one way; 0 skips): Redis and one
# etcd member are measured again behind scripts/bench/delay-proxy.c, which
# holds each chunk DELAY_US each way; coterie's peer links get the agents'
# delay fault (`coterie fault delay`), whose smallest step is 1 ms (tokio's
# timer), so coterie's links are the slower ones. A client sits at its own
# node, as a locality-minded deployment runs it.
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

# row SYSTEM WHERE REPORT CLIENTS HOPS [MESSAGES]: a row from a client's
# JSON report (redis-lock, etcd-lock, coterie-lock, lock-loop: cycles_per_s,
# acquire_p50_us; coterie workload: throughput_per_s, latency_ms.p50), with HOPS, the
# one-way messages on its critical path per cycle (its floor), and
# MESSAGES, the mutex messages the whole cluster sent meanwhile, per entry.
row() {
    jq -c --arg system "$1" --arg where "$2" --argjson clients "$4" --argjson hops "$5" \
        --argjson messages "${6:-0}" --argjson delay "${ROW_DELAY_US:-0}" --arg kind "${ROW_FLOOR:-hops}" '
        def r: . * 100 | round / 100;
        {system: $system, where: $where, clients: $clients, floor_hops: $hops, delay_us: $delay,
         floor_kind: $kind}
        + if .latency_ms then
              {cycles_per_s: (.throughput_per_s | r), p50_acquire_us: (.latency_ms.p50 * 1000 | r),
               p99_acquire_us: (.latency_ms.p99 * 1000 | r),
               messages_per_entry: ($messages / ([.entries, 1] | max) | r)}
          else
              {cycles_per_s: (.cycles_per_s | r), p50_acquire_us: (.acquire_p50_us | r),
               p99_acquire_us: (.acquire_p99_us | r)}
              # coterie-lock and lock-loop count their cycles, each an entry.
              + if .cycles and ($system | startswith("coterie")) then
                    {messages_per_entry: ($messages / ([.cycles, 1] | max) | r)}
                else {} end
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
    echo "{\"system\":\"loopback floor\",\"where\":\"2 bare round trips\",\"clients\":1,\"floor_hops\":4,\"delay_us\":0,\"cycles_per_s\":$(jq -n "$rtt_per_s / 2"),\"p50_acquire_us\":$rtt_us,\"round_trip_us\":$rtt_us,\"round_trips_per_s\":$rtt_per_s}" >>"$rows"
    say "loopback: a ring of 3 processes, 20000 laps"
    local hops_per_s hop_us
    read -r hops_per_s hop_us < <("$work/pingpong" 20000 3)
    echo "{\"system\":\"loopback floor\",\"where\":\"3-message hand-over chain\",\"clients\":5,\"floor_hops\":3,\"delay_us\":0,\"cycles_per_s\":$(jq -n "$hops_per_s / 3"),\"p50_acquire_us\":$(jq -n "$hop_us * 3"),\"hop_us\":$hop_us,\"hops_per_s\":$hops_per_s}" >>"$rows"
    say "loopback: a star of a client, a hub and 4 spokes, 20000 cycles"
    local star_per_s star_us
    read -r star_per_s star_us < <("$work/pingpong" 20000 4 star)
    echo "{\"system\":\"loopback floor\",\"where\":\"a request to 4 peers and their answers\",\"clients\":1,\"floor_hops\":4,\"floor_kind\":\"star\",\"delay_us\":0,\"cycles_per_s\":$star_per_s,\"p50_acquire_us\":$star_us}" >>"$rows"
}

# delay_proxy LISTEN UPSTREAM: a delay-proxy from LISTEN to UPSTREAM
# (DELAY_US each way) in the background; its pid in PROXY_PID.
delay_proxy() {
    "$work/delay-proxy" "$1" "$2" "$delay_us" >"$work/proxy-$1.log" 2>&1 &
    PROXY_PID=$!
    wait_tcp "$1"
}

redis_run() {
    if ! command -v redis-server >/dev/null; then
        note "redis: skipped, no redis-server (apt-get install redis-server)"
        return 0
    fi
    cc -O2 -o "$work/redis-lock" scripts/bench/redis-lock.c
    local port proxy dir="$work/redis" pid clients report
    mkdir -p "$dir"
    read -r port proxy < <(free_ports 2)
    redis-server --port "$port" --bind 127.0.0.1 --dir "$dir" --save '' --appendonly no \
        --daemonize no >"$dir/log" 2>&1 &
    pid=$!
    wait_tcp "$port"
    for clients in 1 5; do
        say "redis: $clients client(s), ${seconds}s"
        report="$("$work/redis-lock" "$port" "$clients" "$seconds")"
        row redis "SET NX + EVALSHA" "$report" "$clients" "$((clients == 1 ? 4 : 2))"
    done
    say "redis, pipelined: 1 client, ${seconds}s"
    report="$("$work/redis-lock" "$port" 1 "$seconds" pipelined)"
    row "redis pipelined" "EVALSHA with the next SET NX" "$report" 1 2
    if [ "$delay_us" -gt 0 ]; then
        delay_proxy "$proxy" "$port"
        for clients in 1 5; do
            say "redis behind ${delay_us} us: $clients client(s), ${seconds}s"
            report="$("$work/redis-lock" "$proxy" "$clients" "$seconds")"
            ROW_DELAY_US=$delay_us row redis "behind the delay proxy" "$report" "$clients" \
                "$((clients == 1 ? 4 : 2))"
        done
        say "redis pipelined behind ${delay_us} us: 1 client, ${seconds}s"
        report="$("$work/redis-lock" "$proxy" 1 "$seconds" pipelined)"
        ROW_DELAY_US=$delay_us row "redis pipelined" "behind the delay proxy" "$report" 1 2
        stop "$PROXY_PID"
    fi
    stop "$pid"
}

etcd_run() {
    if ! command -v etcd >/dev/null || ! command -v etcdctl >/dev/null; then
        note "etcd: skipped, no etcd/etcdctl (apt-get install etcd-server etcd-client)"
        return 0
    fi
    local i clients report proxy first
    mkdir -p "$work/etcd"
    start_etcd "$work/etcd"
    for clients in 1 5; do
        say "etcd: $clients client(s), ${seconds}s"
        report="$(python3 scripts/bench/etcd-lock.py "$ETCD_ENDPOINTS" "$clients" "$seconds")"
        row etcd "3 members, v3 lock API" "$report" "$clients" 4
    done
    if [ "$delay_us" -gt 0 ]; then
        # One member behind the proxy: the client's two round trips are
        # delayed, the members' raft traffic is not.
        first="${ETCD_ENDPOINTS%%,*}"
        proxy="$(free_ports 1)"
        delay_proxy "$proxy" "${first##*:}"
        say "etcd behind ${delay_us} us: 1 client, ${seconds}s"
        report="$(python3 scripts/bench/etcd-lock.py "http://127.0.0.1:$proxy" 1 "$seconds")"
        ROW_DELAY_US=$delay_us row etcd "behind the delay proxy" "$report" 1 4
        stop "$PROXY_PID"
    fi
    for i in "${ETCD_PIDS[@]}"; do stop "$i"; done
}

# hops MUTEX SCOPE: the one-way messages on the critical path of a cycle
# (chained: the release goes with the next acquire).
hops() {
    case "$1/$2" in
        centralized/5 | roucairol-carvalho/1 | centralized-lending/1 | token-ring/1) echo 2 ;; # the client's round trip to its node
        centralized/1 | ricart-agrawala/1) echo 4 ;;    # and the node's to its peers
        centralized*/all) echo 4 ;;                     # release to the coordinator, grant to the next
        */all) echo 3 ;;                                # the next holder's node hears of the release
    esac
}

# floor_kind MUTEX SCOPE: how the row's floor is had. "star" where the
# node must hear from every peer (ricart-agrawala's request at n1): the
# floor is pingpong's star, a C hub asking 4 spokes, which two cores
# cannot serve as fast as 4 hops in a row; "hops" elsewhere.
floor_kind() {
    case "$1/$2" in
        ricart-agrawala/1) echo star ;;
        *) echo hops ;;
    esac
}

# blocking_row DIR MUTEX SCOPE SYSTEM WHERE CMD...: a row from one blocking
# client (CMD, which prints coterie-lock's JSON line) on the cluster in DIR,
# one client at node SCOPE, with the mutex messages the cluster sent
# meanwhile.
blocking_row() {
    local dir="$1" mutex="$2" scope="$3" system="$4" where="$5" before report after
    shift 5
    say "$system $where, ${seconds}s"
    before="$(mutex_sent "$dir/cluster.toml")"
    report="$("$@")"
    after="$(mutex_sent "$dir/cluster.toml")"
    ROW_FLOOR="$(floor_kind "$mutex" "$scope")" row "$system" "$where" "$report" 1 \
        "$(hops "$mutex" "$scope")" "$((after - before))"
}

# coterie_run MUTEX SCOPE...: one cluster of MUTEX, one workload per SCOPE
# (a node id: 1 client there; all: one client at every node). With
# COTERIE_DELAY set (e.g. 1ms), every node's peer links are delayed by it.
coterie_run() {
    local mutex="$1" dir="$work/coterie-$1${COTERIE_DELAY:+-delayed}" up scope clients where args
    local report before after port label="coterie $1"
    shift
    mkdir -p "$dir"
    write_cluster "$dir/cluster.toml" "$mutex"
    start_cluster "$bin" "$dir/cluster.toml" "$dir/up.log"
    up=$CLUSTER_PID
    if [ -n "${COTERIE_DELAY:-}" ]; then
        "$bin" fault --config "$dir/cluster.toml" delay "$COTERIE_DELAY" >/dev/null
        label="$label, peers ${COTERIE_DELAY} apart"
    fi
    for scope in "$@"; do
        if [ "$scope" = all ]; then
            args=() clients=5 where="one client per node"
        else
            args=(--node "$scope") clients=1 where="at n$scope"
            [ "$scope" = 5 ] && where="at n5, the coordinator"
            case "$mutex" in roucairol-carvalho | centralized-lending | token-ring) where="at n$scope, the same lock again" ;; esac
        fi
        say "$label: $clients client(s) $where, ${seconds}s"
        before="$(mutex_sent "$dir/cluster.toml")"
        report="$("$bin" workload --config "$dir/cluster.toml" "${args[@]}" --clients 1 \
            --requests 100000000 --duration "${seconds}s" --no-witness --json)"
        after="$(mutex_sent "$dir/cluster.toml")"
        ROW_DELAY_US=$coterie_delay_us ROW_FLOOR="$(floor_kind "$mutex" "$scope")" \
            row "$label" "$where" "$report" "$clients" "$(hops "$mutex" "$scope")" "$((after - before))"
        # The same path from the blocking clients, C and Rust, for a single
        # client on loopback.
        if [ "$clients" = 1 ] && [ -z "${COTERIE_DELAY:-}" ]; then
            port="$(client_port "$dir/cluster.toml" "$scope")"
            blocking_row "$dir" "$mutex" "$scope" "$label, C client" "$where" \
                "$work/coterie-lock" "$port" "$seconds"
            blocking_row "$dir" "$mutex" "$scope" "$label, blocking Rust client" "$where" \
                "$lock_loop" "127.0.0.1:$port" "$seconds"
        fi
    done
    stop "$up"
}

delay_us="${DELAY_US:-250}"
coterie_delay_us=0
cc -O2 -pthread -o "$work/delay-proxy" scripts/bench/delay-proxy.c
cc -O2 -o "$work/coterie-lock" scripts/bench/coterie-lock.c
cargo build --release -q -p coterie-client --example lock-loop
lock_loop="$PWD/target/release/examples/lock-loop"
note "temporary files (etcd's data) under $work: $(df -T "$work" | awk 'NR==2 {print $2 " on " $1}')"
floor_run
redis_run
etcd_run
coterie_run centralized 5 1 all
coterie_run token-ring 1 all
coterie_run ricart-agrawala 1 all
coterie_run roucairol-carvalho 1 all
coterie_run centralized-lending 1 all
if [ "$delay_us" -gt 0 ]; then
    coterie_delay_us=1000
    COTERIE_DELAY=1ms coterie_run roucairol-carvalho 1 all
    COTERIE_DELAY=1ms coterie_run centralized-lending 1
    COTERIE_DELAY=1ms coterie_run token-ring 1
    COTERIE_DELAY=1ms coterie_run centralized 1
fi

python3 - "$rows" "$json" "$notes" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
f = rows[0]
per_hop = f["round_trips_per_s"] * 2  # one-way messages per second, back to back
star = next(r["cycles_per_s"] for r in rows if r.get("floor_kind") == "star")
redis = {(r["clients"], r["delay_us"] > 0): r["cycles_per_s"] for r in rows if r["system"] == "redis"}
piped = {r["delay_us"] > 0: r["cycles_per_s"] for r in rows if r["system"] == "redis pipelined"}
for r in rows:
    base = redis.get((r["clients"], r["delay_us"] > 0))
    r["ratio_to_redis"] = round(r["cycles_per_s"] / base, 3) if base else None
    # A pipelined cycle is one client's: only single-client rows compare.
    base = piped.get(r["delay_us"] > 0) if r["clients"] == 1 else None
    r["ratio_to_redis_pipelined"] = round(r["cycles_per_s"] / base, 3) if base else None
    if r["delay_us"] == 0:
        by_hops = per_hop / r["floor_hops"]
        r["floor_cycles_per_s"] = round(star if r.get("floor_kind") == "star" else by_hops, 1)
        r["share_of_floor"] = round(r["cycles_per_s"] / r["floor_cycles_per_s"], 3)
    else:
        r["floor_cycles_per_s"] = r["share_of_floor"] = None
if sys.argv[2] == "true":
    print(json.dumps(rows, indent=2))
    sys.exit()
print(f"loopback round trip between two processes: {f['round_trip_us']} us ({f['round_trips_per_s']}/s);"
      f" a row's floor = {per_hop:.0f} one-way messages/s over its hops per cycle"
      f" (a star's: {star:.0f} cycles/s)")
head = ("system", "clients", "hops", "cycles/s", "floor", "of floor", "p50 acquire", "msgs/entry",
        "vs Redis", "vs pipelined")
w = max(len(f"{r['system']}, {r['where']}") for r in rows)
print(f"{head[0]:<{w}}  {head[1]:>7}  {head[2]:>4}  {head[3]:>9}  {head[4]:>9}  {head[5]:>8}  {head[6]:>11}"
      f"  {head[7]:>10}  {head[8]:>8}  {head[9]:>12}")
print("-" * (w + 104))
def times(x):
    return "-" if x is None else f"{x:.2f}x" if x >= 0.1 else f"{x:.3f}x"
for r in rows:
    share = r["share_of_floor"]
    share = "-" if share is None else f"{share:.0%}"
    floor = "-" if r["floor_cycles_per_s"] is None else f"{r['floor_cycles_per_s']:.0f}"
    msgs = r.get("messages_per_entry")
    msgs = "-" if msgs is None else f"{msgs:.3g}"
    print(f"{r['system'] + ', ' + r['where']:<{w}}  {r['clients']:>7}  {r['floor_hops']:>4}  {r['cycles_per_s']:>9.0f}"
          f"  {floor:>9}  {share:>8}  {r['p50_acquire_us']:>8.0f} us  {msgs:>10}  {times(r['ratio_to_redis']):>8}"
          f"  {times(r['ratio_to_redis_pipelined']):>12}")
for line in open(sys.argv[3]):
    print(line.rstrip())
EOF
