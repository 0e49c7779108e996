#!/usr/bin/env bash
# End-to-end test of the docker packaging: build the image, start five nodes
# and a witness with compose, check they agree on coordinator 5, run a
# workload over all five, kill node5 while node1's clients are working,
# check the survivors agree on 4, run a workload on each survivor, freeze
# node4 (docker pause: a silent failure only heartbeats can detect) and
# check 1-3 agree on 3, thaw it and check 4 takes over again, and ask the
# witness whether mutual exclusion ever broke (every entry of every workload
# is checked there with its fencing token); then play the coordinator-crash
# scenario under compose, and cut nodes' links (docker network disconnect,
# connect) under a workload that must see every request answered.
#
# The cluster runs from a copy of config/ in a temporary directory, mounted
# into the containers as the compose file does (COTERIE_CONFIG_DIR), with a
# fresh secret: every command above proves it knows it, and clients with a
# wrong secret or none are checked to be refused (exit 69). Another
# algorithm is chosen by the environment alone (no rebuild):
# COTERIE_MUTEX=ricart-agrawala scripts/docker-e2e.sh.
#
# Last, the Kubernetes cluster file (deploy/kubernetes/coterie.toml) runs in
# plain docker as the StatefulSet would run it: five containers named
# coterie-N.coterie on a network of their own, the id from COTERIE_ID, the
# file and a secret mounted where the pod mounts them, faults refused.
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
#   COTERIE_BIN         the coterie binary for the image and the scenario
#                       (default: target/release/coterie, built)
#   START_TIMEOUT       seconds for the first agreement      (default 60)
#   ELECT_TIMEOUT       seconds for the re-election          (default 15)
#   WORKLOAD_ARGS       flags of the before/after workloads
#                       (default: --clients 2 --requests 50 --hold 1ms)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PROJECT="coterie-e2e-$$"
CONFIG=/config/docker.toml          # inside the containers (mounted)
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
# Plain logs (no ANSI colours) in the containers, for the failure dump.
export NO_COLOR=1

