#!/usr/bin/env bash
# The API from a shell, with curl and jq: the examples of docs/src/http.md,
# run by the Python client's tests against a real cluster.
#   clients/curl-examples.sh [http://127.0.0.1:7401]
# With a secret, set COTERIE_TOKEN (one of [security] api_token_file's);
# over TLS (an https:// address), COTERIE_TLS_CA, and with client
# certificates COTERIE_TLS_CERT and COTERIE_TLS_KEY.
set -euo pipefail
api="${1:-http://127.0.0.1:7401}"
auth=()
if [ -n "${COTERIE_TOKEN:-}" ]; then auth=(-H "authorization: Bearer $COTERIE_TOKEN"); fi
if [ -n "${COTERIE_TLS_CA:-}" ]; then auth+=(--cacert "$COTERIE_TLS_CA"); fi
if [ -n "${COTERIE_TLS_CERT:-}" ]; then auth+=(--cert "$COTERIE_TLS_CERT" --key "$COTERIE_TLS_KEY"); fi
call() { curl -sS --fail-with-body "${auth[@]}" "$@"; }

# A session that lives 10 s past each keepalive.
session=$(call -X POST "$api/v1/sessions" -d '{"ttl": "10s"}' | jq -r .id)

# Take the lock "jobs/nightly" (a / in a name is %2F in the path); wait at
# most 5 s. The answer carries the fencing token.
fence=$(call -X POST "$api/v1/locks/jobs%2Fnightly/acquire" \
    -d "{\"session\": \"$session\", \"timeout\": \"5s\"}" | jq .fence)
echo "holding jobs/nightly with fence $fence"

# Who holds it, cluster wide.
call "$api/v1/locks/jobs%2Fnightly" | jq -c '.holders[] | {node, fence}'

# Keep the session alive (a long job does this every ttl/3).
call -X POST "$api/v1/sessions/$session/keepalive" >/dev/null

# Another session's try is refused with 409 while it is held.
other=$(call -X POST "$api/v1/sessions" | jq -r .id)
status=$(curl -sS "${auth[@]}" -o /dev/null -w '%{http_code}' -X POST \
    "$api/v1/locks/jobs%2Fnightly/acquire" -d "{\"session\": \"$other\", \"try\": true}")
echo "a try by another session: $status"
[ "$status" = 409 ]

# Release by fence, and close the sessions.
call -X POST "$api/v1/locks/jobs%2Fnightly/release" \
    -d "{\"session\": \"$session\", \"fence\": $fence}" >/dev/null
echo "released jobs/nightly"
call -X DELETE "$api/v1/sessions/$session" >/dev/null
call -X DELETE "$api/v1/sessions/$other" >/dev/null

# An election: campaign with a value, read the leader, resign.
session=$(call -X POST "$api/v1/sessions" | jq -r .id)
call -X POST "$api/v1/elections/scheduler/campaign" \
    -d "{\"session\": \"$session\", \"value\": \"10.0.0.7:8080\"}" | jq -c .
call "$api/v1/elections/scheduler" | jq -r '.leader.value'
call -X POST "$api/v1/elections/scheduler/resign" -d "{\"session\": \"$session\"}" >/dev/null
call -X DELETE "$api/v1/sessions/$session" >/dev/null
echo "resigned scheduler"
