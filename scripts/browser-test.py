#!/usr/bin/env python3
"""The dashboard, tested as a person uses it, in a real browser.

Starts a 5-node `coterie up --dashboard` on free ports, opens the page in
headless Chromium, waits until it shows five nodes up and n5 the
coordinator, clicks n5's "kill" button (a mouse press and release at the
button, through WebDriver's pointer actions), and checks that the page then
shows n5 down and n4 the coordinator. Then clients take named locks with
`coterie lock` (one holds printer-2 through n2 while another waits for it
through n3; a third holds jobs/nightly), and the page's lock table must
show each holder, fence and waiter; once they let go, the locks leave the
table. With --screenshot FILE it saves a picture of the page then.

The browser is Debian's chromium, driven through its chromedriver by
selenium (scripts/test.sh installs all three).

Usage: target/py/bin/python scripts/browser-test.py [--bin target/release/coterie] [--screenshot FILE]
Exits 0 on success; 1 with the reason otherwise.
"""
import argparse, os, shutil, socket, subprocess, sys, tempfile, time
import urllib.request

from selenium import webdriver
from selenium.common.exceptions import (
    StaleElementReferenceException,
    TimeoutException,
    WebDriverException,
)
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

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


class Page:
    """The dashboard in a Chromium driven by selenium (WebDriver)."""

    def __init__(self, driver):
        self.driver = driver

    def eval(self, expression):
        return self.driver.execute_script("return " + expression)

    def wait_for(self, what, expression):
        try:
            WebDriverWait(self.driver, PATIENCE, poll_frequency=0.1).until(lambda _: self.eval(expression))
        except TimeoutException:
            state = self.eval("JSON.stringify([...document.querySelectorAll('.node')].map(n => [n.id, n.className, n.innerText]))")
            locks = self.eval("document.querySelector('#locks-box').innerText")
            fail(f"the page never showed {what}; it shows {state} and the locks {locks!r}")

    def click(self, selector):
        """A real click: WebDriver moves the mouse to the element, presses and
        releases. The page draws its node cards anew at every event, so the
        element found may be replaced before the click lands: find it again."""
        for attempt in range(10):
            try:
                self.driver.find_element(By.CSS_SELECTOR, selector).click()
                return
            except StaleElementReferenceException:
                time.sleep(0.05)
        fail(f"{selector} was redrawn under every click")

    def screenshot(self, path):
        self.driver.save_screenshot(path)


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
    procs, drivers = [], []
    try:
        config = os.path.join(tmp, "cluster.toml")
        subprocess.run([args.bin, "init", "--name", "browser", "--nodes", "5", "--free-ports",
                        "--allow-faults", "--out", config], check=True)
        dashboard = f"127.0.0.1:{free_port()}"
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

        driver_path = shutil.which("chromedriver")
        if not driver_path:
            fail("no chromedriver: apt-get install chromium-driver (scripts/test.sh does)")
        # Chromium sometimes fails to come up under load ("session not
        # created"): that is the machine, not the page; try again, afresh.
        for attempt in range(3):
            options = webdriver.ChromeOptions()
            options.binary_location = chromium()
            for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
                         "--window-size=1280,900", f"--user-data-dir={os.path.join(tmp, f'profile{attempt}')}"):
                options.add_argument(flag)
            try:
                driver = webdriver.Chrome(service=Service(driver_path), options=options)
                break
            except WebDriverException as e:
                if attempt == 2:
                    fail(f"Chromium did not start: {e.msg}")
                print(f"browser test: Chromium did not start ({e.msg}); again", file=sys.stderr)
                time.sleep(1)
        drivers.append(driver)
        page = Page(driver)
        driver.get(f"http://{dashboard}/")

        page.wait_for("five nodes up, n5 coordinating",
                      "document.querySelectorAll('.node[data-state=up]').length === 5 && "
                      "!!document.querySelector('#node-5.coordinator') && "
                      "[...document.querySelectorAll('.node .view')].filter(v => v.innerText.endsWith(': n1 n2 n3 n4 n5')).length === 5")
        print("browser test: the page shows five nodes up in one view of all five, and n5 coordinating")
        page.click("#node-5 button[data-action=kill]")
        page.wait_for("n5 down and n4 coordinating",
                      "document.querySelector('#node-5').dataset.state === 'down' && "
                      "!!document.querySelector('#node-4.coordinator') && "
                      "document.querySelector('#node-4 .follows').innerText.startsWith('the coordinator') && "
                      "document.querySelector('#node-1 .follows').innerText.includes('follows n4')")
        print("browser test: after a click on n5's kill, the page shows n5 down and n4 coordinating (its card says so)")

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
        # The strip is drawn to the span its messages take: the first arrow
        # of the window starts near the left edge, not in the last pixels.
        # A client taking and leaving a lock of its own meanwhile keeps
        # messages coming, so that the window before the event shown holds
        # some whenever the page is looked at (a quiet cluster's last event
        # may have nothing before it in the window).
        churn = subprocess.Popen(
            ["sh", "-c", f"while [ ! -e {release} ]; do {args.bin} lock --config {config} "
                         f"--node 3 strip-churn -- sleep 0.02; done"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(churn)
        page.wait_for("the strip's arrows spread from its left edge",
                      "(() => { const xs = [...document.querySelectorAll('#strip line')]"
                      ".filter(l => l.querySelector('title')).map(l => +l.getAttribute('x1'));"
                      " return xs.length >= 2 && xs.reduce((a, b) => Math.min(a, b)) < 50 + 1030 * 0.25; })()")
        print("browser test: the strip is drawn to the span of its messages")
        if args.screenshot:
            page.screenshot(args.screenshot)
            print(f"browser test: screenshot in {args.screenshot}")
        open(release, "w").close()
        if waiter.wait(timeout=PATIENCE) != 0 or night.wait(timeout=PATIENCE) != 0:
            fail("a lock client failed")
        if churn.wait(timeout=PATIENCE) != 0:
            fail("the client churning a lock for the strip failed")
        page.wait_for("no lock left once the clients let go",
                      "document.querySelectorAll('#locks tr.lock').length === 0 && "
                      "document.querySelector('#locks td.none') !== null")
        print("browser test: once the clients let go, the table lists no lock")

        # A node cut off from the others is a minority: it says so, and
        # comes back into the majority's view once healed.
        page.click("#node-1 button[data-action=partition]")
        page.wait_for("n1 cut off, a minority",
                      "document.querySelector('#node-1').dataset.state === 'minority' && "
                      "document.querySelector('#node-1 .status').innerText === 'minority'")
        page.click("#node-1 button[data-action=heal]")
        page.wait_for("n1 back in a view of n1 to n4",
                      "document.querySelector('#node-1').dataset.state === 'up' && "
                      "document.querySelector('#node-1 .view').innerText.endsWith(': n1 n2 n3 n4')")
        print("browser test: after a click on n1's partition the page shows n1 a minority; after heal, back in the view of n1 to n4")
        print("browser test: PASSED")
    finally:
        for d in drivers:
            d.quit()
        for p in reversed(procs):
            p.terminate()
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
