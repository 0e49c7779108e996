#!/usr/bin/env python3
"""etcd as a lock, through its v3 JSON gateway, for comparison with coterie.

CLIENTS processes, client i talking to endpoint i mod len(ENDPOINTS) over
one persistent HTTP/1.1 connection. Each grants itself one lease first
(POST /v3/lease/grant, TTL a minute past the run), as an etcd session
does; then all start together and loop for SECONDS:

  acquire: POST /v3/lock/lock {name: "lock", lease}: the lock service puts
           a key under the name with the lease and answers once every
           earlier key under it is gone (it waits on a watch meanwhile);
  release: POST /v3/lock/unlock {key}: deletes that key.

Each is a write through raft: committed by a majority of the members, each
of which flushes its write-ahead log (fsync) first. Prints one JSON line:
cycles per second over all clients, acquire latency p50 and p99 in
microseconds over all acquires.

Usage: etcd-lock.py ENDPOINTS CLIENTS SECONDS
(ENDPOINTS: comma-separated http://host:port client URLs)
"""
import base64
import http.client
import json
import os
import select
import signal
import sys
import time
import urllib.parse


def client(endpoint, seconds, ready_w, go_r, out_w):
    url = urllib.parse.urlsplit(endpoint)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=60)

    def post(path, body):
        conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        reply = conn.getresponse()
        data = reply.read()
        if reply.status != 200:
            raise SystemExit(f"etcd-lock: {path}: HTTP {reply.status}: {data[:200]!r}")
        return json.loads(data)

    lease = post("/v3/lease/grant", {"TTL": int(seconds) + 60})["ID"]
    name = base64.b64encode(b"lock").decode()
    os.write(ready_w, b"r")
    start = float(os.read(go_r, 64).split()[0])  # the parent's start, on CLOCK_MONOTONIC
    deadline, cycles, latencies = start + seconds, 0, []
    t = time.monotonic()
    while t < deadline:
        asked = t
        key = post("/v3/lock/lock", {"name": name, "lease": lease})["key"]
        latencies.append(time.monotonic() - asked)
        post("/v3/lock/unlock", {"key": key})
        cycles += 1
        t = time.monotonic()
    post("/v3/lease/revoke", {"ID": lease})
    os.write(out_w, (json.dumps({"cycles": cycles, "end": t, "latencies": latencies}) + "\n").encode())


def main():
    endpoints = sys.argv[1].split(",")
    clients, seconds = int(sys.argv[2]), float(sys.argv[3])
    ready_r, ready_w = os.pipe()
    go_r, go_w = os.pipe()
    outs, pids = [], []
    for i in range(clients):
        out_r, out_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                client(endpoints[i % len(endpoints)], seconds, ready_w, go_r, out_w)
            except BaseException as e:  # noqa: BLE001 - report anything, exit non-zero
                print(f"etcd-lock: client {i}: {e}", file=sys.stderr)
                code = 1
            os._exit(code)
        os.close(out_w)
        outs.append(out_r)
        pids.append(pid)
    os.close(ready_w)
    os.close(go_r)
    for _ in range(clients):
        # A client that fails before it is ready never writes: give up.
        if not select.select([ready_r], [], [], 30)[0] or not os.read(ready_r, 1):
            for p in pids:
                os.kill(p, signal.SIGTERM)
            raise SystemExit("etcd-lock: the clients did not all get ready within 30 s")
    start = time.monotonic()
    # One line per client, each shorter than PIPE_BUF: every read gets one.
    os.write(go_w, f"{start:.9f}\n".ljust(64).encode() * clients)
    results = []
    for out in outs:
        with os.fdopen(out) as f:
            line = f.read()
        if line:
            results.append(json.loads(line))
    failed = any(os.waitpid(p, 0)[1] != 0 for p in pids)
    if failed or len(results) != clients:
        raise SystemExit("etcd-lock: a client failed")
    cycles = sum(r["cycles"] for r in results)
    latencies = sorted(x for r in results for x in r["latencies"])
    elapsed = max(r["end"] for r in results) - start
    print(json.dumps({
        "clients": clients,
        "seconds": round(elapsed, 3),
        "cycles": cycles,
        "cycles_per_s": round(cycles / elapsed, 1),
        "acquire_p50_us": round(latencies[len(latencies) // 2] * 1e6, 1),
        "acquire_p99_us": round(latencies[len(latencies) * 99 // 100] * 1e6, 1),
    }))


if __name__ == "__main__":
    main()
