#!/usr/bin/python3
"""The metrics endpoint (SPEC §5, §8; issue 11): GET /metrics after known traffic, checked value by
value and with Debian's `promtool check metrics`; the HTTP statuses (404, 405, 400, 431); slow
and malformed clients; /healthz following the pool's redis-server down and up again.

    /usr/bin/python3 tests/metrics/test_metrics.py /path/to/deferq [unittest options]

One redis-server and one deferq (metrics on a free loopback port) per test class.
"""

import os
import socket
import sys
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))

from dqtest import procs, runner  # noqa: E402
from dqtest.promtext import get, http, parse, promtool_check, summed, value  # noqa: E402
from dqtest.resp import Err, Raw  # noqa: E402

DEFERQ = None
DEADLINE_S = 5.0  # HttpListener::kDeadlineMs
MAX_CONNECTIONS = 16  # HttpListener::kMaxConnections


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
        ok, output = promtool_check(text)
        self.assertTrue(ok, output)


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


class FleetTests(unittest.TestCase):
    """Two deferq instances on one pool: the per-queue job counters and backlog gauges summed over
    both (as a Prometheus sum() would) equal what the traffic did, each job counted once."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = procs.make_tmpdir("fleet")
        cls.redis = procs.Redis(cls.tmp).start()
        cls.mports, cls.dqs = [], []
        for name in ("a", "b"):
            mport = procs.free_port()
            cls.mports.append(mport)
            cls.dqs.append(procs.Deferq(
                DEFERQ, cls.tmp, cls.redis.port, name="fleet-" + name,
                config_text='[server]\nmetrics_listen = "127.0.0.1:%d"\n' % mport).start())

    @classmethod
    def tearDownClass(cls):
        for dq in cls.dqs:
            dq.stop()
        cls.redis.stop()
        procs.remove_tmpdir(cls.tmp)

    def scrapes(self):
        texts = []
        for mport in self.mports:
            status, _, body = get(mport, "/metrics")
            self.assertEqual(status, 200)
            texts.append(body.decode())
        return texts

    def test_sums_over_two_instances_equal_the_known_traffic_and_promtool_accepts_both(self):
        a, b = (Raw(dq.port) for dq in self.dqs)
        self.addCleanup(a.close)
        self.addCleanup(b.close)
        q, qe, qd = ("fleet-%d-%s" % (os.getpid(), s) for s in ("jobs", "ttl", "delayed"))
        # qe: four jobs that expire (ttl 1 s) while ready, one that stays.
        for i in range(4):
            (a if i % 2 else b).call("PUBLISH", qe, "e", "TTL", "1")
        b.call("PUBLISH", qe, "stays")
        # qd: ten delayed jobs, made ready by whichever instance pumps them (lateness).
        for i in range(10):
            (a if i % 2 else b).call("PUBLISH", qd, "d", "PDELAY", "300")
        # q: 100 published, 65 consumed, 60 acked, 5 nacked with no tries left (dead), 3 ready
        # ones cancelled, 2 dead respawned.
        for i in range(100):
            self.assertIsInstance((a if i % 2 else b).call("PUBLISH", q, "p%d" % i), bytes)
        leased = a.call("CONSUME", q, "COUNT", "40") + b.call("CONSUME", q, "COUNT", "25")
        self.assertEqual(len(leased), 65)
        ids = [job[1] for job in leased]
        self.assertEqual(a.call("ACK", q, *ids[:30]) + b.call("ACK", q, *ids[30:60]), 60)
        for i, job_id in enumerate(ids[60:]):
            self.assertEqual((a if i % 2 else b).call("NACK", q, job_id), 1)
        ready = [job[1] for job in a.call("PEEK", q, "COUNT", "3")]
        self.assertEqual(b.call("CANCEL", q, *ready), 3)
        self.assertEqual(a.call("DEADLETTER", "RESPAWN", q, "COUNT", "2"), 2)
        got = 0
        deadline = time.time() + 5
        while got < 10 and time.time() < deadline:
            jobs = b.call("CONSUME", qd, "COUNT", "10", "TIMEOUT", "1")
            got += len(jobs or [])
        self.assertEqual(got, 10)
        truth = {
            q: dict(published=100, consumed=65, acked=60, nacked=5, cancelled=3, expired=0,
                    dead=5, respawned=2, ready=34, delayed=0, leased=0, dead_now=3),
            qe: dict(published=5, consumed=0, acked=0, nacked=0, cancelled=0, expired=4, dead=0,
                     respawned=0, ready=1, delayed=0, leased=0, dead_now=0),
            qd: dict(published=10, consumed=10, acked=0, nacked=0, cancelled=0, expired=0, dead=0,
                     respawned=0, ready=0, delayed=0, leased=10, dead_now=0),
        }

        def sums():
            texts = self.scrapes()
            total = summed(parse(t) for t in texts)
            out = {}
            for queue in truth:
                labels = dict(namespace="default", queue=queue)
                fig = {c: value(total, "deferq_jobs_%s_total" % c, **labels)
                       for c in ("published", "consumed", "acked", "nacked", "cancelled",
                                 "expired", "dead", "respawned")}
                for state in ("ready", "delayed", "leased"):
                    fig[state] = value(total, "deferq_queue_jobs", state=state, **labels)
                fig["dead_now"] = value(total, "deferq_queue_jobs", state="dead", **labels)
                out[queue] = fig
            return texts, total, out

        # The ttl-1 jobs expire about 1 s after publish (the pump removes them); the figures are
        # read every 2 s: all of it shows within 5 s.
        t0 = time.time()
        while True:
            texts, total, got_figures = sums()
            if got_figures == truth or time.time() - t0 > 5.0:
                break
            time.sleep(0.2)
        self.assertEqual(got_figures, truth)
        # Exactly one instance (the pump owner) exports the per-queue series.
        self.assertEqual(value(total, "deferq_queue_stats_exporter"), 1)
        self.assertEqual(value(total, "deferq_delivery_lateness_seconds_count",
                               namespace="default", queue=qd), 10)
        for text in texts:
            ok, output = promtool_check(text)
            self.assertTrue(ok, output)


if __name__ == "__main__":
    DEFERQ = runner.binary_arg(sys.argv, "%s /path/to/deferq [unittest options]" % sys.argv[0])
    if DEFERQ is None:
        sys.exit(2)
    sys.exit(runner.main("__main__", sys.argv))
