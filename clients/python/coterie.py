"""A small client for coterie's HTTP/JSON API: named locks and elections
from Python, with the standard library only.

    import coterie

    with coterie.lock("jobs/nightly", ttl="10s", timeout="30s") as held:
        run_the_job(fence=held.fence)   # pass the fence to what you write to
        held.check()                    # raises coterie.LockLost once lost

The lock is held by a *session* with a TTL (docs/src/http.md). While the
``with`` block runs, a thread keeps the session alive (three keepalives a
TTL) and another watches it (``GET /v1/sessions/{id}/watch``). The lock is
taken for lost at the first of:

- the node says the session ended (it missed its TTL), or answers a
  keepalive with 404;
- the node cannot be reached at all (connection refused: its process is
  gone, and its sessions with it);
- no keepalive has succeeded for a whole TTL (the node may have given the
  lock up by now).

Someone may ask the holder to let go (``coterie revoke NAME``, or
:meth:`Client.revoke`): then ``held.revoke_asked`` is set,
``held.revoke_reason`` says why, and ``on_revoke`` (if given) is called
from the watching thread. Nothing is taken: the holder decides whether
and when to leave the block.

When the lock is lost, ``held.lost`` is set, ``on_lost`` (if given) is called from the
watching thread, ``held.check()`` raises, and leaving the ``with`` block
raises :class:`LockLost`, so that work done after the loss is not taken
for safe. Pass the fence to every resource that can check it: a later
holder's fence is higher.

The node's address comes from the argument ``url``, else the environment
variable ``COTERIE_URL`` (several, comma-separated: the first that answers
is used), else ``http://127.0.0.1:7401``; a bearer token from ``token``,
else ``COTERIE_TOKEN``. An ``https://`` URL speaks TLS: the node's
certificate is checked against the CA in ``ca`` (else ``COTERIE_TLS_CA``;
else the system's), and the client shows ``cert`` and ``key`` (else
``COTERIE_TLS_CERT`` and ``COTERIE_TLS_KEY``) when the node asks for one
(``client_cert_auth``; docs/src/security.md). Given several, ``lock`` also moves on from a node
that answers ``503 no_quorum`` (cut off from a majority of the cluster, it
grants nothing: docs/src/membership.md) to the next, and raises that
error only when every node gave it.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import ssl
import threading
import time
import urllib.parse

__all__ = [
    "Client",
    "Error",
    "Held",
    "LockLost",
    "Unavailable",
    "lock",
    "parse_duration",
]


class Error(Exception):
    """An error answer of the API: ``status``, ``error`` and ``detail``."""

    def __init__(self, status: int, error: str, detail: str):
        super().__init__(f"{status} {error}: {detail}")
        self.status = status
        self.error = error
        self.detail = detail


class Unavailable(Exception):
    """No node could be reached."""


class LockLost(Exception):
    """The lock was lost while held: another client may hold it now."""


_UNITS = {
    "ns": 1e-9, "nsec": 1e-9, "us": 1e-6, "usec": 1e-6, "\u00b5s": 1e-6,
    "ms": 1e-3, "msec": 1e-3, "millis": 1e-3,
    "s": 1.0, "sec": 1.0, "secs": 1.0, "second": 1.0, "seconds": 1.0,
    "m": 60.0, "min": 60.0, "mins": 60.0, "minute": 60.0, "minutes": 60.0,
    "h": 3600.0, "hr": 3600.0, "hrs": 3600.0, "hour": 3600.0, "hours": 3600.0,
    "d": 86400.0, "day": 86400.0, "days": 86400.0,
    "w": 604800.0, "week": 604800.0, "weeks": 604800.0,
}
_PART = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-z\u00b5]+)")


def parse_duration(text: str) -> float:
    """Seconds in a duration as the server writes and reads them
    (humantime's forms): ``"10s"``, ``"250ms"``, ``"1m 30s"``, ``"1h30m"``,
    ``"1.5s"``, ``"2days"``."""
    rest, total, parts = text.strip(), 0.0, 0
    while rest:
        match = _PART.match(rest)
        if not match or match.group(2) not in _UNITS:
            raise ValueError(f"not a duration like '10s' or '1m 30s': {text!r}")
        total += float(match.group(1)) * _UNITS[match.group(2)]
        rest, parts = rest[match.end():].strip(), parts + 1
    if not parts:
        raise ValueError(f"not a duration like '10s' or '1m 30s': {text!r}")
    return total


class Client:
    """The API of one node (the first of ``url``'s that answers)."""

    def __init__(self, url: str | None = None, token: str | None = None,
                 ca: str | None = None, cert: str | None = None, key: str | None = None):
        urls = url or os.environ.get("COTERIE_URL") or "http://127.0.0.1:7401"
        self.urls = [u.strip().rstrip("/") for u in urls.split(",") if u.strip()]
        self.token = token if token is not None else os.environ.get("COTERIE_TOKEN")
        self.url = self.urls[0]
        self.ca = ca or os.environ.get("COTERIE_TLS_CA") or None
        self.cert = cert or os.environ.get("COTERIE_TLS_CERT") or None
        self.key = key or os.environ.get("COTERIE_TLS_KEY") or None
        self._tls = None

    def _tls_context(self) -> ssl.SSLContext:
        """The TLS settings of every ``https://`` connection, made once."""
        if self._tls is None:
            context = ssl.create_default_context(cafile=self.ca)
            if self.cert:
                context.load_cert_chain(self.cert, self.key)
            self._tls = context
        return self._tls

    def _connection(self, url: str, timeout: float | None) -> http.client.HTTPConnection:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme == "https":
            return http.client.HTTPSConnection(parts.hostname, parts.port or 443, timeout=timeout,
                                               context=self._tls_context())
        return http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=timeout)

    def move_on(self, tried: set) -> bool:
        """Points the client at the first of its nodes not in ``tried``;
        False when it has tried them all."""
        for url in self.urls:
            if url not in tried:
                self.url = url
                return True
        return False

    def request(self, method: str, path: str, body: dict | None = None, timeout: float | None = 30.0):
        """One call; the JSON answer. Raises :class:`Error` for an error
        answer, :class:`Unavailable` when no node answers."""
        headers = {"content-type": "application/json"}
        if self.token:
            headers["authorization"] = f"Bearer {self.token}"
        data = json.dumps(body).encode() if body is not None else None
        last = None
        for url in [self.url] + [u for u in self.urls if u != self.url]:
            conn = self._connection(url, timeout)
            try:
                conn.request(method, path, body=data, headers=headers)
                response = conn.getresponse()
                text = response.read()
            except (ConnectionError, OSError) as e:  # refused, reset, timed out
                last = e
                continue
            finally:
                conn.close()
            self.url = url
            answer = json.loads(text) if text else None
            if response.status >= 400:
                answer = answer if isinstance(answer, dict) else {}
                raise Error(response.status, answer.get("error", "?"), answer.get("detail", ""))
            return answer
        raise Unavailable(f"no coterie node answers at {', '.join(self.urls)}: {last}")

    def session(self, ttl: str = "10s", client: str | None = None) -> dict:
        """Opens a session: ``{"id", "ttl"}``."""
        body = {"ttl": ttl}
        if client:
            body["client"] = client
        return self.request("POST", "/v1/sessions", body)

    def keepalive(self, session: str) -> dict:
        return self.request("POST", f"/v1/sessions/{session}/keepalive", timeout=5.0)

    def close(self, session: str) -> dict:
        return self.request("DELETE", f"/v1/sessions/{session}")

    def acquire(self, name: str, session: str, timeout: str | None = None, try_lock: bool = False,
                permits: int = 0, value: str | None = None, reentrant: bool = False,
                mode: str = "write") -> dict:
        """Takes ``name`` for ``session``: ``{"name", "fence", "node",
        "count", "mode"}``. With ``mode="read"`` the session shares the
        lock with other readers (a writer holds it alone); reads need a
        lock of one permit. With ``reentrant``, a session that holds
        ``name`` already takes it again at once with the same fence
        (``count`` says how often it holds it; as many releases let it
        go); without, that is refused (409)."""
        body: dict = {"session": session}
        if mode != "write":
            body["mode"] = mode
        if reentrant:
            body["reentrant"] = True
        if permits:
            body["permits"] = permits
        if timeout:
            body["timeout"] = timeout
        if try_lock:
            body["try"] = True
        if value is not None:
            body["value"] = value
        # No socket timeout: the node answers at the timeout, or when the
        # session ends.
        return self.request("POST", f"/v1/locks/{quote(name)}/acquire", body, timeout=None)

    def release(self, name: str, session: str, fence: int) -> dict:
        """Releases ``name`` once: ``{"name", "fence", "count"}``, ``count``
        what the session still holds of it (0: let go)."""
        body = {"session": session, "fence": fence}
        return self.request("POST", f"/v1/locks/{quote(name)}/release", body)

    def locks(self, prefix: str = "") -> list:
        query = f"?prefix={urllib.parse.quote(prefix)}" if prefix else ""
        return self.request("GET", f"/v1/locks{query}")

    def revoke(self, name: str, reason: str | None = None) -> dict:
        """Asks every holder of ``name`` to let go: ``{"name", "holders",
        "unreachable"}``. Each holder decides; 409 if nobody holds it."""
        body = {"reason": reason} if reason is not None else {}
        return self.request("POST", f"/v1/locks/{quote(name)}/revoke", body)

    def get_lock(self, name: str) -> dict:
        return self.request("GET", f"/v1/locks/{quote(name)}")

    def leader(self, name: str) -> dict:
        return self.request("GET", f"/v1/elections/{quote(name)}")

    def events(self, path: str):
        """The events of a stream, as ``(kind, data)`` pairs, until it ends.
        Raises :class:`Error` for an error answer; ``OSError`` when the
        node cannot be reached or the stream breaks off."""
        conn = self._connection(self.url, timeout=None)
        headers = {"accept": "text/event-stream"}
        if self.token:
            headers["authorization"] = f"Bearer {self.token}"
        try:
            conn.request("GET", path, headers=headers)
            response = conn.getresponse()
            if response.status >= 400:
                answer = json.loads(response.read() or b"{}")
                raise Error(response.status, answer.get("error", "?"), answer.get("detail", ""))
            kind, data = "message", []
            while True:
                line = response.readline()
                if not line:
                    return
                line = line.decode().rstrip("\r\n")
                if line.startswith("event:"):
                    kind = line[6:].strip()
                elif line.startswith("data:"):
                    data.append(line[5:].lstrip())
                elif not line and data:
                    yield kind, json.loads("\n".join(data))
                    kind, data = "message", []
        finally:
            conn.close()


def quote(name: str) -> str:
    """A lock name as one path segment (`/` percent-encoded)."""
    return urllib.parse.quote(name, safe="")


class Held:
    """A lock held by a session kept alive in the background; see the
    module's documentation. The session is kept alive from the start, so
    while it waits for the lock too: a waiter that stops its keepalives is
    never granted."""

    def __init__(self, client: Client, name: str, session: dict, on_lost=None, on_revoke=None):
        self.client = client
        self.name = name
        self.session = session["id"]
        self.ttl = parse_duration(session["ttl"])
        self.fence = None  # until granted
        self.node = None
        self.lost = threading.Event()
        self.why = None
        self._on_lost = on_lost
        self.revoke_asked = threading.Event()
        self.revoke_reason = None
        self._on_revoke = on_revoke
        self._done = threading.Event()
        self._last_ok = time.monotonic()
        threading.Thread(target=self._keep_alive, daemon=True).start()

    def granted(self, granted: dict) -> None:
        """The lock is held: from now on its loss is watched for."""
        self.fence = granted["fence"]
        self.node = granted["node"]
        threading.Thread(target=self._watch, daemon=True).start()

    def check(self) -> None:
        """Raises :class:`LockLost` if the lock was lost."""
        if self.lost.is_set():
            raise LockLost(f"lock {self.name!r} (fence {self.fence}) was lost: {self.why}")

    def _lose(self, why: str) -> None:
        # While it waits, a lost session is the acquire's error to tell.
        if self._done.is_set() or self.lost.is_set() or self.fence is None:
            return
        self.why = why
        self.lost.set()
        if self._on_lost:
            self._on_lost(self)

    def _asked(self, reason: str | None) -> None:
        self.revoke_reason = reason
        self.revoke_asked.set()
        if self._on_revoke:
            self._on_revoke(self)

    def _keep_alive(self) -> None:
        while not self._done.wait(self.ttl / 3):
            try:
                self.client.keepalive(self.session)
                self._last_ok = time.monotonic()
            except Error as e:
                if e.status == 404:
                    return self._lose("the session is gone at its node")
            except (Unavailable, OSError):
                pass
            if time.monotonic() - self._last_ok >= self.ttl:
                return self._lose(f"no keepalive got through for {self.ttl}s (the TTL)")

    def _watch(self) -> None:
        while not self._done.is_set() and not self.lost.is_set():
            try:
                for kind, data in self.client.events(f"/v1/sessions/{self.session}/watch"):
                    if kind == "ended":
                        return self._lose(f"the session ended: {data['reason']}")
                    if kind == "revoke" and data.get("name") == self.name:
                        self._asked(data.get("reason"))
                    # A plea made before the stream was open shows here.
                    if kind == "session" and not self.revoke_asked.is_set():
                        for h in data.get("held", []):
                            if h["name"] == self.name and h.get("revoke") is not None:
                                self._asked(h["revoke"] or None)
            except Error as e:
                if e.status == 404:
                    return self._lose("the session is gone at its node")
            except ConnectionRefusedError:
                return self._lose("its node is down (connection refused)")
            except OSError:
                pass
            # The stream broke off: look again, unless the node is gone.
            if self._done.wait(0.1):
                return

    def release(self) -> None:
        """Releases the lock and closes the session."""
        self._done.set()
        try:
            self.client.close(self.session)
        except (Error, Unavailable):
            pass  # gone already: nothing to let go of


class _Lock:
    def __init__(self, name, client, ttl, timeout, try_lock, value, on_lost, label, on_revoke,
                 mode):
        self.args = (name, client, ttl, timeout, try_lock, value, on_lost, label, on_revoke)
        self.mode = mode
        self.held: Held | None = None

    def __enter__(self) -> Held:
        name, client, ttl, timeout, try_lock, value, on_lost, label, on_revoke = self.args
        tried = set()
        while True:
            session = client.session(ttl, label)
            tried.add(client.url)  # where the session lives
            try:
                held = Held(client, name, session, on_lost, on_revoke)
            except BaseException:
                client.close(session["id"])  # not left open until its TTL
                raise
            try:
                held.granted(client.acquire(name, held.session, timeout, try_lock, value=value,
                                            mode=self.mode))
            except Error as e:
                held.release()
                # Sessions live at their node: a node cut off from a
                # majority is left with its session, and the next is asked.
                if e.error == "no_quorum" and client.move_on(tried):
                    continue
                raise
            except BaseException:
                held.release()
                raise
            self.held = held
            return held

    def __exit__(self, kind, exc, tb):
        held = self.held
        held.release()
        if kind is None and held.lost.is_set():
            held.check()
        return False


def lock(name: str, url: str | None = None, token: str | None = None, ttl: str = "10s",
         timeout: str | None = None, try_lock: bool = False, value: str | None = None,
         on_lost=None, client: str | None = None, on_revoke=None, mode: str = "write") -> _Lock:
    """A context manager that holds lock ``name`` while its block runs;
    ``mode="read"`` shares it with other readers (a writer holds it
    alone); ``value`` makes the holder the leader of the election by that
    name; ``on_revoke(held)`` is called when someone asks the holder to
    let go.
    Raises :class:`Error` with status 408 at ``timeout``, 409 when
    ``try_lock`` finds it held, 503 ``no_quorum`` when no node of ``url``
    has a quorum."""
    return _Lock(name, Client(url, token), ttl, timeout, try_lock, value, on_lost, client,
                 on_revoke, mode)
