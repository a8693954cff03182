#!/usr/bin/python3
"""The log (docs/metrics.md; issue 11): one line per significant event on stderr. The startup summary of
the effective configuration without secrets, the pool going down and up, slow commands over
server.slowlog_ms, clients dropped or refused for limits; the admin password and URL passwords
never appear.

    /usr/bin/python3 tests/metrics/test_logs.py /path/to/deferq [unittest options]
"""

import os
import re
import socket
import sys
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))

from dqtest import procs, runner  # noqa: E402
from dqtest.resp import Err, Raw, encode  # noqa: E402

DEFERQ = None
URL_PASSWORD = "urlSecret-4711"
ADMIN_PASSWORD = "adminSecret-0815"
LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z [DIWEF] ")


class LogTests(unittest.TestCase):
    """A redis-server with an ACL user whose password is in the pool URL, and one deferq with an
    admin password in its environment, a 100 ms slow-command threshold and small client limits."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = procs.make_tmpdir("logs")
        cls.redis = procs.Redis(cls.tmp, extra=[
            "--user", "dq", "on", ">" + URL_PASSWORD, "~*", "&*", "+@all"]).start()
        config = ('[server]\nmetrics_listen = "off"\nslowlog_ms = 100\nmax_clients = 3\n'
                  'max_output_buffer = 1048576\n'
                  '[pools.default]\naddr = "redis://dq:%s@127.0.0.1:%d"\n'
                  % (URL_PASSWORD, cls.redis.port))
        os.environ["DEFERQ_LOGS_ADMIN"] = ADMIN_PASSWORD
        cls.dq = procs.Deferq(DEFERQ, cls.tmp, cls.redis.port, name="logs",
                              config_text=config + '[auth]\nadmin_password_env = "DEFERQ_LOGS_ADMIN"\n')
        # The config file names the pool; the harness's --pool flag would override it.
        cls.dq.argv = lambda port: [DEFERQ, "--port", str(port), "--threads", "2",
                                    "--config", cls.dq.config]
        try:
            cls.dq.start()
        finally:
            del os.environ["DEFERQ_LOGS_ADMIN"]

    @classmethod
    def tearDownClass(cls):
        cls.dq.stop()
        cls.redis.stop()
        procs.remove_tmpdir(cls.tmp)

    def log(self):
        with open(self.dq.log, errors="replace") as f:
            return f.read()

    def wait_line(self, pattern, bound=5.0):
        deadline = time.time() + bound
        while time.time() < deadline:
            m = re.search(pattern, self.log(), re.M)
            if m:
                return m.group(0)
            time.sleep(0.05)
        self.fail("no log line matching %r within %.1f s; log:\n%s" % (pattern, bound, self.log()))

    def raw(self):
        r = Raw(self.dq.port)
        self.addCleanup(r.close)
        return r

    def connected_slot(self):
        """A connection that got one of the max_clients slots (answers PING)."""
        deadline = time.time() + 5
        while True:
            r = Raw(self.dq.port)
            reply = r.call("PING")
            if reply == b"PONG":
                self.addCleanup(r.close)
                return r
            r.close()
            self.assertLess(time.time(), deadline, "no client slot freed: %r" % (reply,))
            time.sleep(0.05)

    def test_a_startup_summary_shows_the_effective_configuration_without_secrets(self):
        log = self.log()
        self.wait_line(r"I config: server listen=127\.0\.0\.1:%d threads=2 metrics_listen=off "
                       r"max_clients=3 .* slowlog_ms=100 " % self.dq.port)
        self.wait_line(r"I config: auth required=false admin_password_env=DEFERQ_LOGS_ADMIN \(set\)"
                       r" .*defaults ttl=86400 tries=1 ttr=120")
        self.wait_line(r"I config: pool 'default' addr=redis://dq:\*\*\*@127\.0\.0\.1:%d "
                       r"connections_per_thread=2" % self.redis.port)
        # Every line is one timestamped, levelled line.
        for line in log.splitlines():
            self.assertRegex(line, LINE)

    def test_passwords_never_reach_the_log_even_after_admin_auth_attempts(self):
        r = self.raw()
        self.assertEqual(r.call("AUTH", "admin", "wrong-" + ADMIN_PASSWORD), Err(
            "WRONGPASS invalid username-password pair or user is disabled."))
        self.assertEqual(r.call("AUTH", "admin", ADMIN_PASSWORD), b"OK")
        log = self.log()
        self.assertIn("config: pool 'default'", log)
        self.assertNotIn(ADMIN_PASSWORD, log)
        self.assertNotIn(URL_PASSWORD, log)

    def test_a_slow_command_is_logged_and_a_blocking_consume_is_not(self):
        r = self.raw()
        q = "slow-%d" % os.getpid()
        # Redis holds every client for 300 ms: the PUBLISH waits for it.
        self.assertTrue(self.redis.client(username="dq", password=URL_PASSWORD)
                        .execute_command("CLIENT", "PAUSE", "300", "ALL"))
        self.assertIsInstance(r.call("PUBLISH", q, "x"), bytes)
        line = self.wait_line(r"W slow command: publish took (\d+) ms \(client id=\d+ "
                              r"addr=127\.0\.0\.1:\d+\)$")
        self.assertGreaterEqual(int(re.search(r"took (\d+) ms", line).group(1)), 100)
        self.assertIsNone(r.call("CONSUME", q + "-empty", "TIMEOUT", "0.5"))
        time.sleep(0.2)
        self.assertNotIn("slow command: consume", self.log())

    def test_clients_refused_or_dropped_for_limits_get_one_line(self):
        # max_clients = 3: the fourth connection is refused with Redis's error and a log line.
        # Connections of the tests before may still be closing on the server's side: a slot is
        # taken once it answers PONG (retried for at most 5 s).
        held = [self.connected_slot() for _ in range(3)]
        with socket.create_connection(("127.0.0.1", self.dq.port), timeout=5) as s:
            self.assertEqual(s.recv(100), b"-ERR max number of clients reached\r\n")
        self.wait_line(r"W client refused: server\.max_clients \(3\) are connected$")
        for h in held:
            h.close()
        time.sleep(0.2)
        # A client that never reads its replies is dropped past max_output_buffer (1 MiB).
        q = "big-%d" % os.getpid()
        r = self.raw()
        self.assertIsInstance(r.call("PUBLISH", q, "x" * 100000), bytes)
        with socket.create_connection(("127.0.0.1", self.dq.port), timeout=5) as s:
            s.sendall(encode(["PEEK", q]) * 300)  # 30 MB of replies, never read
            self.wait_line(r"W client id=\d+ addr=127\.0\.0\.1:\d+ dropped: output buffer over "
                           r"1048576 bytes$")

    def test_the_pool_going_down_and_up_is_logged_once_each(self):
        self.redis.stop()
        self.wait_line(r"W pool 'default' is down: no connection up \(127\.0\.0\.1:%d: .*\)$"
                       % self.redis.port)
        before = self.log().count("pool 'default' is up")
        self.redis.start()
        deadline = time.time() + 10
        while self.log().count("pool 'default' is up") == before and time.time() < deadline:
            time.sleep(0.1)
        time.sleep(0.5)  # the other connections come up too: still one line
        self.assertEqual(self.log().count("pool 'default' is up"), before + 1, self.log())
        self.assertEqual(self.log().count("pool 'default' is down"), 1)


if __name__ == "__main__":
    sys.exit(runner.main_with_deferq("__main__", sys.argv,
                                     "%s /path/to/deferq [unittest options]" % sys.argv[0]))
