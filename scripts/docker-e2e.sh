#!/usr/bin/env bash
# End-to-end test of the docker packaging: build the image, start five nodes
# and a witness with compose, check they agree on coordinator 5, run a
# workload, kill node5, check the survivors elect 4, run another workload,
# and ask the witness whether mutual exclusion ever broke.
#
# Exits 0 on success; on failure prints why and the last 50 log lines of
# every container. The compose project gets a name of its own and is always
# torn down (down -v --remove-orphans), whatever happens.
#
# Usage: scripts/docker-e2e.sh
# Environment:
#   SKIP_BUILD=1        reuse the existing image instead of running
#                       scripts/build-image.sh
#   COTERIE_IMAGE       image to test (default coterie:latest)
#   START_TIMEOUT       seconds for the first agreement      (default 60)
#   ELECT_TIMEOUT       seconds for the re-election          (default 15)
#   WORKLOAD_ARGS       workload flags (default: --clients 2 --requests 50 --hold 1ms)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PROJECT="coterie-e2e-$$"
CONFIG=/config/docker.toml          # inside the image
START_TIMEOUT="${START_TIMEOUT:-60}"
ELECT_TIMEOUT="${ELECT_TIMEOUT:-15}"
read -r -a WORKLOAD_FLAGS <<<"${WORKLOAD_ARGS:---clients 2 --requests 50 --hold 1ms}"

log() { printf '[docker-e2e %s] %s\n' "$(date +%H:%M:%S)" "$*"; }
fail() {
    printf '[docker-e2e %s] FAILED: %s\n' "$(date +%H:%M:%S)" "$*" >&2
    exit 1
}

# --- compose detection ------------------------------------------------------
if docker compose version >/dev/null 2>&1; then
    COMPOSE=(docker compose)
elif command -v docker-compose >/dev/null 2>&1 && docker-compose version >/dev/null 2>&1; then
    COMPOSE=(docker-compose)
else
    fail "neither 'docker compose' nor 'docker-compose' answers"
fi
DC=("${COMPOSE[@]}" -p "$PROJECT" -f "$ROOT/docker-compose.yml")
export COTERIE_IMAGE="${COTERIE_IMAGE:-coterie:latest}"

TMP="$(mktemp -d "${TMPDIR:-/tmp}/coterie-e2e.XXXXXX")"
STARTED=0

cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    if [ "$rc" -ne 0 ] && [ "$STARTED" = 1 ]; then
        log "container states:"
        "${DC[@]}" ps 2>&1 || true
        log "last 50 log lines of each container:"
        "${DC[@]}" logs --no-color --tail=50 2>&1 || true
    fi
    if [ "$STARTED" = 1 ]; then
        log "tearing down project $PROJECT"
        "${DC[@]}" down -v --remove-orphans >"$TMP/down.log" 2>&1 \
            || { cat "$TMP/down.log" >&2; log "warning: 'down' failed"; }
    fi
    rm -rf "$TMP"
    if [ "$rc" -eq 0 ]; then
        log "PASSED"
    else
        log "exit status $rc"
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Run the coterie CLI inside a running service's container (the image has no
# shell, so the binary is exec'd directly). stdout is the command's; its
# stderr (logs) goes to $TMP/stderr. Bounded, so a hung command fails the
# test instead of hanging it.
cot() {
    local svc="$1" limit="$2"
    shift 2
    timeout --kill-after=5 "$limit" \
        "${DC[@]}" exec -T "$svc" /coterie "$@" </dev/null 2>"$TMP/stderr"
}

# Reads `status --json` on stdin. Prints a one-line picture of the cluster;
# exits 0 when every id in IDS is reachable and names WANT as coordinator,
# 1 when not (yet), 2 when the output is not the expected JSON.
STATUS_CHECK='
import json, sys
want = int(sys.argv[1])
ids = [int(x) for x in sys.argv[2].split(",")]
raw = sys.stdin.read()
try:
    rows = json.loads(raw)
    by_id = {int(r["id"]): r for r in rows}