TMP="$(mktemp -d "${TMPDIR:-/tmp}/coterie-e2e.XXXXXX")"
# The containers' /config: the repository's docker.toml, a fresh secret, and
# a wrong one for the refusal checks.
mkdir -p "$TMP/config"
cp "$ROOT/config/docker.toml" "$TMP/config/docker.toml"
new_secret() { (umask 077 && head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$1"); }
new_secret "$TMP/config/docker.secret"
new_secret "$TMP/config/wrong.secret"
export COTERIE_CONFIG_DIR="$TMP/config"
STARTED=0
WORKLOAD_PIDS=()

cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    # Background workloads of this script (their execs end with the
    # containers anyway).
    local pid
    for pid in "${WORKLOAD_PIDS[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
    if [ "$rc" -ne 0 ] && [ "$STARTED" = 1 ]; then
        log "container states:"
        "${DC[@]}" ps 2>&1 || true
        log "last 50 log lines of each container:"
        "${DC[@]}" logs --no-color --tail=50 2>&1 || true
    fi
    if [ -n "${K8S_NET:-}" ]; then
        docker rm -f "${K8S_CONTAINERS[@]}" >/dev/null 2>&1 || true
        docker network rm "$K8S_NET" >/dev/null 2>&1 || true
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

# cot SERVICE TIMEOUT_S ARGS...: run the coterie CLI inside a running
# service's container (the image has no shell, so the binary is exec'd
# directly). stdout is the command's; its stderr goes to $COT_ERR (default
# $TMP/stderr). Bounded, so a hung command fails the test, not hangs it.
cot() {
    local svc="$1" limit="$2"
    shift 2
    timeout --kill-after=5 "$limit" \
        "${DC[@]}" exec -T "$svc" /coterie "$@" </dev/null 2>"${COT_ERR:-$TMP/stderr}"
}

# refused WHY ENV ARGS...: `coterie lock ARGS` run in node1's container with
# the environment variable ENV (or none: "-") must be refused with exit 69
# and say why on stderr.
refused() {
    local why="$1" env="$2" rc=0
    shift 2
    local envs=()
    [ "$env" = - ] || envs=(-e "$env")
    timeout --kill-after=5 20 "${DC[@]}" exec -T "${envs[@]}" node1 /coterie lock "$@" \
        -- /coterie --version </dev/null >"$TMP/refused.out" 2>"$TMP/refused.err" || rc=$?
    [ "$rc" -eq 69 ] || { cat "$TMP/refused.out" "$TMP/refused.err"; fail "a client with $why got exit $rc, not 69"; }
    log "  a client with $why: exit 69, $(tail -n 1 "$TMP/refused.err")"
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

# wait_for_coordinator FROM_SERVICE WANT IDS TIMEOUT_S [START_NS]
# Polls status from FROM_SERVICE until every node in IDS (comma-separated)
# is reachable and agrees that WANT is the coordinator. Prints the cluster's
# picture whenever it changes. Sets WAITED_MS: milliseconds from START_NS
# (date +%s%N; default: now) to the poll that saw agreement.
wait_for_coordinator() {
    local from="$1" want="$2" ids="$3" limit="$4"
    local start now deadline line last="" out rc exec_rc
    start="${5:-$(date +%s%N)}"
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
            log "  last status output, one node a line:"
            printf '%s' "$out" | jq -c -S '.[]' 2>/dev/null | sed 's/^/    /' || printf '    %s\n' "$out"
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
def num(x, fmt):
    return fmt % x if isinstance(x, (int, float)) else str(x)
v, s = r.get("violations"), r.get("stale_fences")
if kind == "workload":
    lat = r.get("latency_ms") or {}
    print("entries=%s errors=%s throughput=%s/s latency_ms p50=%s p99=%s max=%s "
          "messages/entry=%s violations=%s stale_fences=%s" % (
          r.get("entries"), r.get("errors"), num(r.get("throughput_per_s"), "%.0f"),
          num(lat.get("p50"), "%.3f"), num(lat.get("p99"), "%.3f"),
          num(lat.get("max"), "%.3f"), num(r.get("messages_per_entry"), "%.2f"), v, s))
    ok = v == 0 and s == 0 and isinstance(r.get("entries"), int) and r["entries"] > 0
    if r.get("unanswered", 0) != 0:
        print("  %s requests were never answered" % r.get("unanswered"))
        ok = False
else:
    print("entries=%s violations=%s stale_fences=%s max_holders=%s" % (
          r.get("entries"), v, s, r.get("max_holders")))
    ok = v == 0 and s == 0
sys.exit(0 if ok else 1)
'

# start_workload NAME FROM_SERVICE FLAGS...
# Starts `coterie workload --config ... FLAGS --json` inside FROM_SERVICE in
# the background; its stdout, stderr and exit status land in $TMP/wl-NAME.*.
start_workload() {
    local name="$1" from="$2"
    shift 2
    log "workload $name (from $from): workload $*"
    (
        rc=0
        COT_ERR="$TMP/wl-$name.err" cot "$from" 180 workload --config "$CONFIG" "$@" --json \
            >"$TMP/wl-$name.out" || rc=$?
        date +%s%N >"$TMP/wl-$name.end"
        echo "$rc" >"$TMP/wl-$name.rc"
    ) &
    WORKLOAD_PIDS+=("$!")
}

# finish_workload NAME: waits for it, checks its report, sets REPORT.
finish_workload() {
    local name="$1" rc out
    while [ ! -e "$TMP/wl-$name.rc" ]; do sleep 0.2; done
    rc="$(cat "$TMP/wl-$name.rc")"
    out="$(cat "$TMP/wl-$name.out")"
    if [ "$rc" -ne 0 ]; then
        log "  workload $name output: $out"
        log "  workload $name stderr (tail):"; tail -n 20 "$TMP/wl-$name.err" >&2 || true
        fail "workload $name exited with status $rc"
    fi
    if ! REPORT="$(printf '%s' "$out" | python3 -c "$REPORT_CHECK" workload)"; then
        log "  workload $name output: $out"
        fail "workload $name: $REPORT"
    fi
    log "  workload $name: $REPORT"
}

# ask_witness: checks the witness's counters (no violation, no stale
# fence), sets REPORT.
ask_witness() {
    local rc=0 out
    out="$(cot node1 30 witness --check witness:7300 --json)" || rc=$?
    if ! REPORT="$(printf '%s' "$out" | python3 -c "$REPORT_CHECK" witness)"; then
        fail "witness: $REPORT"
    fi
    [ "$rc" -eq 0 ] || fail "witness --check exited with status $rc: $REPORT"
    log "  witness: $REPORT"
}

# overlap_note NAME EVENT_NS WHAT: did background workload NAME run past the
# event? Only timing can make it miss (a slow machine); say so loudly
# rather than fail.
overlap_note() {
    local ms=$((($(cat "$TMP/wl-$1.end") - $2) / 1000000))
    if [ "$ms" -gt 0 ]; then
        echo "its clients kept working through the $3 and ended ${ms} ms after it"
    else
        echo "WARNING: it ended $((-ms)) ms BEFORE the $3, so it did not test it (slow machine? raise its --requests)"
    fi
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
log "nodes 1-5 agree on coordinator 5"

# --- 2b. the secret ----------------------------------------------------------
log "clients that do not know the cluster's secret are refused"
refused "the wrong secret" COTERIE_SECRET_FILE=/config/wrong.secret --config "$CONFIG" --node 1
refused "no secret" - --addr node1:7200

# --- 3. workload with all five nodes ---------------------------------------
start_workload all-5 node1 "${WORKLOAD_FLAGS[@]}"
finish_workload all-5
REPORT_ALL5="$REPORT"

# --- 4. kill the coordinator while node1's clients are working --------------
# (Only node1's clients: a workload's clients of a node that dies keep
# reconnecting until they have made all their requests, so a workload over
# the whole configuration would never finish once node5 is gone.)
start_workload failover node1 --node 1 --clients 2 --requests 400 --hold 1ms --think 10ms
sleep 2

log "killing node5 (the coordinator)"
KILLED_AT="$(date +%s%N)"
if ! "${DC[@]}" kill node5 >"$TMP/kill.log" 2>&1; then
    sed 's/^/  /' "$TMP/kill.log"
    fail "compose kill node5 failed"
fi
sed 's/^/  /' "$TMP/kill.log"
node5_id="$("${DC[@]}" ps -q node5)"
state="$(docker inspect --format '{{.State.Status}}' "$node5_id" 2>/dev/null || echo unknown)"
[ "$state" = exited ] || fail "node5 is '$state' after kill, expected 'exited'"
# When the container really died (the kill command itself takes a while).
finished="$(docker inspect --format '{{.State.FinishedAt}}' "$node5_id" 2>/dev/null || true)"
KILLED_AT="$(date -d "$finished" +%s%N 2>/dev/null || echo "$KILLED_AT")"

log "waiting (up to ${ELECT_TIMEOUT}s) for nodes 1-4 to agree on coordinator 4"
wait_for_coordinator node1 4 1,2,3,4 "$ELECT_TIMEOUT" "$KILLED_AT" \
    || fail "survivors 1-4 did not agree on coordinator 4 within ${ELECT_TIMEOUT}s of killing node5"
ELECTION_MS="$WAITED_MS"
log "nodes 1-4 agree on coordinator 4, seen ${ELECTION_MS} ms after node5 died (an upper bound: each poll is a compose exec)"
# The nodes' own timestamps are sharper: when did the last survivor log
# that 4 was elected? (Informational; "n/a" if the log lines change shape.)
ELECTION_LOGGED="$("${DC[@]}" logs --no-color node1 node2 node3 node4 2>/dev/null | python3 -c '
import datetime, re, sys
killed_ns = int(sys.argv[1])
first = {}
for line in sys.stdin:
    m = re.search(r"\|\s*(\S+Z)\s.*node\{id=(\d+)\}.*coordinator elected.*coordinator=4\b", line)
    if not m:
        continue
    t = datetime.datetime.strptime(m.group(1)[:26].rstrip("Z"), "%Y-%m-%dT%H:%M:%S.%f")
    ns = int(t.replace(tzinfo=datetime.timezone.utc).timestamp() * 1e9)
    if ns >= killed_ns - 10**9:
        first.setdefault(m.group(2), ns)
if len(first) == 4:
    print("%d ms" % max(0, (max(first.values()) - killed_ns) // 10**6))
else:
    print("n/a")
' "$KILLED_AT" 2>/dev/null || echo n/a)"
log "  per the nodes' logs, the last survivor learned of coordinator 4 $ELECTION_LOGGED after node5 died"

finish_workload failover
REPORT_FAILOVER="$REPORT"
OVERLAP="$(overlap_note failover "$KILLED_AT" kill)"
log "  workload failover: $OVERLAP"

# --- 5. workload with the survivors ----------------------------------------
# One workload per survivor, all at once (--node picks one node).
for id in 1 2 3 4; do
    start_workload "survivor-$id" "node$id" --node "$id" "${WORKLOAD_FLAGS[@]}"
done
REPORT_SURVIVORS=""
for id in 1 2 3 4; do
    finish_workload "survivor-$id"
    REPORT_SURVIVORS="$REPORT_SURVIVORS
    node $id: $REPORT"
done

# --- 6. a silent failure: freeze the new coordinator -----------------------
# A killed container's sockets are closed by the kernel, so its peers hear
# of the death at once. A paused (frozen) one keeps its connections open and
# just stops answering: only the heartbeat timeout can notice. When it thaws
# it is the highest id again and takes over; meanwhile node1's clients keep
# working and the witness checks every entry, stale coordinator or not.
start_workload pause node1 --node 1 --clients 2 --requests 400 --hold 1ms --think 10ms
sleep 2
log "pausing node4 (the coordinator)"
PAUSED_AT="$(date +%s%N)"
"${DC[@]}" pause node4 >"$TMP/pause.log" 2>&1 || { cat "$TMP/pause.log"; fail "compose pause node4 failed"; }
log "waiting (up to ${ELECT_TIMEOUT}s) for nodes 1-3 to agree on coordinator 3"
wait_for_coordinator node1 3 1,2,3 "$ELECT_TIMEOUT" "$PAUSED_AT" \
    || fail "nodes 1-3 did not agree on coordinator 3 within ${ELECT_TIMEOUT}s of pausing node4"
PAUSE_MS="$WAITED_MS"
log "nodes 1-3 agree on coordinator 3, seen ${PAUSE_MS} ms after the pause"
log "unpausing node4"
UNPAUSED_AT="$(date +%s%N)"
"${DC[@]}" unpause node4 >"$TMP/unpause.log" 2>&1 || { cat "$TMP/unpause.log"; fail "compose unpause node4 failed"; }
wait_for_coordinator node1 4 1,2,3,4 "$ELECT_TIMEOUT" "$UNPAUSED_AT" \
    || fail "nodes 1-4 did not agree on coordinator 4 within ${ELECT_TIMEOUT}s of unpausing node4"
UNPAUSE_MS="$WAITED_MS"
log "nodes 1-4 agree on coordinator 4 again, seen ${UNPAUSE_MS} ms after the unpause"
finish_workload pause
REPORT_PAUSE="$REPORT"
OVERLAP_PAUSE="$(overlap_note pause "$UNPAUSED_AT" "pause and the unpause")"
log "  workload pause: $OVERLAP_PAUSE"

# --- 7. witness -------------------------------------------------------------
log "asking the witness"
ask_witness
WITNESS="$REPORT"

# --- 8. the coordinator-crash scenario, under compose -------------------------
# `coterie run --compose` plays scenarios/coordinator-crash.toml against this
# project: docker compose kill and start for its steps, the compose witness
# for its checks. node5 comes back first, so the scenario starts from five.
log "starting node5 again for the scenario"
RESTARTED_AT="$(date +%s%N)"
"${DC[@]}" start node5 >"$TMP/start5.log" 2>&1 || { cat "$TMP/start5.log"; fail "compose start node5 failed"; }
wait_for_coordinator node1 5 1,2,3,4,5 "$ELECT_TIMEOUT" "$RESTARTED_AT" \
    || fail "nodes 1-5 did not agree on coordinator 5 after node5 came back"
log "playing scenarios/coordinator-crash.toml with coterie run --compose"
(cd "$ROOT" && "${COTERIE_BIN:-target/release/coterie}" run scenarios/coordinator-crash.toml \
    --compose "$PROJECT" --compose-file "$ROOT/docker-compose.yml" \
    --config "$TMP/config/docker.toml") >"$TMP/scenario.log" 2>&1 \
    || { cat "$TMP/scenario.log"; fail "the coordinator-crash scenario failed under compose"; }
sed 's/^/    /' "$TMP/scenario.log"
SCENARIO="$(grep -E '^(PASSED|elections after)' "$TMP/scenario.log" | tr '\n' ' ')"
log "  scenario: $SCENARIO"

# --- 9. links cut and restored: docker network disconnect / connect ---------
# The container's interface is taken away and given back (perhaps with a new
# address): its connections die without closing, what was in flight in them
# is lost, and the sessions must send it again once the links are redialled.
# Once for less than the failure timeout (back to back), once for several,
# then the coordinator's; node1's clients work throughout and every request
# must be answered, with the witness seeing nothing wrong.
NET="${PROJECT}_coterie"
cut_links() {   # cut_links SERVICE SECONDS
    local svc="$1" hold="$2" cid
    cid="$("${DC[@]}" ps -q "$svc")"
    docker network disconnect "$NET" "$cid" >"$TMP/disconnect.log" 2>&1 \
        || { cat "$TMP/disconnect.log"; fail "docker network disconnect $svc failed"; }
    [ "$hold" = 0 ] || sleep "$hold"
    docker network connect --alias "$svc" "$NET" "$cid" >"$TMP/connect.log" 2>&1 \
        || { cat "$TMP/connect.log"; fail "docker network connect $svc failed"; }
}
start_workload links node1 --node 1 --clients 2 --requests 2000 --hold 1ms --think 5ms
sleep 1
log "cutting node2's links and restoring them at once"
CUT_AT="$(date +%s%N)"
cut_links node2 0
wait_for_coordinator node1 5 1,2,3,4,5 "$ELECT_TIMEOUT" "$CUT_AT" \
    || fail "nodes 1-5 did not agree on coordinator 5 after node2's short cut"
log "cutting node2's links for 2s"
CUT_AT="$(date +%s%N)"
cut_links node2 2
wait_for_coordinator node1 5 1,2,3,4,5 "$ELECT_TIMEOUT" "$CUT_AT" \
    || fail "nodes 1-5 did not agree on coordinator 5 after node2's long cut"
log "cutting node5's (the coordinator's) links for 3s"
CUT_AT="$(date +%s%N)"
cid5="$("${DC[@]}" ps -q node5)"
docker network disconnect "$NET" "$cid5" >"$TMP/disconnect.log" 2>&1 \
    || { cat "$TMP/disconnect.log"; fail "docker network disconnect node5 failed"; }
wait_for_coordinator node1 4 1,2,3,4 "$ELECT_TIMEOUT" "$CUT_AT" \
    || fail "nodes 1-4 did not agree on coordinator 4 while node5 was cut off"
CUT_MS="$WAITED_MS"
sleep 1
docker network connect --alias node5 "$NET" "$cid5" >"$TMP/connect.log" 2>&1 \
    || { cat "$TMP/connect.log"; fail "docker network connect node5 failed"; }
RECONNECTED_AT="$(date +%s%N)"
wait_for_coordinator node1 5 1,2,3,4,5 "$ELECT_TIMEOUT" "$RECONNECTED_AT" \
    || fail "nodes 1-5 did not agree on coordinator 5 after node5's links came back"
RECONNECT_MS="$WAITED_MS"
finish_workload links
REPORT_LINKS="$REPORT"
log "  workload links: $(overlap_note links "$RECONNECTED_AT" "reconnection")"
ask_witness
WITNESS_LINKS="$REPORT"

# --- 10. the Kubernetes cluster file, in plain docker -------------------------
# What the StatefulSet in deploy/kubernetes/ gives each pod, given here by
# hand: a stable name coterie-N.coterie (a network alias), COTERIE_ID=N (the
# pod index), the ConfigMap at /config, the Secret at /secret, a volume at
# /state, and the image's entrypoint with the StatefulSet's args.
K8S_DIR="$TMP/k8s"
mkdir -p "$K8S_DIR/config" "$K8S_DIR/secret"
cp "$ROOT/deploy/kubernetes/coterie.toml" "$K8S_DIR/config/coterie.toml"
new_secret "$K8S_DIR/secret/secret"
K8S_NET="coterie-k8s-$$"
K8S_CONTAINERS=()
docker network create "$K8S_NET" >/dev/null || fail "docker network create $K8S_NET failed"
log "the Kubernetes cluster file: five containers coterie-N.coterie on $K8S_NET"
for id in 1 2 3 4 5; do
    name="coterie-$id-$$"
    K8S_CONTAINERS+=("$name")
    docker run -d --name "$name" --network "$K8S_NET" --network-alias "coterie-$id.coterie" \
        --init -e COTERIE_ID="$id" -e COTERIE_CONFIG=/config/coterie.toml -e NO_COLOR=1 \
        -v "$K8S_DIR/config:/config:ro" -v "$K8S_DIR/secret:/secret:ro" --tmpfs /state \
        "$COTERIE_IMAGE" node --config /config/coterie.toml >/dev/null \
        || fail "docker run $name failed"
done
k8s_status() { docker exec "coterie-1-$$" /coterie status --json 2>"$TMP/k8s.err"; }
deadline=$(($(date +%s) + START_TIMEOUT))
until k8s_status | python3 -c "$STATUS_CHECK" 5 1,2,3,4,5 >"$TMP/k8s.line"; do
    if [ "$(date +%s)" -ge "$deadline" ]; then
        cat "$TMP/k8s.line" "$TMP/k8s.err"
        for c in "${K8S_CONTAINERS[@]}"; do docker logs --tail 20 "$c" 2>&1 | sed "s/^/  $c: /"; done
        fail "the Kubernetes cluster file's five nodes did not agree on coordinator 5"
    fi
    sleep 0.5
done
log "  status: $(cat "$TMP/k8s.line")"
rc=0
docker exec "coterie-3-$$" /coterie lock --node 3 -- /coterie --version >"$TMP/k8s.lock" 2>&1 || rc=$?
[ "$rc" -eq 0 ] || { cat "$TMP/k8s.lock"; fail "a lock through node 3 of the Kubernetes file failed ($rc)"; }
rc=0
docker exec "coterie-3-$$" /coterie fault --node 3 partition >"$TMP/k8s.fault" 2>&1 || rc=$?
[ "$rc" -ne 0 ] && grep -q allow_faults "$TMP/k8s.fault" \
    || { cat "$TMP/k8s.fault"; fail "the Kubernetes file's nodes took a fault (exit $rc)"; }
K8S="5 nodes agreed on 5; a lock through node 3 ran; faults refused naming allow_faults"
log "  $K8S"

# --- summary ----------------------------------------------------------------
cat <<EOF

coterie docker e2e summary
  startup:                nodes 1-5 agreed on coordinator 5
  secret:                 clients with a wrong secret or none refused (exit 69)
  workload, 5 nodes:      $REPORT_ALL5
  kill node5:             nodes 1-4 agreed on coordinator 4: logged ${ELECTION_LOGGED} after node5
                          died, seen by status polling after ${ELECTION_MS} ms
  workload over the kill: $REPORT_FAILOVER
                          ($OVERLAP)
  workloads, survivors:$REPORT_SURVIVORS
  pause node4:            nodes 1-3 agreed on coordinator 3 after ${PAUSE_MS} ms;
                          unpaused, nodes 1-4 agreed on 4 again after ${UNPAUSE_MS} ms
  workload over pause:    $REPORT_PAUSE
                          ($OVERLAP_PAUSE)
  witness:                $WITNESS
  scenario under compose: $SCENARIO
  links cut and restored: node2 briefly, node2 for 2s, node5 for 3s (1-4 agreed on 4 after
                          ${CUT_MS} ms; 5 back in charge ${RECONNECT_MS} ms after its links returned)
  workload over the cuts: $REPORT_LINKS
  witness after the cuts: $WITNESS_LINKS
  Kubernetes file:        $K8S

EOF
