#!/usr/bin/python3
"""The metrics endpoint (SPEC §5, §8; issue 11): GET /metrics after known traffic, checked value by
value and with Debian's `promtool check metrics`; the HTTP statuses (404, 405, 400, 431); slow
and malformed clients; /healthz following the pool's redis-server down and up again.

    /usr/bin/python3 tests/metrics/test_metrics.py /path/to/deferq [unittest options]

One redis-server and one deferq (metrics on a free loopback port) per test class.
"""

import os
import re
import shutil
import socket
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))

from dqtest import procs, runner  # noqa: E402
from dqtest.resp import Err, Raw  # noqa: E402

DEFERQ = None
DEADLINE_S = 5.0  # HttpListener::kDeadlineMs
MAX_CONNECTIONS = 16  # HttpListener::kMaxConnections
SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def http(port, raw, timeout=5.0):
    """Sends raw request bytes; returns (status, headers dict, body bytes); status None when the
    server closed without answering."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(raw)
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    if not data:
        return None, {}, b""
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    headers = {k.lower(): v.strip() for k, v in (ln.split(":", 1) for ln in lines[1:])}
    return status, headers, body


def get(port, path):
    return http(port, ("GET %s HTTP/1.1\r\nHost: t\r\n\r\n" % path).encode())


def parse(text):
    """{(name, frozenset(labels)): value} of every sample; asserts one HELP and TYPE per family."""
    samples = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        assert m, "not a sample line: %r" % line
        labels = frozenset(LABEL.findall(m.group(3) or ""))
        samples[(m.group(1), labels)] = float(m.group(4))
    return samples


def value(samples, name, **labels):
    return samples.get((name, frozenset(labels.items())))


class MetricsCase(unittest.TestCase):
    """One redis-server and one deferq with the metrics endpoint on a free port."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = procs.make_tmpdir("metrics")
        cls.redis = procs.Redis(cls.tmp).start()
        cls.mport = procs.free_port()
        cls.dq = procs.Deferq(DEFERQ, cls.tmp, cls.redis.port,
                              config_text='[server]\nmetrics_listen = "127.0.0.1:%d"\n' % cls.mport)
        cls.dq.start()

    @classmethod
    def tearDownClass(cls):
        cls.dq.stop()
        cls.redis.stop()
        procs.remove_tmpdir(cls.tmp)

    def scrape(self):
        status, headers, body = get(self.mport, "/metrics")
        self.assertEqual(status, 200)
        self.assertEqual(headers["content-type"], "text/plain; version=0.0.4; charset=utf-8")
        self.assertEqual(int(headers["content-length"]), len(body))
        return body.decode()

    def raw(self):
        r = Raw(self.dq.port)
        self.addCleanup(r.close)
        return r


