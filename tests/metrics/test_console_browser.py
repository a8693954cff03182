#!/usr/bin/python3
"""The console in a real browser (docs/console.md; issue 24): Debian's headless Chromium, driven
through its DevTools protocol, logs in, reads a queue with known counts, its delayed job and when
it falls due, finds a dead job with its reason, respawns it and sees it delivered, pauses and resumes the queue, is refused a wrong
password, and logs in with a namespace's token that sees only its namespace. A screenshot of each
page is kept in the directory named by DQ_CONSOLE_SCREENSHOTS (default: the test's own directory,
removed afterwards); docs/console.md shows them.

    /usr/bin/python3 tests/metrics/test_console_browser.py /path/to/deferq [unittest options]

Needs the chromium and python3-websocket packages (scripts/bootstrap installs them).
"""

import base64
import json
import os
import shutil
import subprocess
import sys
import time
import unittest
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))

from dqtest import procs, runner  # noqa: E402
from dqtest.resp import Raw  # noqa: E402

import websocket  # noqa: E402  (python3-websocket)

DEFERQ = None
PASSWORD_ENV = "DQ_CONSOLE_BROWSER_ADMIN_PASSWORD"
PASSWORD = "browser-" + os.urandom(8).hex()


class Browser:
    """One headless Chromium and its page, through the DevTools protocol (JSON over a
    WebSocket). Pages run no script of their own (the console's CSP allows none); the test's
    expressions are DevTools evaluations, which a page's CSP does not govern."""

    def __init__(self, tmp):
        self.profile = os.path.join(tmp, "chromium-profile")
        self.log = open(os.path.join(tmp, "chromium.log"), "w")
        binary = shutil.which("chromium") or shutil.which("chromium-browser")
        if binary is None:
            raise RuntimeError("chromium is not installed (scripts/bootstrap installs it)")
        self.proc = subprocess.Popen(
            [binary, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-extensions", "--disable-background-networking", "--disable-sync",
             "--remote-debugging-port=0", "--remote-debugging-address=127.0.0.1",
             "--user-data-dir=" + self.profile, "--window-size=1280,900", "about:blank"],
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        port_file = os.path.join(self.profile, "DevToolsActivePort")
        deadline = time.monotonic() + 30
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError("chromium exited: see " + self.log.name)
            if os.path.exists(port_file):
                lines = open(port_file).read().split("\n")
                if len(lines) >= 2 and lines[0].isdigit():
                    break
            if time.monotonic() > deadline:
                raise RuntimeError("chromium did not open its DevTools port")
            time.sleep(0.1)
        port = int(lines[0])
        with urllib.request.urlopen("http://127.0.0.1:%d/json/list" % port, timeout=10) as r:
            targets = json.load(r)
        page = next(t for t in targets if t["type"] == "page")
        self.ws = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=30,
                                              suppress_origin=True)
        self.next_id = 0
        self.events = []
        self.call("Page.enable")
        self.call("Runtime.enable")

    def close(self):
        try:
            self.ws.close()
        finally:
            try:
                os.killpg(self.proc.pid, 9)
            except ProcessLookupError:
                pass
            self.proc.wait(timeout=10)
            self.log.close()

    def call(self, method, **params):
        self.next_id += 1
        my_id = self.next_id
        self.ws.send(json.dumps({"id": my_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == my_id:
                if "error" in msg:
                    raise RuntimeError("%s: %s" % (method, msg["error"]))
                return msg.get("result", {})
            if "method" in msg:
                self.events.append(msg["method"])

    def wait_load(self):
        deadline = time.monotonic() + 15
        while "Page.loadEventFired" not in self.events:
            if time.monotonic() > deadline:
                raise AssertionError("the page did not load")
            msg = json.loads(self.ws.recv())
            if "method" in msg:
                self.events.append(msg["method"])
        self.events.clear()

    def goto(self, url):
        self.events.clear()
        self.call("Page.navigate", url=url)
        self.wait_load()

    def eval(self, expression):
        r = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in r:
            raise AssertionError("%s: %s" % (expression, r["exceptionDetails"]))
        return r["result"].get("value")

    def fill(self, selector, value):
        self.eval("document.querySelector(%s).value = %s" % (json.dumps(selector),
                                                             json.dumps(value)))

    def click(self, selector):
        """Clicks a submit button and waits for the page the form leads to."""
        self.events.clear()
        self.eval("document.querySelector(%s).click()" % json.dumps(selector))
        self.wait_load()

    def text(self, selector="body"):
        return self.eval("(document.querySelector(%s) || {innerText: null}).innerText"
                         % json.dumps(selector))

    def path(self):
        return self.eval("location.pathname + location.search")

    def screenshot(self, name):
        shot = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        with open(os.path.join(Env.shots, name + ".png"), "wb") as f:
            f.write(base64.b64decode(shot["data"]))


class Env:
    tmp = redis = dq = browser = None
    mport = None
    shots = None
    token = None


def setUpModule():
    Env.tmp = procs.make_tmpdir("console-browser")
    Env.shots = os.environ.get("DQ_CONSOLE_SCREENSHOTS") or os.path.join(Env.tmp, "screenshots")
    os.makedirs(Env.shots, exist_ok=True)
    Env.redis = procs.Redis(Env.tmp).start()
    Env.mport = procs.free_port()
    os.environ[PASSWORD_ENV] = PASSWORD
    try:
        Env.dq = procs.Deferq(DEFERQ, Env.tmp, Env.redis.port, wait_pool=False, config_text=(
            '[server]\nmetrics_listen = "127.0.0.1:%d"\nconsole = true\n'
            '[auth]\nadmin_password_env = "%s"\nrequired = true\ncache_seconds = 1\n'
            % (Env.mport, PASSWORD_ENV)))
        Env.dq.start()
    finally:
        del os.environ[PASSWORD_ENV]
    a = Raw(Env.dq.port)
    a.call("AUTH", "admin", PASSWORD)
    for ns in ("shop", "billing"):
        a.call("NAMESPACE", "CREATE", ns)
    Env.token = a.call("TOKEN", "CREATE", "shop").decode()
    a.close()
    Env.browser = Browser(Env.tmp)


def tearDownModule():
    if Env.browser is not None:
        Env.browser.close()
    for p in (Env.dq, Env.redis):
        if p is not None:
            p.stop()
    procs.remove_tmpdir(Env.tmp)


def base():
    return "http://127.0.0.1:%d" % Env.mport


class BrowserConsole(unittest.TestCase):
    def login(self, namespace, secret):
        b = Env.browser
        b.goto(base() + "/console/login")
        b.fill('input[name="namespace"]', namespace)
        b.fill('input[name="password"]', secret)
        b.click('button[type="submit"]')

    def logout(self):
        Env.browser.click('form[action="/console/logout"] button')
        self.assertEqual(Env.browser.path(), "/console/login")

    def test_1_a_wrong_password_is_refused(self):
        b = Env.browser
        b.goto(base() + "/console")
        self.assertEqual(b.path(), "/console/login")  # nothing but the login without a session
        b.screenshot("login")
        self.login("", "not-the-password")
        self.assertEqual(b.text("#message"), "Wrong password or token.")
        self.assertEqual(b.path(), "/console/login")
        time.sleep(0.6)  # the failed login's penalty

    def test_2_admin_sees_counts_respawns_a_dead_job_pauses_and_resumes(self):
        b = Env.browser
        a = Raw(Env.dq.port)
        a.call("AUTH", "admin", PASSWORD)
        a.call("NAMESPACE", "USE", "shop")
        q = "emails"
        jid = a.call("PUBLISH", q, "mail to alice@example.com").decode()
        a.call("CONSUME", q)
        a.call("NACK", q, jid, "REASON", "smtp down: 421 try again later")
        for i in range(3):
            a.call("PUBLISH", q, "mail %d" % i)
        a.call("PUBLISH", q, "weekly digest", "DELAY", 3000)
        self.login("", PASSWORD)
        self.assertEqual(b.path(), "/console")
        # The overview lists the queue once the stats poller read it (every 2 s).
        deadline = time.monotonic() + 15
        while "emails" not in (b.text("#queues") or "") and time.monotonic() < deadline:
            time.sleep(0.5)
            b.goto(base() + "/console")
        b.screenshot("overview")
        row = b.eval("Array.from(document.querySelectorAll('#queues tr')).map(r => r.innerText)"
                     ".find(t => t.includes('emails'))")
        self.assertIsNotNone(row)
        self.assertEqual(row.split("\t")[:6], ["shop", "emails", "3", "1", "0", "1"])
        # The queue's page: counts, the dead job with its reason.
        b.events.clear()
        b.eval("Array.from(document.querySelectorAll('#queues a')).find(a => a.innerText == "
               "'emails').click()")
        b.wait_load()
        self.assertEqual(b.path(), "/console/queue?ns=shop&q=emails")
        counts = b.eval("Array.from(document.querySelectorAll('#counts td')).map(t => t.innerText)")
        self.assertEqual(counts[:5], ["3", "1", "0", "1", "no"])
        self.assertIn("weekly digest", b.text("#delayed"))  # the delayed job, due in an hour
        self.assertIn("+0 h\t1", b.text("#due-hours"))
        self.assertIn("smtp down: 421 try again later", b.text("#dead"))
        self.assertIn(jid, b.text("#dead"))
        b.screenshot("queue")
        # The job's page.
        b.events.clear()
        b.eval("document.querySelector('#dead a').click()")
        b.wait_load()
        self.assertEqual(b.text("#job-last_error"), "smtp down: 421 try again later")
        self.assertEqual(b.text("#job-state"), "dead")
        b.screenshot("job")
        b.goto(base() + "/console/queue?ns=shop&q=emails")
        # Respawn it: it is delivered again.
        b.click('button[name="one"][value="respawn %s"]' % jid)
        self.assertEqual(b.text("#message"), "Respawned 1 dead job.")
        self.assertIsNone(b.text("#dead"))
        b.screenshot("respawned")
        got = a.call("CONSUME", q, "COUNT", 10)
        self.assertIn(jid, [j[1].decode() for j in got])
        for j in got:
            a.call("ACK", q, j[1])
        # Pause and resume.
        b.click('button[name="act"][value="pause"]')
        self.assertEqual(b.text("#message"), "Paused.")
        self.assertEqual(b.text("#paused"), "yes")
        a.call("PUBLISH", q, "while paused")
        self.assertIsNone(a.call("CONSUME", q))
        b.click('button[name="act"][value="resume"]')
        self.assertEqual(b.text("#message"), "Resumed.")
        self.assertEqual(b.text("#paused"), "no")
        self.assertIsNotNone(a.call("CONSUME", q))
        a.call("PURGE", q)
        a.close()
        self.logout()

    def test_3_a_namespace_token_sees_its_namespace_only(self):
        b = Env.browser
        a = Raw(Env.dq.port)
        a.call("AUTH", "admin", PASSWORD)
        a.call("NAMESPACE", "USE", "billing")
        a.call("PUBLISH", "invoices", "x")
        a.call("NAMESPACE", "USE", "shop")
        a.call("PUBLISH", "orders", "y")
        a.close()
        self.login("shop", Env.token)
        self.assertEqual(b.path(), "/console")
        deadline = time.monotonic() + 15
        while "orders" not in (b.text("#queues") or "") and time.monotonic() < deadline:
            time.sleep(0.5)
            b.goto(base() + "/console")
        text = b.text("body")
        self.assertIn("namespace shop", text)
        self.assertIn("orders", text)
        self.assertNotIn("invoices", text)
        self.assertIsNone(b.text("#pools"))
        b.screenshot("namespace")
        b.goto(base() + "/console/queue?ns=billing&q=invoices")
        self.assertIn("sees namespace 'shop' only", b.text("body"))
        b.goto(base() + "/console")
        self.logout()


if __name__ == "__main__":
    sys.exit(runner.main_with_deferq(__name__, sys.argv,
                                     "test_console_browser.py /path/to/deferq [unittest args]"))
