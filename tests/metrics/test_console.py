#!/usr/bin/python3
"""The console (docs/console.md; issue 24): login with the admin password or a namespace's token,
the overview of pools and queues from deferq's own figures, search and pages, a queue's page
(counts, ready jobs, dead letters with their reasons), a job by id (payload shown safely), the
actions (pause, resume, purge with its confirmation, respawn and delete one, the selected, all,
all matching) with their cross-site token, a read-only mode, a revoked token ending its login;
nothing served without a session; off unless server.console = true.

    /usr/bin/python3 tests/metrics/test_console.py /path/to/deferq [unittest options]

One redis-server and deferqs with the console on their metrics ports; http.client as the browser
(a headless browser test is still to come, see the issue).
"""

import http.client
import os
import re
import sys
import time
import unittest
import urllib.parse

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))

from dqtest import procs, runner  # noqa: E402
from dqtest.resp import Raw  # noqa: E402

DEFERQ = None
PASSWORD_ENV = "DQ_CONSOLE_TEST_ADMIN_PASSWORD"
PASSWORD = "console-" + os.urandom(8).hex()


def request(port, method, path, body=None, cookie=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    headers = {}
    if body is not None:
        body = urllib.parse.urlencode(body)
        headers["Content-Type"] = "application/x-www-form-urlencoded"
    if cookie:
        headers["Cookie"] = cookie
    c.request(method, path, body=body, headers=headers)
    r = c.getresponse()
    out = (r.status, {k.lower(): v for k, v in r.getheaders()}, r.read().decode())
    c.close()
    return out


class Env:
    tmp = redis = dq = None
    mport = None


def setUpModule():
    Env.tmp = procs.make_tmpdir("console")
    Env.redis = procs.Redis(Env.tmp).start()
    Env.mport = procs.free_port()
    os.environ[PASSWORD_ENV] = PASSWORD
    try:
        Env.dq = procs.Deferq(DEFERQ, Env.tmp, Env.redis.port, config_text=(
            '[server]\nmetrics_listen = "127.0.0.1:%d"\nconsole = true\n'
            '[auth]\nadmin_password_env = "%s"\n' % (Env.mport, PASSWORD_ENV)))
        Env.dq.start()
    finally:
        del os.environ[PASSWORD_ENV]


def tearDownModule():
    for p in (Env.dq, Env.redis):
        if p is not None:
            p.stop()
    procs.remove_tmpdir(Env.tmp)


def login():
    """A session cookie ("dq_console=..."), after waiting out any failed-login penalty."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        status, headers, _ = request(Env.mport, "POST", "/console/login", {"password": PASSWORD})
        if status == 303:
            return headers["set-cookie"].split(";")[0]
        time.sleep(0.3)
    raise AssertionError("could not log in")


def page_token(cookie, path="/console", port=None):
    """The cross-site token a page carries."""
    _, _, body = request(port or Env.mport, "GET", path, cookie=cookie)
    return re.search(r'name="csrf" value="([0-9a-f]+)"', body).group(1)


def act(cookie, fields, port=None):
    """Posts an action as the queue page's forms do (fields: a dict, or a list of pairs for
    repeated names); answers (status, location, message)."""
    if isinstance(fields, dict):
        fields = list(fields.items())
    if not any(k == "csrf" for k, _ in fields):
        fields.append(("csrf", page_token(cookie, port=port)))
    status, headers, body = request(port or Env.mport, "POST", "/console/act", fields,
                                    cookie=cookie)
    location = headers.get("location", "")
    msg = urllib.parse.parse_qs(urllib.parse.urlparse(location).query).get("msg", [""])[0]
    return status, location, msg


def dead_job(r, queue, payload, reason):
    """A job published to `queue` (which holds no other ready job), consumed and failed for good
    with `reason`; its id."""
    jid = r.call("PUBLISH", queue, payload).decode()
    job = r.call("CONSUME", queue)
    assert job[1].decode() == jid, "the queue held another ready job"
    r.call("NACK", queue, jid, "REASON", reason)
    return jid


class Console(unittest.TestCase):
    def test_nothing_but_the_login_page_without_a_session(self):
        for path in ("/console", "/console/", "/console?q=x", "/console/queue/x"):
            status, headers, body = request(Env.mport, "GET", path)
            self.assertEqual((status, headers.get("location")), (303, "/console/login"), path)
        status, headers, body = request(Env.mport, "GET", "/console/login")
        self.assertEqual(status, 200)
        self.assertIn('name="password"', body)
        self.assertNotIn("<table", body)
        self.assertEqual(headers["cache-control"], "no-store")
        self.assertIn("frame-ancestors 'none'", headers["content-security-policy"])
        # A forged or tampered cookie is no session.
        cookie = login()
        name, value = cookie.split("=", 1)
        forged = name + "=" + value.replace("admin.", "admin.9", 1)
        self.assertEqual(request(Env.mport, "GET", "/console", cookie=forged)[0], 303)
        self.assertEqual(request(Env.mport, "GET", "/console", cookie=name + "=x")[0], 303)
        self.assertEqual(request(Env.mport, "GET", "/console", cookie=cookie)[0], 200)

    def test_a_wrong_password_is_refused_logged_and_slowed(self):
        status, _, body = request(Env.mport, "POST", "/console/login", {"password": "nope"})
        self.assertEqual(status, 403)
        self.assertIn("Wrong password", body)
        status, _, body = request(Env.mport, "POST", "/console/login", {"password": PASSWORD})
        self.assertEqual(status, 429)  # even the right one, until the penalty has passed
        with open(Env.dq.log) as f:
            self.assertIn("console: a failed login", f.read())
        self.assertNotIn(PASSWORD, open(Env.dq.log).read())
        time.sleep(0.6)
        self.assertTrue(login().startswith("dq_console="))

    def test_the_session_cookie_is_http_only_and_same_site(self):
        status, headers, _ = request(Env.mport, "POST", "/console/login", {"password": PASSWORD})
        if status == 429:
            time.sleep(5.5)
            status, headers, _ = request(Env.mport, "POST", "/console/login",
                                         {"password": PASSWORD})
        self.assertEqual((status, headers["location"]), (303, "/console"))
        attrs = headers["set-cookie"]
        for a in ("HttpOnly", "SameSite=Strict", "Path=/console"):
            self.assertIn(a, attrs)

    def test_the_overview_shows_known_counts_escaped_searchable_and_paged(self):
        r = Raw(Env.dq.port)
        q = "console-known"
        for i in range(3):
            r.call("PUBLISH", q, "ready-%d" % i)
        r.call("PUBLISH", q, "later", "DELAY", 3600)
        r.call("PUBLISH", q, "later2", "DELAY", 3600)
        job = r.call("CONSUME", q)
        r.call("NACK", q, job[1], "REASON", "smtp down")  # tries 1: dead
        r.call("PUBLISH", "console-paused", "x")
        r.call("QPAUSE", "console-paused")
        for i in range(120):
            r.call("PUBLISH", "console-many-%03d" % i, "x")
        cookie = login()
        want = ["console-known", "2", "2", "0", "1"]  # ready, delayed, leased, dead
        deadline = time.monotonic() + 15
        row = None
        while time.monotonic() < deadline:
            status, _, body = request(Env.mport, "GET", "/console?q=console-known", cookie=cookie)
            self.assertEqual(status, 200)
            m = re.search(r'<tr><td>default</td><td><a href="/console/queue\?ns=default&amp;'
                          r'q=console-known">console-known</a></td>((?:<td[^>]*>[^<]*</td>)+)</tr>',
                          body)
            if m:
                row = re.findall(r"<td[^>]*>([^<]*)</td>", m.group(1))
                if row[:4] == want[1:]:
                    break
            time.sleep(0.3)
        self.assertIsNotNone(row, body)
        self.assertEqual(row[:4], want[1:], body)
        self.assertIn('id="pools"', body)
        self.assertIn("1 queue;", body)
        # What the page echoes is escaped, never markup (queue names cannot hold any).
        _, _, body = request(Env.mport, "GET", "/console?q=%22%3E%3Cb%3Eodd", cookie=cookie)
        self.assertIn('value="&quot;&gt;&lt;b&gt;odd"', body)
        self.assertNotIn("<b>odd", body)
        _, _, body = request(Env.mport, "GET", "/console?q=console-paused", cookie=cookie)
        self.assertIn("<td>paused</td>", body)
        # 120 queues: 100 on the first page, 20 on the second.
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            _, _, body = request(Env.mport, "GET", "/console?q=console-many-", cookie=cookie)
            if "120 queues;" in body:
                break
            time.sleep(0.3)
        self.assertIn("120 queues; page 1 of 2", body)
        self.assertEqual(body.count(">console-many-"), 100)
        self.assertIn('href="/console?page=1&amp;q=console-many-"', body)
        _, _, body = request(Env.mport, "GET", "/console?q=console-many-&page=1", cookie=cookie)
        self.assertEqual(body.count(">console-many-"), 20)
        self.assertIn("page 2 of 2", body)
        r.call("QRESUME", "console-paused")
        for name in ["console-known", "console-paused"] + [
                "console-many-%03d" % i for i in range(120)]:
            r.call("PURGE", name)
        r.close()

    def test_logout_needs_the_pages_token(self):
        cookie = login()
        _, _, body = request(Env.mport, "GET", "/console", cookie=cookie)
        token = re.search(r'name="csrf" value="([0-9a-f]+)"', body).group(1)
        status, _, _ = request(Env.mport, "POST", "/console/logout", {"csrf": "0" * len(token)},
                               cookie=cookie)
        self.assertEqual(status, 403)  # a cross-site form cannot know the token
        status, _, _ = request(Env.mport, "POST", "/console/logout", {}, cookie=cookie)
        self.assertEqual(status, 403)
        status, headers, _ = request(Env.mport, "POST", "/console/logout", {"csrf": token},
                                     cookie=cookie)
        self.assertEqual((status, headers["location"]), (303, "/console/login"))
        self.assertIn("Max-Age=0", headers["set-cookie"])

    def test_metrics_and_healthz_are_still_served(self):
        self.assertEqual(request(Env.mport, "GET", "/healthz")[0], 200)
        self.assertEqual(request(Env.mport, "GET", "/metrics")[0], 200)


class QueuePages(unittest.TestCase):
    def test_a_queue_shows_its_counts_ready_jobs_and_dead_letters_with_reasons(self):
        r = Raw(Env.dq.port)
        q = "console-page"
        smtp = dead_job(r, q, "mail to bob", "smtp down")
        for i in range(3):
            r.call("PUBLISH", q, "ready <b>%d</b>" % i)
        r.call("PUBLISH", q, "later", "DELAY", 5400)
        cookie = login()
        status, _, body = request(Env.mport, "GET", "/console/queue?ns=default&q=" + q,
                                  cookie=cookie)
        self.assertEqual(status, 200, body)
        counts = re.search(r'<table id="counts">.*?</tr><tr>(.*?)</tr>', body).group(1)
        self.assertEqual(re.findall(r"<td[^>]*>([^<]*)</td>", counts)[:5],
                         ["3", "1", "0", "1", "no"])
        self.assertIn("ready &lt;b&gt;0&lt;/b&gt;", body)  # payloads escaped
        self.assertNotIn("<b>0</b>", body)
        dead = re.search(r'<table id="dead">(.*?)</table>', body).group(1)
        self.assertIn(smtp, dead)
        self.assertIn('<td class="text reason">smtp down</td>', dead)
        # The delayed job, when it falls due, and the charts of the coming minutes and hours.
        delayed = re.search(r'<table id="delayed">(.*?)</table>', body).group(1)
        self.assertIn(">later<", delayed)
        self.assertIn("UTC", delayed)
        self.assertIn('<h2>Leased</h2><p class="muted">No job.</p>', body)
        hours = re.search(r'<table class="chart" id="due-hours">(.*?)</table>', body).group(1)
        self.assertIn("<tr><td>+1 h</td><td>1</td>", hours)  # due in 1.5 h: the second hour
        self.assertIn("0 due in the next 60 minutes, 1 later.", body)
        self.assertIn("1 due in the next 24 hours, 0 later.", body)
        # Another namespace's queue or a bad name: refused, nothing run.
        self.assertEqual(request(Env.mport, "GET", "/console/queue?ns=default&q=a%20b",
                                 cookie=cookie)[0], 400)
        self.assertEqual(request(Env.mport, "GET", "/console/queue?ns=default", cookie=cookie)[0],
                         400)
        r.call("PURGE", q)
        r.close()

    def test_delayed_and_leased_jobs_are_paged_by_due_time(self):
        r = Raw(Env.dq.port)
        q = "console-paged"
        ids = [r.call("PUBLISH", q, "d%02d" % i, "DELAY", 600 + i).decode() for i in range(60)]
        for i in range(3):
            r.call("PUBLISH", q, "l%d" % i)
        leased = [j[1].decode() for j in r.call("CONSUME", q, "COUNT", 3, "TTR", 300)]
        cookie = login()
        _, _, body = request(Env.mport, "GET", "/console/queue?ns=default&q=" + q, cookie=cookie)
        first = re.findall(r'id=([0-9A-Z]+)">', re.search(
            r'<table id="delayed">(.*?)</table>', body).group(1))
        self.assertEqual(first, ids[:50])
        self.assertIn("50 of 60", body)
        self.assertEqual(re.findall(r'id=([0-9A-Z]+)">', re.search(
            r'<table id="leased">(.*?)</table>', body).group(1)), leased)
        self.assertIn("60 due in the next 60 minutes, 0 later.", body)
        minutes = re.search(r'<table class="chart" id="due-minutes">(.*?)</table>', body).group(1)
        rows = re.findall(r"<tr><td>\+(\d+) min</td><td>(\d+)</td>", minutes)
        self.assertEqual(sum(int(n) for _, n in rows), 60)
        self.assertTrue(all(9 <= int(m) <= 10 for m, _ in rows), rows)  # due in 600..659 s
        nxt = re.search(r'<a id="delayed-next" href="([^"]+)"', body).group(1).replace("&amp;", "&")
        _, _, body = request(Env.mport, "GET", nxt, cookie=cookie)
        second = re.findall(r'id=([0-9A-Z]+)">', re.search(
            r'<table id="delayed">(.*?)</table>', body).group(1))
        self.assertEqual(second, ids[50:])
        self.assertNotIn('id="delayed-next"', body)
        r.call("PURGE", q)
        r.close()

    def test_ready_jobs_and_dead_letters_are_paged(self):
        r = Raw(Env.dq.port)
        q = "console-pages"
        dead = [dead_job(r, q, "x%d" % i, "error %d" % i) for i in range(60)]
        ready = [r.call("PUBLISH", q, "r%03d" % i).decode() for i in range(120)]
        cookie = login()

        def ids(body, table):
            return re.findall(r'id=([0-9A-Z]+)">', re.search(
                r'<table id="%s">(.*?)</table>' % table, body).group(1))

        path = "/console/queue?ns=default&q=" + q
        _, _, body = request(Env.mport, "GET", path, cookie=cookie)
        self.assertEqual(ids(body, "ready"), ready[:50])
        self.assertEqual(ids(body, "dead"), dead[:50])
        self.assertIn("1 to 50 of 120, in the order", body)
        self.assertNotIn('id="ready_page-previous"', body)
        seen = []
        for page in range(3):
            seen += ids(body, "ready")
            link = re.search(r'<a id="ready_page-next" href="([^"]+)"', body)
            if page < 2:
                body = request(Env.mport, "GET", link.group(1).replace("&amp;", "&"),
                               cookie=cookie)[2]
            else:
                self.assertIsNone(link)
        self.assertEqual(seen, ready)
        self.assertIn("101 to 120 of 120", body)
        self.assertIn('id="ready_page-previous"', body)
        _, _, body = request(Env.mport, "GET", path + "&dead_page=1", cookie=cookie)
        self.assertEqual(ids(body, "dead"), dead[50:])
        self.assertIn("51 to 60 of 60, oldest death first", body)
        self.assertNotIn('id="dead_page-next"', body)
        r.call("PURGE", q)
        r.close()

    def test_the_overview_shows_publish_and_consume_rates(self):
        r = Raw(Env.dq.port)
        q = "console-rates"
        r.call("PUBLISH", q, "first")
        cookie = login()

        def row():
            _, _, body = request(Env.mport, "GET", "/console?q=" + q, cookie=cookie)
            m = re.search(r'>%s</a></td>((?:<td[^>]*>[^<]*</td>)+)</tr>' % q, body)
            return re.findall(r"<td[^>]*>([^<]*)</td>", m.group(1)) if m else None, body

        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and (row()[0] or [None] * 6)[5] != "1":
            time.sleep(0.3)
        # One pipeline, so that no read of the poller falls in its middle.
        r.pipeline([("PUBLISH", q, "more %d" % i) for i in range(40)] +
                   [("CONSUME", q, "COUNT", 10)])
        deadline = time.monotonic() + 15
        cells = None
        while time.monotonic() < deadline:
            cells, body = row()
            if cells and cells[5:7] == ["41", "10"]:
                break
            time.sleep(0.3)
        self.assertEqual(cells[5:7], ["41", "10"], body)
        publish_rate, consume_rate = float(cells[8]), float(cells[9])
        self.assertGreater(publish_rate, 0)
        self.assertGreater(consume_rate, 0)
        self.assertAlmostEqual(publish_rate / consume_rate, 4, delta=0.05)  # 40 vs 10 per span
        self.assertRegex(body, r"rates over the \d+\.\d s before that read")
        r.call("PURGE", q)
        r.close()

    def test_a_job_by_id_shows_its_payload_safely(self):
        r = Raw(Env.dq.port)
        q = "console-job"
        failed = dead_job(r, q, "will fail", "card declined")
        text = r.call("PUBLISH", q, "<script>alert(1)</script> héllo", "DELAY", 60).decode()
        binary = r.call("PUBLISH", q, b"\x00\x01\xfe\xff").decode()
        big = r.call("PUBLISH", q, "x" * 10000).decode()
        cookie = login()

        def job(jid):
            status, _, body = request(Env.mport, "GET", "/console/job?ns=default&q=%s&id=%s"
                                      % (q, jid), cookie=cookie)
            return status, body

        status, body = job(text)
        self.assertEqual(status, 200)
        self.assertIn("&lt;script&gt;alert(1)&lt;/script&gt; héllo", body)
        self.assertNotIn("<script>", body)
        self.assertIn('<td class="text" id="job-state">delayed</td>', body)
        self.assertIn("UTC", re.search(r'id="job-due_ms">([^<]*)<', body).group(1))
        status, body = job(binary)
        self.assertIn("hex:</span> 0001 feff", body)
        status, body = job(big)
        self.assertIn("(10000 bytes, the first 4096 shown)", body)
        self.assertEqual(body.count("x" * 4096), 1)
        self.assertNotIn("x" * 4097, body)
        status, body = job(failed)
        self.assertIn('id="job-last_error">card declined<', body)
        self.assertIn('id="job-state">dead<', body)
        status, body = job("no-such-job")
        self.assertEqual(status, 404)
        self.assertIn("No job no-such-job", body)
        r.call("PURGE", q)
        r.close()

    def test_pause_resume_and_purge_with_its_confirmation(self):
        r = Raw(Env.dq.port)
        q = "console-acts"
        r.call("PUBLISH", q, "one")
        r.call("PUBLISH", q, "two")
        cookie = login()
        base = {"ns": "default", "q": q}
        status, location, msg = act(cookie, dict(base, act="pause"))
        self.assertEqual((status, msg), (303, "Paused."))
        self.assertTrue(location.startswith("/console/queue?ns=default&q=console-acts"))
        self.assertIsNone(r.call("CONSUME", q))  # paused
        _, _, body = request(Env.mport, "GET", location, cookie=cookie)
        self.assertIn('<td id="paused">yes</td>', body)
        self.assertIn('<p class="note" id="message">Paused.</p>', body)
        self.assertIn('value="resume">Resume', body)
        self.assertEqual(act(cookie, dict(base, act="resume"))[2], "Resumed.")
        self.assertIsNotNone(r.call("CONSUME", q))
        # Purge wants the queue's name typed again.
        self.assertEqual(act(cookie, dict(base, act="purge", confirm="nope"))[2],
                         "Not purged: type the queue's name to confirm.")
        self.assertEqual(r.call("QSTAT", q)[1], 1)
        self.assertEqual(act(cookie, dict(base, act="purge", confirm=q))[2], "Purged 2 jobs.")
        self.assertEqual(r.call("QSTAT", q)[1], 0)
        # Without the page's token nothing happens.
        status, _, _ = request(Env.mport, "POST", "/console/act", dict(base, act="pause"),
                               cookie=cookie)
        self.assertEqual(status, 403)
        status, _, _ = request(Env.mport, "POST", "/console/act",
                               dict(base, act="pause", csrf="0" * 64), cookie=cookie)
        self.assertEqual(status, 403)
        self.assertEqual(r.call("QSTAT", q)[19], 0)  # not paused
        r.close()

    def test_dead_letters_respawned_and_deleted_one_selected_all_and_matching(self):
        r = Raw(Env.dq.port)
        q = "console-dead"
        smtp = [dead_job(r, q, "m%d" % i, "smtp down: 421") for i in range(4)]
        card = [dead_job(r, q, "c%d" % i, "card declined") for i in range(3)]
        cookie = login()
        base = {"ns": "default", "q": q}
        # One, by its row's button: delivered again.
        self.assertEqual(act(cookie, dict(base, one="respawn " + smtp[0]))[2],
                         "Respawned 1 dead job.")
        job = r.call("CONSUME", q)
        self.assertEqual(job[1].decode(), smtp[0])
        r.call("ACK", q, smtp[0])
        # The selected ones.
        fields = [("csrf", page_token(cookie)), ("ns", "default"), ("q", q),
                  ("act", "delete"), ("id", card[0]), ("id", card[1])]
        self.assertEqual(act(cookie, fields)[2], "Deleted 2 dead jobs.")
        self.assertIsNone(r.call("JOB", q, card[0]))
        # All that match a reason: the smtp ones, not the card one.
        status, _, body = request(Env.mport, "GET", "/console/queue?ns=default&q=%s&reason=smtp"
                                  % q, cookie=cookie)
        self.assertIn("3 matching among the oldest 4 of 4", body)
        self.assertNotIn(card[2], body)
        self.assertEqual(act(cookie, dict(base, act="respawn_matching", reason="smtp"))[2],
                         "Respawned 3 dead jobs.")
        self.assertEqual(r.call("DEADLETTER", "SIZE", q), 1)
        got = sorted(j[1].decode() for j in r.call("CONSUME", q, "COUNT", 10))
        self.assertEqual(got, sorted(smtp[1:]))
        for jid in got:
            r.call("ACK", q, jid)
        # All.
        more = [dead_job(r, q, "z%d" % i, "timeout") for i in range(2)]
        self.assertEqual(act(cookie, dict(base, act="delete_all"))[2], "Deleted 3 dead jobs.")
        self.assertEqual(r.call("DEADLETTER", "SIZE", q), 0)
        self.assertIsNone(r.call("JOB", q, more[0]))
        r.call("PURGE", q)
        r.close()


class OwnDeferq:
    """A deferq of its own, with the console and the admin password, and extra config."""

    def __init__(self, name, extra_server="", extra_auth=""):
        self.tmp = procs.make_tmpdir(name)
        self.mport = procs.free_port()
        os.environ[PASSWORD_ENV] = PASSWORD
        try:
            self.dq = procs.Deferq(DEFERQ, self.tmp, Env.redis.port, config_text=(
                '[server]\nmetrics_listen = "127.0.0.1:%d"\nconsole = true\n%s'
                '[auth]\nadmin_password_env = "%s"\n%s'
                % (self.mport, extra_server, PASSWORD_ENV, extra_auth)),
                wait_pool="required" not in extra_auth)
            self.dq.start()
        finally:
            del os.environ[PASSWORD_ENV]

    def stop(self):
        self.dq.stop()
        procs.remove_tmpdir(self.tmp)


def login_as(port, namespace, secret):
    """(status, cookie or None) of a login, after waiting out any failed-login penalty."""
    deadline = time.monotonic() + 10
    while True:
        status, headers, body = request(port, "POST", "/console/login",
                                        {"namespace": namespace, "password": secret})
        if status != 429 or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    cookie = headers["set-cookie"].split(";")[0] if status == 303 else None
    return status, cookie


class NamespaceLogins(unittest.TestCase):
    """auth.required: a namespace's token opens a login that sees that namespace only."""

    @classmethod
    def setUpClass(cls):
        cls.own = OwnDeferq("console-ns", extra_auth="required = true\ncache_seconds = 1\n")
        a = Raw(cls.own.dq.port)
        a.call("AUTH", "admin", PASSWORD)
        for ns in ("team-a", "team-b"):
            a.call("NAMESPACE", "CREATE", ns)
        cls.token = a.call("TOKEN", "CREATE", "team-a").decode()
        cls.token_b = a.call("TOKEN", "CREATE", "team-b").decode()
        for ns, token in (("team-a", cls.token), ("team-b", cls.token_b)):
            c = Raw(cls.own.dq.port)
            c.call("AUTH", ns, token)
            c.call("PUBLISH", ns + "-orders", "x")
            c.close()
        a.close()

    @classmethod
    def tearDownClass(cls):
        cls.own.stop()

    def test_a_token_sees_its_namespace_only_and_ends_when_revoked(self):
        port = self.own.mport
        # Wrong token, or a token of another namespace: refused (and logged).
        self.assertEqual(login_as(port, "team-a", "0" * 48)[0], 403)
        self.assertEqual(login_as(port, "team-a", self.token_b)[0], 403)
        status, cookie = login_as(port, "team-a", self.token)
        self.assertEqual(status, 303)
        # The overview lists team-a's queues only, and no pools.
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            _, _, body = request(port, "GET", "/console", cookie=cookie)
            if "team-a-orders" in body:
                break
            time.sleep(0.3)
        self.assertIn(">team-a-orders</a>", body)
        self.assertNotIn("team-b-orders", body)
        self.assertNotIn('id="pools"', body)
        self.assertIn("namespace team-a", body)
        # Its queue's page; another namespace's is refused.
        status, _, body = request(port, "GET", "/console/queue?ns=team-a&q=team-a-orders",
                                  cookie=cookie)
        self.assertEqual(status, 200, body)
        for path in ("/console/queue?ns=team-b&q=team-b-orders",
                     "/console/job?ns=team-b&q=team-b-orders&id=x"):
            status, _, body = request(port, "GET", path, cookie=cookie)
            self.assertEqual(status, 403, path)
            self.assertIn("sees namespace 'team-a' only", body)
        status, _, _ = act(cookie, {"ns": "team-b", "q": "team-b-orders", "act": "pause"},
                           port=port)
        self.assertEqual(status, 403)
        self.assertEqual(act(cookie, {"ns": "team-a", "q": "team-a-orders", "act": "pause"},
                             port=port)[2], "Paused.")
        self.assertEqual(act(cookie, {"ns": "team-a", "q": "team-a-orders", "act": "resume"},
                             port=port)[2], "Resumed.")
        # The token revoked: within auth.cache_seconds the login is over.
        a = Raw(self.own.dq.port)
        a.call("AUTH", "admin", PASSWORD)
        self.assertEqual(a.call("TOKEN", "REVOKE", "team-a", self.token), b"OK")
        a.close()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            status, headers, _ = request(port, "GET", "/console/queue?ns=team-a&q=team-a-orders",
                                         cookie=cookie)
            if status == 303:
                break
            time.sleep(0.3)
        self.assertEqual((status, headers.get("location")), (303, "/console/login"))
        self.assertIn("Max-Age=0", headers["set-cookie"])
        self.assertEqual(login_as(port, "team-a", self.token)[0], 403)

    def test_the_admin_sees_every_namespace(self):
        status, cookie = login_as(self.own.mport, "", PASSWORD)
        self.assertEqual(status, 303)
        for ns in ("team-a", "team-b"):
            status, _, body = request(self.own.mport, "GET", "/console/queue?ns=%s&q=%s-orders"
                                      % (ns, ns), cookie=cookie)
            self.assertEqual(status, 200, body)