class TrafficTests(MetricsCase):

    def test_counters_and_gauges_match_known_traffic_and_promtool_accepts_the_text(self):
        q = "mq-%d" % os.getpid()
        before = parse(self.scrape())  # the harness's start-up probes (PING, QSTAT) count too

        def calls(s, command, name="deferq_command_calls_total"):
            return (value(s, name, command=command) or 0) - (value(before, name, command=command) or 0)

        c = self.raw()
        for i in range(7):
            self.assertIsInstance(c.call("PUBLISH", q, "p%d" % i), bytes)
        self.assertEqual(c.call("PUBLISH", q), Err("ERR wrong number of arguments for 'publish' command"))
        for _ in range(3):
            self.assertIsInstance(c.call("CONSUME", q), list)
        self.assertTrue(c.call("NOSUCHCMD").startswith("ERR unknown command"))
        self.assertTrue(c.call("nosuchcmd2", "x").startswith("ERR unknown command"))
        # One consumer blocked on an empty queue, and a third client idle.
        blocked = self.raw()
        blocked.send("CONSUME", q + "-empty", "TIMEOUT", "10")
        self.raw().call("PING")
        deadline = time.time() + 5
        while time.time() < deadline:
            s = parse(self.scrape())
            if value(s, "deferq_blocked_clients") == 1:
                break
            time.sleep(0.05)
        text = self.scrape()
        s = parse(text)
        self.assertEqual(value(s, "deferq_blocked_clients"), 1)
        self.assertEqual(value(s, "deferq_connected_clients"), 3)
        errors = "deferq_command_errors_total"
        self.assertEqual(calls(s, "publish"), 8)
        self.assertEqual(calls(s, "publish", errors), 1)
        self.assertEqual(calls(s, "unknown"), 2)
        self.assertEqual(calls(s, "unknown", errors), 2)
        self.assertEqual(calls(s, "ping"), 1)
        # The blocked CONSUME has no reply yet: only the three finished ones are counted.
        self.assertEqual(calls(s, "consume"), 3)
        self.assertEqual(calls(s, "consume", errors), 0)
        self.assertEqual(calls(s, "publish", "deferq_command_duration_seconds_count"), 8)
        self.assertEqual(value(s, "deferq_command_duration_seconds_bucket", command="publish",
                               le="+Inf"), value(s, "deferq_command_calls_total", command="publish"))
        self.assertEqual(value(s, "deferq_pool_up", pool="default"), 1)
        self.assertGreaterEqual(value(s, "deferq_pool_connections_up", pool="default"), 1)
        self.assertGreaterEqual(value(s, "deferq_upstream_duration_seconds_count", pool="default"),
                                10)
        self.assertEqual(value(s, "deferq_pool_reconnects_total", pool="default"), 0)
        self.assertGreater(value(s, "deferq_process_resident_memory_bytes"), 1 << 20)
        self.assertEqual(value(s, "deferq_metrics_queues_dropped"), 0)
        blocked.close()
        self.check_promtool(text)

    def test_delivery_lateness_has_1ms_and_2ms_buckets_and_counts_each_delayed_job(self):
        q = "late-%d" % os.getpid()
        c = self.raw()
        for _ in range(3):
            c.call("PUBLISH", q, "d", "PDELAY", "30")
        got = 0
        deadline = time.time() + 5
        while got < 3 and time.time() < deadline:
            if c.call("CONSUME", q, "TIMEOUT", "1") is not None:
                got += 1
        self.assertEqual(got, 3)
        s = parse(self.scrape())
        labels = dict(namespace="default", queue=q)
        self.assertEqual(value(s, "deferq_delivery_lateness_seconds_count", **labels), 3)
        self.assertEqual(value(s, "deferq_delivery_lateness_seconds_bucket", le="+Inf", **labels), 3)
        for le in ("0.001", "0.002"):
            self.assertIsNotNone(value(s, "deferq_delivery_lateness_seconds_bucket", le=le, **labels))
        # Cumulative: never decreasing with le.
        buckets = sorted((float(dict(k[1])["le"]), v) for k, v in s.items()
                         if k[0] == "deferq_delivery_lateness_seconds_bucket" and
                         dict(k[1]).get("queue") == q)
        self.assertEqual([v for _, v in buckets], sorted(v for _, v in buckets))

    def check_promtool(self, text):
        promtool = shutil.which("promtool")
        self.assertIsNotNone(promtool, "promtool missing: run scripts/bootstrap (package prometheus)")
        p = subprocess.run([promtool, "check", "metrics"], input=text.encode(),
                           capture_output=True, timeout=30)
        self.assertEqual(p.returncode, 0, p.stdout.decode() + p.stderr.decode())


