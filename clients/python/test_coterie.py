"""The Python client against a real cluster, which the caller starts
(crates/coterie/tests/python.rs does): ``COTERIE_URLS`` lists the nodes'
HTTP addresses in node order, ``COTERIE_PIDS`` their processes,
``COTERIE_BIN`` the coterie binary and ``COTERIE_CONFIG`` the cluster file
(with ``allow_faults``). The tests run in the order of their names; the
last kills a node.

    COTERIE_URLS=http://127.0.0.1:7401,... COTERIE_PIDS=... COTERIE_BIN=... \
        COTERIE_CONFIG=... python3 -m unittest test_coterie
"""

import os
import signal
import subprocess
import threading
import time
import unittest

import coterie

URLS = os.environ.get("COTERIE_URLS", "http://127.0.0.1:7401").split(",")
PIDS = [int(p) for p in os.environ.get("COTERIE_PIDS", "").split(",") if p]
BIN = os.environ.get("COTERIE_BIN", "coterie")
CONFIG = os.environ.get("COTERIE_CONFIG", "")
HERE = os.path.dirname(os.path.abspath(__file__))


def wait_until(what, done, limit=15.0):
    start = time.monotonic()
    while not done():
        if time.monotonic() - start > limit:
            raise AssertionError(f"not within {limit}s: {what}")
        time.sleep(0.05)