class ReadOnly(unittest.TestCase):
    def test_pages_without_actions_and_actions_refused(self):
        own = OwnDeferq("console-ro", extra_server="console_read_only = true\n")
        try:
            r = Raw(own.dq.port)
            q = "console-ro"
            jid = dead_job(r, q, "x", "broken")
            _, cookie = login_as(own.mport, "", PASSWORD)
            status, _, body = request(own.mport, "GET", "/console/queue?ns=default&q=" + q,
                                      cookie=cookie)
            self.assertEqual(status, 200)
            self.assertIn(jid, body)
            self.assertIn("read-only", body)
            self.assertNotIn('action="/console/act"', body)
            status, _, body = act(cookie, {"ns": "default", "q": q, "act": "respawn_all"},
                                  port=own.mport)
            self.assertEqual(status, 403)
            self.assertEqual(r.call("DEADLETTER", "SIZE", q), 1)
            r.call("PURGE", q)
            r.close()
        finally:
            own.stop()


class ConsoleOff(unittest.TestCase):
    def test_off_by_default(self):
        tmp = procs.make_tmpdir("console-off")
        mport = procs.free_port()
        d = procs.Deferq(DEFERQ, tmp, Env.redis.port,
                         config_text='[server]\nmetrics_listen = "127.0.0.1:%d"\n' % mport)
        d.start()
        try:
            self.assertEqual(request(mport, "GET", "/console/login")[0], 404)
            self.assertEqual(request(mport, "GET", "/console")[0], 404)
        finally:
            d.stop()
            procs.remove_tmpdir(tmp)


if __name__ == "__main__":
    sys.exit(runner.main_with_deferq(__name__, sys.argv,
                                     "test_console.py /path/to/deferq [unittest args]"))