except Exception as e:
    print("unparsable status output (%s): %r" % (e, raw[:200]))
    sys.exit(2)
parts = []
for i in sorted(by_id):
    r = by_id[i]
    if r.get("reachable") is False:
        parts.append("%d:unreachable" % i)
    else:
        parts.append("%d:coord=%s/epoch=%s/alive=%s" % (
            i, r.get("coordinator"), r.get("epoch"),
            ",".join(str(a) for a in r.get("alive") or [])))
print("  ".join(parts))
ok = all(i in by_id and by_id[i].get("reachable") is not False
         and by_id[i].get("coordinator") == want for i in ids)
sys.exit(0 if ok else 1)
'

# wait_for_coordinator FROM_SERVICE WANT IDS TIMEOUT_S
# Polls status from FROM_SERVICE until every node in IDS (comma-separated)
# is reachable and agrees that WANT is the coordinator. Prints the cluster's
# picture whenever it changes. Sets WAITED_MS.
wait_for_coordinator() {
    local from="$1" want="$2" ids="$3" limit="$4"
    local start now deadline line last="" out rc exec_rc
    start="$(date +%s%N)"
    deadline=$(($(date +%s) + limit))
    while :; do
        exec_rc=0
        out="$(cot "$from" 10 status --config "$CONFIG" --json)" || exec_rc=$?
        rc=0
        line="$(printf '%s' "$out" | python3 -c "$STATUS_CHECK" "$want" "$ids")" || rc=$?
        if [ "$rc" -eq 2 ]; then
            line="$line | exec status $exec_rc"
            [ -s "$TMP/stderr" ] && line="$line, stderr: $(tail -n 1 "$TMP/stderr")"
        fi
        if [ "$line" != "$last" ]; then
            log "  status: $line"
            last="$line"
        fi
        if [ "$rc" -eq 0 ]; then
            now="$(date +%s%N)"
            WAITED_MS=$(((now - start) / 1000000))
            return 0
        fi
        if [ "$(date +%s)" -ge "$deadline" ]; then
            log "  last status output: $out"
            [ -s "$TMP/stderr" ] && log "  last status stderr: $(tail -n 5 "$TMP/stderr")"
            return 1
        fi
        sleep 0.5
    done
}

# Reads a workload or witness JSON report on stdin; prints a summary line;
# exits 1 if it shows a safety violation or (for a workload) no entries.
REPORT_CHECK='
import json, sys
kind = sys.argv[1]
raw = sys.stdin.read()
try:
    r = json.loads(raw)
except Exception as e:
    print("unparsable %s output (%s): %r" % (kind, e, raw[:300]))
    sys.exit(1)
v, s = r.get("violations"), r.get("stale_fences")
if kind == "workload":
    lat = r.get("latency_ms") or {}
    print("entries=%s throughput=%s/s latency_ms p50=%s p99=%s max=%s "
          "messages/entry=%s violations=%s stale_fences=%s" % (
          r.get("entries"), r.get("throughput_per_s"), lat.get("p50"),
          lat.get("p99"), lat.get("max"), r.get("messages_per_entry"), v, s))
    ok = v == 0 and s == 0 and isinstance(r.get("entries"), int) and r["entries"] > 0
else:
    print("entries=%s violations=%s stale_fences=%s max_holders=%s" % (
          r.get("entries"), v, s, r.get("max_holders")))
    ok = v == 0 and s == 0
sys.exit(0 if ok else 1)
'

# run_workload FROM_SERVICE LABEL  -> sets REPORT
run_workload() {
    local from="$1" label="$2" out rc=0
    log "workload ($label) from $from: workload ${WORKLOAD_FLAGS[*]}"
    out="$(cot "$from" 180 workload --config "$CONFIG" "${WORKLOAD_FLAGS[@]}" --json)" || rc=$?
    if [ "$rc" -ne 0 ]; then
        log "  workload output: $out"
        log "  workload stderr (tail):"; tail -n 20 "$TMP/stderr" >&2 || true
        fail "workload ($label) exited with status $rc"
    fi
    if ! REPORT="$(printf '%s' "$out" | python3 -c "$REPORT_CHECK" workload)"; then
        log "  workload output: $out"
        fail "workload ($label): $REPORT"
    fi
    log "  $REPORT"
}

