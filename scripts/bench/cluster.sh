# Shared by the bench scripts (sourced, not run): free loopback ports, a
# cluster file on them, a cluster started from it, and etcd beside it.

# bench_start NAME [--json]: how a bench script begins. Sets json (true
# with --json), seconds (DURATION, default 5), bin (COTERIE_BIN, or a
# fresh release build) and work (a temporary directory, removed at exit
# with the script's background jobs stopped).
bench_start() {
    local name="$1"
    json=false
    case "${2:-}" in
        --json) json=true ;;
        "") ;;
        *) echo "usage: $0 [--json]" >&2; exit 2 ;;
    esac
    seconds="${DURATION:-5}"
    if [ -n "${COTERIE_BIN:-}" ]; then
        bin="$COTERIE_BIN"
    else
        cargo build --release -q
        bin=target/release/coterie
    fi
    work="$(mktemp -d "${TMPDIR:-/tmp}/coterie-$name.XXXXXX")"
    trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT
}

# free_ports N: N free loopback ports, space-separated.
free_ports() {
    python3 -c 'import socket, sys
s = [socket.socket() for _ in range(int(sys.argv[1]))]
[x.bind(("127.0.0.1", 0)) for x in s]
print(" ".join(str(x.getsockname()[1]) for x in s))' "$1"
}

# write_cluster FILE MUTEX [FLAG...]: a 5-node bully cluster of MUTEX on
# free loopback ports (peer, client and HTTP API each), faults allowed, in
# partition mode PARTITIONS (majority, the default, or detector), written
# by `coterie init` (with FLAGs too, e.g. --state-dir DIR) of this tree's
# build, whichever build a script measures.
write_cluster() {
    local file="$1" mutex="$2"
    shift 2
    [ -x target/release/coterie ] || cargo build --release -q
    target/release/coterie init --name bench --nodes 5 --mutex "$mutex" --election bully \
        --free-ports --http --allow-faults --partition-mode "${PARTITIONS:-majority}" \
        "$@" --force --out "$file"
}

# start_cluster BIN FILE LOG: `coterie up` on FILE in the background (its
# pid in CLUSTER_PID), then waits until every node follows n5.
start_cluster() {
    "$1" up --config "$2" 2>"$3" &
    CLUSTER_PID=$!
    for _ in $(seq 100); do
        "$1" status --config "$2" --json 2>/dev/null |
            jq -e 'all(.coordinator == 5)' >/dev/null \
            && return 0
        sleep 0.1
    done
    echo "the cluster of $2 never agreed on n5" >&2
    return 1
}

# client_port FILE ID: node ID's client port in cluster file FILE.
client_port() {
    python3 -c 'import sys, tomllib
c = tomllib.load(open(sys.argv[1], "rb"))
print(next(n["client"] for n in c["node"] if n["id"] == int(sys.argv[2])).rsplit(":", 1)[1])' "$1" "$2"
}

# stop PID: SIGTERM, then wait for it.
stop() {
    kill "$1" 2>/dev/null || true
    wait "$1" 2>/dev/null || true
}

# start_etcd DIR: three etcd members on free ports, data under DIR (logs
# too), in the background; then waits until they are healthy. Sets
# ETCD_ENDPOINTS (comma-separated client URLs) and ETCD_PIDS.
start_etcd() {
    local dir="$1" ports peers="" i
    ETCD_ENDPOINTS="" ETCD_PIDS=()
    read -r -a ports <<<"$(free_ports 6)"
    for i in 0 1 2; do
        peers+="${peers:+,}m$i=http://127.0.0.1:${ports[2*i]}"
        ETCD_ENDPOINTS+="${ETCD_ENDPOINTS:+,}http://127.0.0.1:${ports[2*i+1]}"
    done
    for i in 0 1 2; do
        etcd --name "m$i" --data-dir "$dir/m$i" \
            --listen-peer-urls "http://127.0.0.1:${ports[2*i]}" \
            --initial-advertise-peer-urls "http://127.0.0.1:${ports[2*i]}" \
            --listen-client-urls "http://127.0.0.1:${ports[2*i+1]}" \
            --advertise-client-urls "http://127.0.0.1:${ports[2*i+1]}" \
            --initial-cluster "$peers" --initial-cluster-token bench --initial-cluster-state new \
            --logger zap --log-level error >"$dir/m$i.log" 2>&1 &
        ETCD_PIDS+=($!)
    done
    for _ in $(seq 100); do
        if ETCDCTL_API=3 etcdctl --endpoints "$ETCD_ENDPOINTS" --command-timeout 1s endpoint health \
            >"$dir/health" 2>&1; then
            return 0
        fi
        sleep 0.1
    done
    cat "$dir/health" >&2
    echo "etcd: the three members never became healthy (logs: $dir/m*.log)" >&2
    return 1
}