class HttpTests(MetricsCase):

    def assert_still_serving(self):
        self.assertIn("deferq_connected_clients", self.scrape())

    def test_unknown_path_is_404(self):
        status, _, body = get(self.mport, "/nope")
        self.assertEqual((status, body), (404, b"not found\n"))
        self.assert_still_serving()

    def test_other_methods_are_405_with_allow_get(self):
        status, headers, _ = http(self.mport, b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n")
        self.assertEqual(status, 405)
        self.assertEqual(headers["allow"], "GET")
        status, _, _ = http(self.mport, b"DELETE /healthz HTTP/1.1\r\n\r\n")
        self.assertEqual(status, 405)
        self.assert_still_serving()

    def test_malformed_request_is_400_and_the_endpoint_keeps_serving(self):
        for junk in (b"GARBAGE\r\n\r\n", b"GET /metrics HTTP/1.1\r\nContent-Length: abc\r\n\r\n", b"\x00\x01\x02\r\n\r\n",
                     b"GET /metrics HTTP/1.1\r\nbad header line\r\n\r\n"):
            status, _, body = http(self.mport, junk)
            self.assertEqual(status, 400, junk)
            self.assertTrue(body.startswith(b"bad request"), body)
        self.assert_still_serving()

    def test_a_request_over_the_size_cap_is_431(self):
        big = b"GET /metrics HTTP/1.1\r\nX-Big: " + b"a" * 20000 + b"\r\n\r\n"
        try:
            status, _, _ = http(self.mport, big)
        except ConnectionResetError:
            status = 431  # the server answered and closed while we were still sending
        self.assertEqual(status, 431)
        self.assert_still_serving()

    def test_query_string_is_ignored(self):
        status, _, body = get(self.mport, "/healthz?x=1")
        self.assertEqual((status, body), (200, b"ok\n"))

    def test_connections_over_the_cap_are_closed_and_the_endpoint_recovers_when_they_go(self):
        idle = [socket.create_connection(("127.0.0.1", self.mport), timeout=5)
                for _ in range(MAX_CONNECTIONS)]
        try:
            time.sleep(0.2)  # let the loop accept them all
            try:
                status, _, _ = get(self.mport, "/healthz")
            except ConnectionResetError:  # closed with our request unread
                status = None
            self.assertIsNone(status, "a connection over the cap was served")
        finally:
            for s in idle:
                s.close()
        deadline = time.time() + 2
        status = None
        while status != 200 and time.time() < deadline:
            time.sleep(0.05)
            status = get(self.mport, "/healthz")[0]
        self.assertEqual(status, 200)

    def test_a_slow_client_does_not_hold_the_endpoint_and_is_cut_at_the_deadline(self):
        slow = socket.create_connection(("127.0.0.1", self.mport), timeout=DEADLINE_S + 3)
        self.addCleanup(slow.close)
        slow.sendall(b"GET /metr")
        t0 = time.time()
        self.assert_still_serving()  # served while the slow request is open
        self.assertLess(time.time() - t0, 1.0)
        # The slow client gets nothing and is closed once its deadline passes.
        self.assertEqual(slow.recv(100), b"")
        self.assertLess(time.time() - t0, DEADLINE_S + 2)
        self.assert_still_serving()


class ListenTests(MetricsCase):

    def test_an_explicit_metrics_address_in_use_stops_startup_with_the_reason(self):
        other = procs.Deferq(DEFERQ, self.tmp, self.redis.port, name="taken",
                             config_text='[server]\nmetrics_listen = "127.0.0.1:%d"\n' % self.mport)
        with self.assertRaises(RuntimeError):
            other.start(attempts=1)
        other.stop()
        self.assertIn("metrics: cannot listen on 127.0.0.1:%d" % self.mport, other.log_tail())
        self.assertEqual(get(self.mport, "/healthz")[0], 200)  # the first one still serves

    def test_metrics_listen_off_serves_resp_without_the_endpoint(self):
        off = procs.Deferq(DEFERQ, self.tmp, self.redis.port, name="off",
                           config_text='[server]\nmetrics_listen = "off"\n').start()
        try:
            self.assertEqual(off.client().ping(), True)
            self.assertNotIn("serving metrics", off.log_tail())
        finally:
            off.stop()


class HealthTests(MetricsCase):

    def wait_health(self, want, bound):
        t0 = time.time()
        last = None
        while time.time() - t0 < bound:
            last = get(self.mport, "/healthz")
            if last[0] == want:
                return time.time() - t0, last
            time.sleep(0.05)
        self.fail("/healthz did not answer %d within %.1f s (last %r)" % (want, bound, last))

    def test_healthz_is_503_within_2s_of_the_pool_stopping_and_200_again_when_it_returns(self):
        status, _, body = get(self.mport, "/healthz")
        self.assertEqual((status, body), (200, b"ok\n"))
        self.redis.stop()
        took, (_, _, body) = self.wait_health(503, 2.0)
        self.assertEqual(body, b"pool 'default' has no connection up\n")
        self.assertEqual(value(parse(self.scrape()), "deferq_pool_up", pool="default"), 0)
        self.redis.start()
        self.wait_health(200, 10.0)
        s = parse(self.scrape())
        self.assertEqual(value(s, "deferq_pool_up", pool="default"), 1)
        self.assertGreaterEqual(value(s, "deferq_pool_reconnects_total", pool="default"), 1)


if __name__ == "__main__":
    DEFERQ = runner.binary_arg(sys.argv, "%s /path/to/deferq [unittest options]" % sys.argv[0])
    if DEFERQ is None:
        sys.exit(2)
    sys.exit(runner.main("__main__", sys.argv))