# --- 1. image ---------------------------------------------------------------
log "compose: ${COMPOSE[*]}; project: $PROJECT; image: $COTERIE_IMAGE"
if [ "${SKIP_BUILD:-0}" = 1 ]; then
    log "SKIP_BUILD=1: using the existing image"
    docker image inspect "$COTERIE_IMAGE" >/dev/null 2>&1 || fail "no image $COTERIE_IMAGE"
else
    log "building the image"
    "$ROOT/scripts/build-image.sh" || fail "scripts/build-image.sh failed"
fi

# --- 2. cluster up ----------------------------------------------------------
STARTED=1
log "starting 5 nodes and a witness"
if ! "${DC[@]}" up -d >"$TMP/up.log" 2>&1; then
    sed 's/^/  /' "$TMP/up.log"
    fail "compose up failed"
fi
sed 's/^/  /' "$TMP/up.log"

log "waiting (up to ${START_TIMEOUT}s) for nodes 1-5 to agree on coordinator 5"
wait_for_coordinator node1 5 1,2,3,4,5 "$START_TIMEOUT" \
    || fail "nodes 1-5 did not agree on coordinator 5 within ${START_TIMEOUT}s"
log "nodes 1-5 agree on coordinator 5 (${WAITED_MS} ms after the first poll)"

# --- 3. workload with all five nodes ---------------------------------------
run_workload node1 "5 nodes"
REPORT_BEFORE="$REPORT"

# --- 4. kill the coordinator -------------------------------------------------
log "killing node5 (the coordinator)"
if ! "${DC[@]}" kill node5 >"$TMP/kill.log" 2>&1; then
    sed 's/^/  /' "$TMP/kill.log"
    fail "compose kill node5 failed"
fi
sed 's/^/  /' "$TMP/kill.log"
node5_id="$("${DC[@]}" ps -q node5)"
state="$(docker inspect --format '{{.State.Status}}' "$node5_id" 2>/dev/null || echo unknown)"
[ "$state" = exited ] || fail "node5 is '$state' after kill, expected 'exited'"

log "waiting (up to ${ELECT_TIMEOUT}s) for nodes 1-4 to agree on coordinator 4"
wait_for_coordinator node1 4 1,2,3,4 "$ELECT_TIMEOUT" \
    || fail "survivors 1-4 did not agree on coordinator 4 within ${ELECT_TIMEOUT}s of killing node5"
ELECTION_MS="$WAITED_MS"
log "nodes 1-4 agree on coordinator 4, ${ELECTION_MS} ms after the kill (polling granularity ~1 s)"

# --- 5. workload with the survivors ----------------------------------------
run_workload node1 "4 survivors"
REPORT_AFTER="$REPORT"

# --- 6. witness -------------------------------------------------------------
log "asking the witness"
rc=0
out="$(cot node1 30 witness --check witness:7300 --json)" || rc=$?
if ! WITNESS="$(printf '%s' "$out" | python3 -c "$REPORT_CHECK" witness)"; then
    fail "witness: $WITNESS"
fi
[ "$rc" -eq 0 ] || fail "witness --check exited with status $rc: $WITNESS"
log "  witness: $WITNESS"

# --- summary ----------------------------------------------------------------
cat <<EOF

coterie docker e2e summary
  startup:       nodes 1-5 agreed on coordinator 5
  workload (5):  $REPORT_BEFORE
  kill node5:    nodes 1-4 agreed on coordinator 4 after ${ELECTION_MS} ms
  workload (4):  $REPORT_AFTER
  witness:       $WITNESS

EOF
