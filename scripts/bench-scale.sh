#!/usr/bin/env bash
# How a cluster on this one machine scales with its size. For each N:
#   demo   `coterie demo --nodes N --json` (centralized + bully unless
#          MUTEX/ELECTION say otherwise), REPEAT times: how long the
#          survivors took to agree after the coordinator's kill (from the
#          kill to the last survivor's following the new coordinator, by
#          the nodes' own event stamps; the median of the runs), and the
#          acquire latency (p50, p99; medians of the
#          runs) under the demo's workload: 2 clients per node, 1 ms inside,
#          2 ms between. That workload grows with N: 2N clients queue for
#          one lock, so a client waits about (2N - 1) hand-overs less its
#          2 ms of thought whatever the transport does. queue_ms is that
#          wait, with the hand-over (hold plus passing the lock on) taken
#          from the 5-node demo's throughput;
#   light  the demo again with 1 client per node thinking 200 ms between
#          entries (the lock is busy a third of the time at N = 64): what
#          an acquire costs when it does not queue behind 2N others;
#   idle   `coterie up` on N nodes with nothing to do: once they agree on a
#          coordinator, the CPU all N processes use over IDLE_S seconds
#          (in cores), and the median resident memory per node;
#   churn  during the idle window, how often a node declared a live peer
#          down (a detector that cannot keep up suspects the living).
# The failure detector is the default, `auto`: every peer watched up to 16
# nodes, a ring of 2 neighbours and the coordinator above (README, "Failure
# detection"); DETECTOR=all or DETECTOR=ring forces one for the idle runs.
# It prints one table, and writes it as TSV and as an SVG chart.
#
# Usage: scripts/bench-scale.sh [N...]     (default: 5 16 32 64 128)
#        IDLE_S=10 REPEAT=1 OUT=target/bench-scale  (where the TSV, SVG and logs go)
# Run it on a quiet machine: every node is a process, and the numbers are
# what N processes cost the cores there are.
set -euo pipefail
cd "$(dirname "$0")/.."
sizes=("$@")
[ "${#sizes[@]}" -gt 0 ] || sizes=(5 16 32 64 128)
idle_s="${IDLE_S:-10}"
out="${OUT:-target/bench-scale}"
mutex="${MUTEX:-centralized}"
election="${ELECTION:-bully}"
repeat="${REPEAT:-1}"
detector="${DETECTOR:-auto}"
mkdir -p "$out"
cargo build --release -q -p coterie
bin="$PWD/target/release/coterie"
work="$(mktemp -d)"
up_pid=""
cleanup() {
    [ -z "$up_pid" ] || kill "$up_pid" 2>/dev/null || true
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
tick="$(getconf CLK_TCK)"

# A cluster of N nodes on free loopback ports, with a fresh secret.
write_config() {
    local n="$1" dir="$2"
    head -c 32 /dev/urandom | base64 >"$dir/secret"
    "$bin" init --name "scale$n" --nodes "$n" --mutex "$mutex" --election "$election" --free-ports --no-state-dir \
        --set security.secret_file=secret --set "timing.detector=$detector" --force --out "$dir/cluster.toml"
}

# utime + stime of every pid given, in clock ticks, read by one process
# (a loop of 64 reads would itself take seconds on a saturated machine).
cpu_ticks() {
    local files=() pid
    for pid in "$@"; do files+=("/proc/$pid/stat"); done
    # Fields 14 and 15, counted after the command's closing paren.
    cat "${files[@]}" 2>/dev/null | sed 's/.*) //' | awk '{s += $12 + $13} END {print s + 0}'
}

printf 'nodes\tagree_after_kill_ms\tacquire_p50_ms\tacquire_p99_ms\tqueue_ms\tlight_p50_ms\tlight_p99_ms\tidle_cores\trss_mb_per_node\tsuspicions_per_s\n' >"$out/scale.tsv"
for n in "${sizes[@]}"; do
    for r in $(seq "$repeat"); do
        echo "== $n nodes: demo ($r of $repeat)" >&2
        "$bin" demo --nodes "$n" --mutex "$mutex" --election "$election" --json \
            >"$out/demo-$n-$r.json" 2>"$out/demo-$n-$r.log" || true
    done
    echo "== $n nodes: demo, light load" >&2
    "$bin" demo --nodes "$n" --mutex "$mutex" --election "$election" --clients 1 --think 200ms --json \
        >"$out/light-$n.json" 2>"$out/light-$n.log" || true
    read -r agree p50 p99 queue light50 light99 < <(python3 - "$out" "$n" "$repeat" <<'EOF'
import json, statistics, sys
out, n, repeat = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def load(path):
    try:
        return json.load(open(path))
    except Exception:
        return None
def fmt(v):
    return "-" if v is None else f"{v:.1f}" if v >= 10 else f"{v:.2f}"
def med(vs):
    vs = [v for v in vs if v is not None]
    return statistics.median(vs) if vs else None
runs = [d for d in (load(f"{out}/demo-{n}-{r}.json") for r in range(1, repeat + 1)) if d]
def agree(d):
    # From the kill to the moment the last survivor followed the new
    # coordinator, as the nodes stamped it on their event streams (the
    # demo's own figure polls every node's status, which at 64 nodes on a
    # busy machine takes longer than the election).
    tl = d.get("timeline", [])
    kill = next((e for e in tl if e["kind"] == "step" and "kill" in e["event"]), None)
    if kill is None:
        return None
    after = (e for e in tl if e["kind"] == "election" and e["t_ms"] > kill["t_ms"])
    first = next(after, None)
    return first["t_ms"] - kill["t_ms"] if first else None
light = load(f"{out}/light-{n}.json") or {}
five = load(f"{out}/demo-5-1.json")
handover = 1000 / five["throughput_per_s"] if five and five.get("throughput_per_s") else None
queue = max((2 * n - 1) * handover - 2, 0) if handover else None
print(fmt(med(agree(d) for d in runs)),
      fmt(med(d["latency_ms"]["p50"] for d in runs)), fmt(med(d["latency_ms"]["p99"] for d in runs)),
      fmt(queue), fmt(light.get("latency_ms", {}).get("p50")), fmt(light.get("latency_ms", {}).get("p99")))
EOF
)

    echo "== $n nodes: idle for ${idle_s}s" >&2
    dir="$work/c$n"
    mkdir -p "$dir"
    write_config "$n" "$dir"
    "$bin" up --config "$dir/cluster.toml" >"$out/up-$n.log" 2>&1 &
    up_pid=$!
    # Wait (up to 60 s) until every node answers and all follow one
    # coordinator, then a few seconds more for the start-up to settle.
    for _ in $(seq 120); do
        if "$bin" status --config "$dir/cluster.toml" --json 2>/dev/null |
            jq -e --argjson n "$n" 'length == $n and ([.[].coordinator] | unique | length == 1) and .[0].coordinator != null' \
                >/dev/null; then
            break
        fi
        sleep 0.5
    done
    sleep 3
    mapfile -t pids < <(pgrep -f -- "--config $dir/cluster.toml --id" || true)
    before_log=$(grep -c "peer down" "$out/up-$n.log" || true)
    t0=$(cpu_ticks "${pids[@]}")
    w0=$(date +%s%N)
    sleep "$idle_s"
    t1=$(cpu_ticks "${pids[@]}")
    w1=$(date +%s%N)
    after_log=$(grep -c "peer down" "$out/up-$n.log" || true)
    rss=$(for pid in "${pids[@]}"; do awk '/^VmRSS/ {print $2}' "/proc/$pid/status" 2>/dev/null; done | sort -n | awk '{a[NR]=$1} END {if (NR) printf "%.1f", a[int((NR+1)/2)]/1024; else print "-"}')
    cores=$(awk -v d=$((t1 - t0)) -v hz="$tick" -v ns=$((w1 - w0)) 'BEGIN {printf "%.2f", d / hz / (ns / 1e9)}')
    churn=$(awk -v d=$((after_log - before_log)) -v s="$idle_s" 'BEGIN {printf "%.1f", d / s}')
    kill "$up_pid" 2>/dev/null || true
    wait "$up_pid" 2>/dev/null || true
    up_pid=""
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$n" "$agree" "$p50" "$p99" "$queue" "$light50" "$light99" \
        "$cores" "$rss" "$churn" | tee -a "$out/scale.tsv" >&2
done

column -t -s $'\t' "$out/scale.tsv"

# The chart: one panel per measure, N along the bottom.
python3 - "$out/scale.tsv" "$out/scale.svg" <<'EOF'
import sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])]
head, rows = rows[0], rows[1:]
def num(v):
    try: return float(v)
    except ValueError: return None
