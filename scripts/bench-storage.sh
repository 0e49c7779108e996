#!/usr/bin/env bash
# What stable storage costs, next to the competitor a user would reach for:
# a single Redis with `appendfsync always` (every write flushed before it is
# acknowledged), doing SET NX + compare-and-delete from one client.
#
# coterie: a 5-node maekawa cluster on free local ports with a state
# directory, synced (`state_sync = true`: every record flushed to disk
# before the messages that depend on it leave; group commit) and unsynced,
# one client at n1, then one client per node, no witness, acquire +
# release, the release a request of its own (`--no-chain`): two round trips
# a cycle, as Redis's client makes, so the two sides compare like for like.
# Redis: redis-server with appendonly yes, appendfsync always, one client
# doing SET lock TOKEN NX, then EVAL compare-and-delete, in a loop.
#
# Both write to the same file system (a temporary directory). Prints
# entries (or lock cycles) per second and median latency for each, all in
# one run.
#
# Usage: scripts/bench-storage.sh [SECONDS]   (default 5 per run)
# COTERIE_BIN=PATH measures another build of coterie instead.
# Needs redis-server (apt-get install redis-server); skips Redis without it.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-5}"

if [ -n "${COTERIE_BIN:-}" ]; then
    bin="$COTERIE_BIN"   # another build, to compare
else
    cargo build --release -q
    bin=target/release/coterie
fi
work="$(mktemp -d "${TMPDIR:-/tmp}/coterie-bench-storage.XXXXXX")"
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT

source scripts/bench/cluster.sh

coterie_run() { # sync: true|false, clients: all (one per node) | one (at n1)
    local sync="$1" clients="$2" dir="$work/coterie-$1-$2" scope=()
    [ "$clients" = all ] || scope=(--node 1)
    mkdir -p "$dir"
    local sync_flag=()
    [ "$sync" = true ] || sync_flag=(--no-state-sync)
    write_cluster "$dir/cluster.toml" maekawa --state-dir "$dir/state" "${sync_flag[@]}"
    start_cluster "$bin" "$dir/cluster.toml" "$dir/up.log"
    local up=$CLUSTER_PID
    "$bin" workload --config "$dir/cluster.toml" "${scope[@]}" --clients 1 --requests 100000000 \
        --duration "${seconds}s" --no-witness --no-chain --json |
        jq -r --arg who "$([ "$clients" = all ] && echo '5 clients' || echo '1 client')" \
            '"coterie maekawa, 5 nodes, \($who), state_sync = '"$sync"': \(.throughput_per_s | round) entries/s  p50 \(.latency_ms.p50) ms  (\(.entries) entries)"'
    kill "$up" 2>/dev/null || true
    wait "$up" 2>/dev/null || true
}

redis_run() {
    if ! command -v redis-server >/dev/null; then
        echo "redis: skipped (no redis-server; apt-get install redis-server)"
        return
    fi
    local port dir="$work/redis"
    mkdir -p "$dir"
    port="$(free_ports 1)"
    redis-server --port "$port" --bind 127.0.0.1 --dir "$dir" --save '' \
        --appendonly yes --appendfsync always --daemonize no >"$dir/log" 2>&1 &
    local pid=$!
    for _ in $(seq 50); do
        (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
        sleep 0.1
    done
    python3 - "$port" "$seconds" <<'EOF'
import socket, sys, time
port, seconds = int(sys.argv[1]), float(sys.argv[2])
s = socket.create_connection(("127.0.0.1", port))
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
f = s.makefile("rb")
def cmd(*args):
    out = b"*%d\r\n" % len(args)
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    s.sendall(out)
    line = f.readline()
    if line[:1] == b"$" and line[1:3] != b"-1":
        f.readline()
    if line[:1] == b"-":
        raise SystemExit("redis: " + line.decode().strip())
    return line
unlock = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end"
latencies, n, end = [], 0, time.monotonic() + seconds
while time.monotonic() < end:
    t = time.monotonic()
    token = str(n)
    assert cmd("SET", "lock", token, "NX").startswith(b"+OK")
    assert cmd("EVAL", unlock, 1, "lock", token) == b":1\r\n"
    latencies.append(time.monotonic() - t)
    n += 1
latencies.sort()
print(f"redis, appendfsync always, 1 client, SET NX + compare-and-delete: {n / seconds:>8.0f} cycles/s  p50 {latencies[len(latencies) // 2] * 1000:.3f} ms  ({n} cycles)")
EOF
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}

echo "file system under $work: $(df -T "$work" | awk 'NR==2 {print $2 " on " $1}')"
for clients in one all; do
    coterie_run true "$clients"
    coterie_run false "$clients"
done
redis_run
