# Shared by the bench scripts (sourced, not run): free loopback ports, a
# cluster file on them, and a cluster started from it.

# free_ports N: N free loopback ports, space-separated.
free_ports() {
    python3 -c 'import socket, sys
s = [socket.socket() for _ in range(int(sys.argv[1]))]
[x.bind(("127.0.0.1", 0)) for x in s]
print(" ".join(str(x.getsockname()[1]) for x in s))' "$1"
}

# write_cluster FILE MUTEX [EXTRA]: a 5-node bully cluster of MUTEX on free
# ports, with EXTRA lines in its [cluster] section, faults allowed.
write_cluster() {
    local file="$1" mutex="$2" extra="${3:-}" ports
    read -r -a ports <<<"$(free_ports 10)"
    {
        printf '[cluster]\nname = "bench"\nmutex = "%s"\nelection = "bully"\n%s\n' "$mutex" "$extra"
        printf '[security]\nallow_faults = true\n\n'
        for i in 0 1 2 3 4; do
            printf '[[node]]\nid = %d\npeer = "127.0.0.1:%s"\nclient = "127.0.0.1:%s"\n' \
                $((i + 1)) "${ports[2*i]}" "${ports[2*i+1]}"
        done
    } >"$file"
}

# start_cluster BIN FILE LOG: `coterie up` on FILE in the background (its
# pid in CLUSTER_PID), then waits until every node follows n5.
start_cluster() {
    "$1" up --config "$2" 2>"$3" &
    CLUSTER_PID=$!
    for _ in $(seq 100); do
        "$1" status --config "$2" --json 2>/dev/null |
            python3 -c 'import json,sys; r=json.load(sys.stdin); sys.exit(0 if all(x.get("coordinator")==5 for x in r) else 1)' \
            && return 0
        sleep 0.1
    done
    echo "the cluster of $2 never agreed on n5" >&2
    return 1
}