ns = [int(r[0]) for r in rows]
panels = [(1, "agree after kill (ms)"), (2, "acquire p50, demo (ms)"), (5, "acquire p50, light load (ms)"),
          (7, "idle CPU (cores)"), (8, "RSS per node (MB)"), (9, "suspicions/s, idle")]
W, H, PAD = 300, 200, 40
svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{3 * W}" height="{2 * H}" font-family="sans-serif" font-size="11">',
       '<rect width="100%" height="100%" fill="white"/>']
for k, (col, title) in enumerate(panels):
    ox, oy = (k % 3) * W, (k // 3) * H
    pts = [(n, num(r[col])) for n, r in zip(ns, rows) if num(r[col]) is not None]
    svg.append(f'<text x="{ox + W / 2}" y="{oy + 16}" text-anchor="middle" font-weight="bold">{title}</text>')
    x0, y0, x1, y1 = ox + PAD, oy + H - PAD / 2 - 10, ox + W - 15, oy + 28
    svg.append(f'<line x1="{x0}" y1="{y0}" x2="{x1}" y2="{y0}" stroke="#333"/><line x1="{x0}" y1="{y0}" x2="{x0}" y2="{y1}" stroke="#333"/>')
    if not pts:
        continue
    top = (max(v for _, v in pts) or 1.0) * 1.2
    nmax = max(ns)
    xy = [(x0 + (x1 - x0) * n / nmax, y0 - (y0 - y1) * v / top) for n, v in pts]
    svg.append('<polyline fill="none" stroke="#1f77b4" stroke-width="2" points="' + " ".join(f"{x:.1f},{y:.1f}" for x, y in xy) + '"/>')
    for (n, v), (x, y) in zip(pts, xy):
        svg.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="#1f77b4"/>')
        svg.append(f'<text x="{x:.1f}" y="{y - 6:.1f}" text-anchor="middle">{v:g}</text>')
        svg.append(f'<text x="{x:.1f}" y="{y0 + 13:.1f}" text-anchor="middle">{n}</text>')
svg.append('</svg>')
open(sys.argv[2], "w").write("\n".join(svg))
EOF
echo "wrote $out/scale.tsv and $out/scale.svg" >&2
