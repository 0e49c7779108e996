#!/usr/bin/env python3
"""The dashboard, tested as a person uses it, in a real browser.

Starts a 5-node `coterie up --dashboard` on free ports, opens the page in
headless Chromium, waits until it shows five nodes up and n5 the
coordinator, clicks n5's "kill" button (a mouse press and release at the
button, through the DevTools protocol), and checks that the page then
shows n5 down and n4 the coordinator. Then clients take named locks with
`coterie lock` (one holds printer-2 through n2 while another waits for it
through n3; a third holds jobs/nightly), and the page's lock table must
show each holder, fence and waiter; once they let go, the locks leave the
table. With --screenshot FILE it saves a picture of the page then.

Only the standard library: the DevTools protocol is JSON over a
WebSocket, and the few lines of WebSocket it needs are below.

Usage: scripts/browser-test.py [--bin target/release/coterie] [--screenshot FILE]
Exits 0 on success; 1 with the reason otherwise.
"""
import argparse, base64, json, os, shutil, socket, struct, subprocess, sys, tempfile, time
import urllib.request

PATIENCE = 30  # seconds for each thing awaited


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def fail(why):
    print(f"browser test: FAILED: {why}", file=sys.stderr)
    sys.exit(1)


class WebSocket:
    """A client WebSocket (RFC 6455): text frames out (masked), any in."""

    def __init__(self, url):
        assert url.startswith("ws://")
        hostport, path = url[5:].split("/", 1)
        host, port = hostport.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=PATIENCE)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(
            f"GET /{path} HTTP/1.1\r\nHost: {hostport}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode()
        )
        response = b""
        while b"\r\n\r\n" not in response:
            chunk = self.sock.recv(4096)
            if not chunk:
                fail("the browser closed the DevTools connection")
            response += chunk
        if b" 101 " not in response.split(b"\r\n")[0]:
            fail(f"no WebSocket upgrade: {response[:200]!r}")
        self.buffer = response.split(b"\r\n\r\n", 1)[1]

    def _read(self, n):
        while len(self.buffer) < n:
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                fail("the browser closed the DevTools connection")
            self.buffer += chunk
        data, self.buffer = self.buffer[:n], self.buffer[n:]
        return data

    def send(self, text):
        payload = text.encode()
        header = bytes([0x81])
        n = len(payload)
        if n < 126:
            header += bytes([0x80 | n])
        elif n < 1 << 16:
            header += bytes([0x80 | 126]) + struct.pack(">H", n)
        else:
            header += bytes([0x80 | 127]) + struct.pack(">Q", n)
        mask = os.urandom(4)
        self.sock.sendall(header + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))

    def recv(self):
        message = b""
        while True:
            first, second = self._read(2)
            n = second & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._read(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._read(8))[0]
            payload = self._read(n)
            message += payload
            if first & 0x80:  # FIN
                return message.decode()


class Page:
    """One browser tab, driven through the DevTools protocol."""

    def __init__(self, ws):
        self.ws, self.next_id = ws, 0

    def call(self, method, **params):
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            reply = json.loads(self.ws.recv())
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    fail(f"{method}: {reply['error']}")
                return reply.get("result", {})

    def eval(self, expression):
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return result.get("result", {}).get("value")

    def wait_for(self, what, expression):
        deadline = time.time() + PATIENCE
        while time.time() < deadline:
            if self.eval(expression):
                return
            time.sleep(0.1)
        state = self.eval("JSON.stringify([...document.querySelectorAll('.node')].map(n => [n.id, n.className, n.innerText]))")
        locks = self.eval("document.querySelector('#locks-box').innerText")
        fail(f"the page never showed {what}; it shows {state} and the locks {locks!r}")

    def click(self, selector):
        """A real click: the mouse pressed and released at the element."""
        box = self.eval(
            f"(() => {{ const r = document.querySelector({json.dumps(selector)}).getBoundingClientRect();"
            f" return [r.x + r.width / 2, r.y + r.height / 2]; }})()"
        )
        if not box:
            fail(f"no {selector} on the page")
        x, y = box
        for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1)


def chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    fail("no Chromium: apt-get install chromium (scripts/test.sh does)")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", default="target/release/coterie")
    parser.add_argument("--screenshot")
    args = parser.parse_args()

    tmp = tempfile.mkdtemp(prefix="coterie-browser-")
    procs = []
    try:
        ports = [free_port() for _ in range(12)]
        config = os.path.join(tmp, "cluster.toml")
        with open(config, "w") as f:
            f.write('[cluster]\nname = "browser"\nmutex = "centralized"\nelection = "bully"\n'
                    '[security]\nallow_faults = true\n'
                    '[timing]\nheartbeat = "50ms"\nfailure_timeout = "250ms"\n')
            for i in range(5):
                f.write(f'[[node]]\nid = {i + 1}\npeer = "127.0.0.1:{ports[2 * i]}"\n'
                        f'client = "127.0.0.1:{ports[2 * i + 1]}"\n')
        dashboard = f"127.0.0.1:{ports[10]}"
        up_log = open(os.path.join(tmp, "up.log"), "w")
        up = subprocess.Popen([args.bin, "up", "--config", config, "--dashboard", dashboard],
                              stdin=subprocess.PIPE, stdout=up_log, stderr=up_log)
        procs.append(up)
        deadline = time.time() + PATIENCE
        while True:
            try:
                urllib.request.urlopen(f"http://{dashboard}/api/cluster", timeout=2).read()
                break
            except OSError:
                if time.time() > deadline or up.poll() is not None:
                    fail("the dashboard never answered: " + open(up_log.name).read()[-2000:])
                time.sleep(0.2)

        devtools = ports[11]
        browser = subprocess.Popen(
            [chromium(), "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
             f"--remote-debugging-port={devtools}", f"--user-data-dir={os.path.join(tmp, 'profile')}",
             "--window-size=1280,900", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(browser)
        deadline = time.time() + PATIENCE
        while True:
            try:
                targets = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{devtools}/json/list", timeout=2).read())
                pages = [t for t in targets if t.get("type") == "page"]
                if pages:
                    break
            except OSError:
                pass
            if time.time() > deadline:
                fail("Chromium's DevTools never answered")
            time.sleep(0.2)
        page = Page(WebSocket(pages[0]["webSocketDebuggerUrl"]))
        page.call("Page.enable")
        page.call("Page.navigate", url=f"http://{dashboard}/")

        page.wait_for("five nodes up, n5 coordinating",
                      "document.querySelectorAll('.node[data-state=up]').length === 5 && "
                      "!!document.querySelector('#node-5.coordinator')")
        print("browser test: the page shows five nodes up and n5 coordinating")
        page.click("#node-5 button[data-action=kill]")
        page.wait_for("n5 down and n4 coordinating",
                      "document.querySelector('#node-5').dataset.state === 'down' && "
                      "!!document.querySelector('#node-4.coordinator') && "
                      "document.querySelector('#node-4 .follows').innerText.includes('n4')")
        print("browser test: after a click on n5's kill, the page shows n5 down and n4 coordinating")

        # Named locks: a holder and a waiter on one, a holder on another.
        def lock(node, name, *cmd):
            p = subprocess.Popen([args.bin, "lock", "--config", config, "--node", str(node), name, "--", *cmd],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            procs.append(p)
            return p
        release = os.path.join(tmp, "release")
        wait_file = f"while [ ! -e {release} ]; do sleep 0.05; done"
        lock(2, "printer-2", "sh", "-c", wait_file)
        page.wait_for("printer-2 held by n2",
                      "[...document.querySelectorAll('#locks tr.lock')].some(r => r.dataset.name === 'printer-2' && "
                      "r.querySelector('.holders').innerText.startsWith('n2 ') && "
                      "r.querySelector('.holders').innerText.includes('fence'))")
        waiter = lock(3, "printer-2", "true")
        night = lock(1, "jobs/nightly", "sh", "-c", wait_file)
        page.wait_for("n3 waiting for printer-2 and jobs/nightly held by n1",
                      "(() => { const rows = Object.fromEntries([...document.querySelectorAll('#locks tr.lock')]"
                      ".map(r => [r.dataset.name, r])); const p = rows['printer-2'], j = rows['jobs/nightly'];"
                      " return !!p && !!j && p.dataset.holders === '1' && p.dataset.waiters === '1' &&"
                      " p.querySelector('.waiters').innerText.startsWith('1. n3 ') &&"
                      " j.querySelector('.holders').innerText.startsWith('n1 '); })()")
        print("browser test: the lock table shows printer-2 held by n2 with n3 waiting, and jobs/nightly held by n1")
        if args.screenshot:
            shot = page.call("Page.captureScreenshot", format="png")
            with open(args.screenshot, "wb") as f:
                f.write(base64.b64decode(shot["data"]))
            print(f"browser test: screenshot in {args.screenshot}")
        open(release, "w").close()
        if waiter.wait(timeout=PATIENCE) != 0 or night.wait(timeout=PATIENCE) != 0:
            fail("a lock client failed")
        page.wait_for("no lock left once the clients let go",
                      "document.querySelectorAll('#locks tr.lock').length === 0 && "
                      "document.querySelector('#locks td.none') !== null")
        print("browser test: once the clients let go, the table lists no lock")
        print("browser test: PASSED")
    finally:
        for p in reversed(procs):
            p.terminate()
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