class ClientTest(unittest.TestCase):
    def holders(self, name, url=URLS[0]):
        return coterie.Client(url).get_lock(name)["holders"]

    def test_1_a_with_block_holds_the_lock_and_lets_go(self):
        with coterie.lock("py/basic", url=URLS[1], ttl="2s", client="py-test") as held:
            self.assertGreater(held.fence, 0)
            holders = self.holders("py/basic")
            self.assertEqual([(h["node"], h["client"], h["fence"]) for h in holders],
                             [(2, "py-test", held.fence)])
            # Held across several TTLs: the keepalives work.
            time.sleep(4.5)
            held.check()
            self.assertEqual(len(self.holders("py/basic")), 1)
        wait_until("py/basic is free", lambda: not self.holders("py/basic"))
        with coterie.lock("py/basic", url=URLS[0]) as again:
            self.assertGreater(again.fence, held.fence, "fences rise")

    def test_2_a_try_on_a_held_lock_is_busy_and_a_timeout_times_out(self):
        with coterie.lock("py/busy", url=URLS[0]):
            with self.assertRaises(coterie.Error) as busy:
                with coterie.lock("py/busy", url=URLS[2], try_lock=True):
                    self.fail("granted while held")
            self.assertEqual((busy.exception.status, busy.exception.error), (409, "busy"))
            with self.assertRaises(coterie.Error) as late:
                with coterie.lock("py/busy", url=URLS[1], timeout="300ms"):
                    self.fail("granted while held")
            self.assertEqual(late.exception.status, 408)

    def test_3_session_expiry_releases_the_lock_to_the_waiting_client(self):
        client = coterie.Client(URLS[0])
        # A holder that never keeps its session alive.
        silent = client.session(ttl="1s")
        first = client.acquire("py/expiry", silent["id"])
        started = time.monotonic()
        with coterie.lock("py/expiry", url=URLS[1], timeout="15s") as held:
            waited = time.monotonic() - started
            self.assertGreater(held.fence, first["fence"])
            self.assertGreaterEqual(waited, 0.5, "granted only once the silent session expired")
        with self.assertRaises(coterie.Error) as gone:
            client.keepalive(silent["id"])
        self.assertEqual(gone.exception.status, 404)

    def test_4_a_waiter_that_stops_its_keepalives_is_never_granted(self):
        holder = coterie.Client(URLS[0])
        waiter = coterie.Client(URLS[2])
        h = holder.session(ttl="3s")
        granted = holder.acquire("py/waiter", h["id"])
        w = waiter.session(ttl="1s")  # no keepalive ever
        answer = {}

        def wait():
            try:
                answer["granted"] = waiter.acquire("py/waiter", w["id"])
            except coterie.Error as e:
                answer["error"] = e

        t = threading.Thread(target=wait)
        t.start()
        # The holder keeps its session alive past the waiter's TTL, then lets go.
        for _ in range(6):
            time.sleep(0.5)
            holder.keepalive(h["id"])
        holder.release("py/waiter", h["id"], granted["fence"])
        t.join(10)
        self.assertNotIn("granted", answer, "a waiter whose session expired was granted")
        self.assertEqual(answer["error"].status, 404, answer)
        wait_until("py/waiter is free", lambda: not self.holders("py/waiter"))
        self.assertEqual(self.holders("py/waiter"), [])

    def test_5_the_curl_examples_run(self):
        script = os.path.join(HERE, "..", "curl-examples.sh")
        out = subprocess.run(["bash", script, URLS[0]], capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        self.assertIn("released", out.stdout)

    def test_6_a_node_without_a_quorum_sends_the_client_to_the_next(self):
        def fault(*args):
            out = subprocess.run([BIN, "fault", "--config", CONFIG, *args],
                                 capture_output=True, text=True, timeout=30)
            self.assertEqual(out.returncode, 0, out.stdout + out.stderr)

        def quorum(url):
            return coterie.Client(url).request("GET", "/v1/status")["quorum"]

        self.assertTrue(CONFIG, "COTERIE_CONFIG names the cluster file")
        # Node 1 cut off from 2 and 3: a minority of one.
        fault("--node", "1", "partition", "2,3")
        for node in ("2", "3"):
            fault("--node", node, "partition", "1")
        try:
            wait_until("node 1 loses its quorum", lambda: not quorum(URLS[0]))
            with self.assertRaises(coterie.Error) as refused:
                with coterie.lock("py/minority", url=URLS[0], timeout="5s"):
                    self.fail("granted by a minority")
            self.assertEqual((refused.exception.status, refused.exception.error),
                             (503, "no_quorum"))
            self.assertIn("no quorum", refused.exception.detail)
            with coterie.lock("py/minority", url=",".join(URLS[:2]), timeout="5s") as held:
                self.assertEqual(held.node, 2, "granted at the next node, which has a quorum")
        finally:
            fault("heal")
        wait_until("node 1 has a quorum again", lambda: quorum(URLS[0]))
        with coterie.lock("py/minority", url=URLS[0], timeout="5s") as again:
            self.assertGreater(again.fence, held.fence, "fences rise across the heal")

    def test_7_ttls_are_read_as_the_server_writes_them(self):
        # The server echoes 90s as "1m 30s", humantime's form.
        with coterie.lock("py/ttl", url=URLS[0], ttl="90s") as held:
            self.assertEqual(held.ttl, 90.0)
        for text, seconds in (("1500ms", 1.5), ("1h30m", 5400.0), ("1m 30s", 90.0)):
            self.assertEqual(coterie.parse_duration(text), seconds)
        with self.assertRaises(ValueError):
            coterie.parse_duration("ten seconds")

    def test_8_a_reentrant_session_counts_and_the_last_release_lets_go(self):
        client = coterie.Client(URLS[0])
        sid = client.session(ttl="10s")["id"]
        try:
            first = client.acquire("py/again", sid)
            self.assertEqual(first["count"], 1)
            with self.assertRaises(coterie.Error) as refused:
                client.acquire("py/again", sid, try_lock=True)
            self.assertEqual(refused.exception.status, 409)
            self.assertIn("reentrant", str(refused.exception))
            again = client.acquire("py/again", sid, reentrant=True)
            self.assertEqual((again["fence"], again["count"]), (first["fence"], 2))
            self.assertEqual(client.release("py/again", sid, first["fence"])["count"], 1)
            other = coterie.Client(URLS[1])
            oid = other.session(ttl="10s")["id"]
            with self.assertRaises(coterie.Error):
                other.acquire("py/again", oid, try_lock=True)
            self.assertEqual(client.release("py/again", sid, first["fence"])["count"], 0)
            self.assertGreater(other.acquire("py/again", oid, timeout="10s")["fence"], first["fence"])
            other.close(oid)
        finally:
            client.close(sid)

    def test_8b_a_revoke_reaches_the_holder_which_decides(self):
        other = coterie.Client(URLS[2])
        with self.assertRaises(coterie.Error) as free:
            other.revoke("py/revoked")
        self.assertEqual(free.exception.status, 409)
        self.assertIn("free", str(free.exception))
        asked = threading.Event()
        with coterie.lock("py/revoked", url=URLS[0], on_revoke=lambda h: asked.set()) as held:
            answer = other.revoke("py/revoked", reason="maintenance")
            self.assertEqual((answer["name"], answer["holders"]), ("py/revoked", 1))
            wait_until("the holder hears it", asked.is_set)
            self.assertEqual(held.revoke_reason, "maintenance")
            # Nothing was taken: it still holds, and the listing says it was asked.
            holders = self.holders("py/revoked", URLS[1])
            self.assertEqual([(h["fence"], h["revoke"]) for h in holders],
                             [(held.fence, "maintenance")])
            held.check()
        wait_until("py/revoked is free", lambda: not self.holders("py/revoked"))

    def test_8c_readers_share_and_a_writer_waits_for_them(self):
        with coterie.lock("py/config", url=URLS[0], mode="read") as first:
            with coterie.lock("py/config", url=URLS[1], mode="read") as second:
                holders = self.holders("py/config", URLS[2])
                self.assertEqual(sorted((h["fence"], h["mode"]) for h in holders),
                                 [(first.fence, "read"), (second.fence, "read")])
                with self.assertRaises(coterie.Error) as busy:
                    with coterie.lock("py/config", url=URLS[2], try_lock=True):
                        self.fail("a writer beside readers")
                self.assertEqual(busy.exception.status, 409)
        with coterie.lock("py/config", url=URLS[2], timeout="10s") as wrote:
            self.assertGreater(wrote.fence, second.fence)
            self.assertEqual(self.holders("py/config")[0]["mode"], "write")

    def test_9_killing_the_sessions_node_says_the_lock_is_lost(self):
        self.assertEqual(len(PIDS), len(URLS), "COTERIE_PIDS names every node")
        lost = threading.Event()
        with self.assertRaises(coterie.LockLost):
            with coterie.lock("py/kill", url=URLS[2], ttl="30s",
                              on_lost=lambda h: lost.set()) as held:
                os.kill(PIDS[2], signal.SIGKILL)
                started = time.monotonic()
                self.assertTrue(held.lost.wait(10), "the loss was never noticed")
                noticed = time.monotonic() - started
                self.assertLess(noticed, 30, "noticed only at the TTL")
                self.assertTrue(lost.is_set(), "on_lost was called")
                with self.assertRaises(coterie.LockLost):
                    held.check()
        # Another node's client gets it, with a higher fence.
        with coterie.lock("py/kill", url=URLS[0], timeout="15s") as next_holder:
            self.assertGreater(next_holder.fence, held.fence)


if __name__ == "__main__":
    unittest.main()
