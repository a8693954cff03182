#!/usr/bin/python3
"""Floods and limits (issue 13): real deferq and redis-server processes on loopback, bounded.

    /usr/bin/python3 tests/floods/test_floods.py /path/to/deferq [-v] [-k NAME]

test_ten_thousand_idle_connections
    10,000 clients connect and say PING once, then stay idle. deferq's resident memory grows by
    at most 16 KiB per connection (the figure is printed), every client is counted, a job command
    is still served, and when they leave the count falls back.
test_slowloris_*
    Clients that send their command a byte at a time: deferq's memory stays bounded while 300 of
    them dribble, others are served meanwhile, and each dribbler's command works once complete.
    With server.timeout set, a client that stops in the middle of a command is closed like an idle
    one; one that keeps dribbling is not (Redis measures idleness from the last byte too).
test_pipeline_of_a_million_commands_without_reading_*
    One client pipelines 1,000,000 ECHOs and never reads: deferq drops it at the output-buffer
    limit (64 MiB by default), its memory stays bounded, and another client is served meanwhile.
test_client_blocked_in_consume_that_keeps_sending_*
    A client blocked in CONSUME keeps sending commands: they wait unparsed up to the query-buffer
    limit, and past it the client is dropped (Redis's client-query-buffer-limit).
test_two_thousand_blocked_consumers_vanish_at_once
    2,000 clients block in CONSUME on one queue and all disconnect at once; jobs published right
    after are ready (never leased to a departed client) and a live consumer gets them.
test_payload_of_exactly_max_payload_and_one_byte_over
    The default max_payload (1 MiB): a payload of exactly that size is stored and delivered byte
    for byte; one byte more is answered -ERR payload too large and nothing reaches Redis.

Prints its measurements, ends with "N passed, M failed". Needs Debian's python3-redis.
"""

import os
import resource
import socket
import struct
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))

from dqtest import procs, resp, runner  # noqa: E402
from dqtest.procs import rss_kib  # noqa: E402

DEFERQ = None  # the binary, from argv[1]
KIB = 1024
MIB = 1024 * 1024


class PeakRss(threading.Thread):
    """Samples a process's VmRSS every 20 ms until stopped; .peak is the highest seen (KiB)."""

    def __init__(self, pid):
        super().__init__(daemon=True)
        self.pid = pid
        self.peak = rss_kib(pid)
        self.halt = threading.Event()

    def run(self):
        while not self.halt.wait(0.02):
            self.peak = max(self.peak, rss_kib(self.pid))

    def stop(self):
        self.halt.set()
        self.join(5)
        self.peak = max(self.peak, rss_kib(self.pid))
        return self.peak


def info_field(raw, name):
    """An integer field of INFO, read through a resp.Raw client."""
    text = raw.call("INFO").decode()
    for line in text.split("\r\n"):
        if line.startswith(name + ":"):
            return int(line.split(":", 1)[1])
    raise AssertionError("INFO has no %s" % name)


def wait_for(predicate, bound_s, what):
    deadline = time.monotonic() + bound_s
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last is True:
            return
        time.sleep(0.05)
    raise AssertionError("%s: not within %.1f s (last: %r)" % (what, bound_s, last))


def raise_nofile(need):
    """Raises RLIMIT_NOFILE to at least `need` (processes started later inherit it). Returns the
    soft limit in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < need:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (need, need))  # root may raise the hard one
        except (ValueError, OSError):
            pass
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < need:
        target = need if hard == resource.RLIM_INFINITY else min(need, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def connect_many(port, n, batch=500):
    """n connections that each said PING and got PONG (so deferq has accepted and served them)."""
    socks = []
    ping = b"PING\r\n"
    while len(socks) < n:
        group = []
        for _ in range(min(batch, n - len(socks))):
            s = socket.create_connection(("127.0.0.1", port), timeout=30)
            group.append(s)
        for s in group:
            s.sendall(ping)
        for s in group:
            got = b""
            while len(got) < 7:
                chunk = s.recv(64)
                if not chunk:
                    raise ConnectionError("closed after %d connections" % len(socks))
                got += chunk
            if got != b"+PONG\r\n":
                raise AssertionError("connection %d got %r" % (len(socks), got))
        socks.extend(group)
    return socks


def close_all(socks, reset=False):
    for s in socks:
        try:
            if reset:  # SO_LINGER 0: the close sends a reset, as a crashed client's kernel does
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.close()
        except OSError:
            pass


class FloodCase(unittest.TestCase):
    """Each test gets its own redis-server and deferq (config from CONFIG)."""

    CONFIG = None
    NOFILE = 4096

    def setUp(self):
        raise_nofile(self.NOFILE)
        self.tmp = procs.make_tmpdir("floods")
        self.redis = procs.Redis(self.tmp).start()
        self.dq = procs.Deferq(DEFERQ, self.tmp, self.redis.port, config_text=self.CONFIG).start()
        self.raw = resp.Raw(self.dq.port)
        self.rc = self.redis.client()

    def tearDown(self):
        self.raw.close()
        self.dq.stop()
        self.redis.stop()
        procs.remove_tmpdir(self.tmp)

    def qstat(self, q):
        reply = self.raw.call("QSTAT", q)
        return {reply[i].decode(): reply[i + 1] for i in range(0, len(reply), 2)}

    def ping_ms(self):
        t = time.monotonic()
        self.assertEqual(self.raw.call("PING"), b"PONG")
        return (time.monotonic() - t) * 1000


class IdleConnectionsTest(FloodCase):
    N = 10_000
    CONFIG = "[server]\nmax_clients = 10100\n"
    NOFILE = 10_000 + 500

    def test_ten_thousand_idle_connections(self):
        limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        self.assertGreaterEqual(limit, self.NOFILE,
                                "RLIMIT_NOFILE is %d and could not be raised: 10,000 connections "
                                "need %d descriptors in this process and in deferq" % (
                                    limit, self.NOFILE))
        warm = connect_many(self.dq.port, 200)  # buffers, slots and rings touched once
        close_all(warm)
        wait_for(lambda: info_field(self.raw, "connected_clients") == 1 or
                 info_field(self.raw, "connected_clients"), 10, "warm-up clients gone")
        before = rss_kib(self.dq.proc.pid)
        t0 = time.monotonic()
        socks = connect_many(self.dq.port, self.N)
        took = time.monotonic() - t0
        try:
            self.assertEqual(info_field(self.raw, "connected_clients"), self.N + 1)
            time.sleep(0.5)
            after = rss_kib(self.dq.proc.pid)
            per_conn = (after - before) * KIB / self.N
            print("\n  %d idle connections: deferq VmRSS %d -> %d KiB, %.0f bytes per connection "
                  "(connected in %.1f s)" % (self.N, before, after, per_conn, took))
            self.assertLessEqual(per_conn, 16 * KIB, "goal: at most 16 KiB per idle connection")
            # Still serving: a job round trip among them.
            jid = self.raw.call("PUBLISH", "idle-q", "x")
            self.assertIsInstance(jid, bytes)
            job = self.raw.call("CONSUME", "idle-q")
            self.assertEqual(job[1], jid)
            # A few of the idle ones still answer.
            for s in socks[:: self.N // 10]:
                s.sendall(b"PING\r\n")
                self.assertEqual(s.recv(16), b"+PONG\r\n")
        finally:
            close_all(socks)
        wait_for(lambda: info_field(self.raw, "connected_clients") == 1 or
                 info_field(self.raw, "connected_clients"), 30, "clients gone after close")


class SlowlorisTest(FloodCase):
    CONFIG = "[server]\ntimeout = 2\n"

    def test_slowloris_dribblers_cost_bounded_memory_and_others_are_served(self):
        n = 300
        socks = connect_many(self.dq.port, n)
        before = rss_kib(self.dq.proc.pid)
        cmds = [resp.encode(("PUBLISH", "slow-q", "payload-%d" % i)) for i in range(n)]
        longest = max(len(c) for c in cmds)
        worst_ping = 0.0
        for pos in range(longest):
            for s, c in zip(socks, cmds):
                if pos < len(c):
                    s.sendall(c[pos:pos + 1])
            worst_ping = max(worst_ping, self.ping_ms())
            time.sleep(0.01)
        after = rss_kib(self.dq.proc.pid)
        ids = []
        for s in socks:
            got = b""
            while len(got) < 33 and not got.startswith(b"-"):  # "$26\r\n" + id + "\r\n"
                chunk = s.recv(64)
                if not chunk:
                    break
                got += chunk
            ids.append(got[5:31] if got.startswith(b"$26\r\n") else got)
        close_all(socks)
        print("\n  %d dribbling clients: VmRSS %d -> %d KiB, slowest PING of the others %.1f ms"
              % (n, before, after, worst_ping))
        self.assertTrue(all(isinstance(i, bytes) and len(i) == 26 for i in ids), ids[:3])
        self.assertEqual(len(set(ids)), n)
        self.assertEqual(self.qstat("slow-q")["ready"], n)
        self.assertLess(after - before, 8 * 1024, "memory while %d clients dribble" % n)
        self.assertLess(worst_ping, 1000, "others are served while clients dribble")

    def test_slowloris_stalled_mid_command_is_closed_by_the_idle_timeout_a_dribbler_is_not(self):
        stalled = socket.create_connection(("127.0.0.1", self.dq.port), timeout=10)
        dribbler = socket.create_connection(("127.0.0.1", self.dq.port), timeout=10)
        cmd = resp.encode(("PUBLISH", "idle-q", "x" * 40))
        stalled.sendall(cmd[:10])
        t0 = time.monotonic()
        pos = 0
        # 4 s: twice the idle timeout. The dribbler sends a byte every 0.4 s.
        while time.monotonic() - t0 < 4.0:
            dribbler.sendall(cmd[pos:pos + 1])
            pos += 1
            time.sleep(0.4)
        stalled.settimeout(5)
        self.assertEqual(stalled.recv(100), b"", "the stalled client is closed")
        dribbler.sendall(cmd[pos:])
        reply = dribbler.recv(100)
        self.assertTrue(reply.startswith(b"$26\r\n"), reply)
        close_all([stalled, dribbler])
        self.raw.close()  # idle for 4 s itself: closed by the timeout too
        self.raw = resp.Raw(self.dq.port)
        self.assertEqual(self.qstat("idle-q")["ready"], 1, "only the complete PUBLISH stored")


class PipelineFloodTest(FloodCase):
    N = 1_000_000

    def test_pipeline_of_a_million_commands_without_reading_is_dropped_at_the_output_limit(self):
        before = rss_kib(self.dq.proc.pid)
        peak = PeakRss(self.dq.proc.pid)
        peak.start()
        hog = socket.create_connection(("127.0.0.1", self.dq.port), timeout=30)
        hog.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * KIB)
        cmd = resp.encode(("ECHO", "e" * 100))  # a 107-byte reply: 1M of them owe 102 MiB
        batch = cmd * 10_000
        sent = 0
        error = None
        worst_ping = 0.0
        t0 = time.monotonic()
        try:
            while sent < self.N and time.monotonic() - t0 < 120:
                hog.sendall(batch)
                sent += 10_000
                if sent % 100_000 == 0:
                    worst_ping = max(worst_ping, self.ping_ms())
        except OSError as e:
            error = e
        high = peak.stop()
        print("\n  pipelined %d commands unread: %s after %.1f s; VmRSS %d KiB, peak %d KiB; "
              "slowest PING of another client %.1f ms"
              % (sent, type(error).__name__ if error else "not dropped",
                 time.monotonic() - t0, before, high, worst_ping))
        self.assertIsNotNone(error, "never disconnected after %d commands" % sent)
        self.assertLess(sent, self.N)
        # Twice the 64 MiB limit: the output buffer is one string, which doubles its capacity
        # while the reply that crosses the limit is appended (docs/operations.md).
        self.assertLess(high - before, 160 * 1024, "peak VmRSS %d KiB over %d" % (high, before))
        self.assertEqual(self.raw.call("PING"), b"PONG")
        self.assertGreaterEqual(info_field(self.raw, "client_output_limit_disconnections"), 1)
        wait_for(lambda: info_field(self.raw, "connected_clients") == 1 or
                 info_field(self.raw, "connected_clients"), 10, "the hog is gone")
        hog.close()


class QueryBufferTest(FloodCase):
    def test_client_blocked_in_consume_that_keeps_sending_is_dropped_at_the_query_limit(self):
        before = rss_kib(self.dq.proc.pid)
        peak = PeakRss(self.dq.proc.pid)
        peak.start()
        c = socket.create_connection(("127.0.0.1", self.dq.port), timeout=10)
        c.sendall(resp.encode(("CONSUME", "never-q", "TIMEOUT", 60)))
        wait_for(lambda: info_field(self.raw, "blocked_clients") == 1 or
                 info_field(self.raw, "blocked_clients"), 5, "client blocked")
        chunk = resp.encode(("PING",)) * 100_000  # 1.4 MB
        sent = 0
        error = None
        t0 = time.monotonic()
        try:
            while sent < 2 * 1024 * MIB and time.monotonic() - t0 < 60:
                c.sendall(chunk)
                sent += len(chunk)
        except OSError as e:
            error = e
        high = peak.stop()
        print("\n  blocked client sent %d MiB: %s; VmRSS %d KiB, peak %d KiB"
              % (sent // MIB, type(error).__name__ if error else "not dropped", before, high))
        self.assertIsNotNone(error, "never disconnected after %d MiB" % (sent // MIB))
        self.assertLess(sent, 80 * MIB, "dropped soon after the 64 MiB limit")
        # The limit (64 MiB of waiting input) x 1.5: the buffer is one string that doubles its
        # capacity, and the allocator gives the old block back a moment later.
        self.assertLess(high - before, 112 * 1024, "peak VmRSS %d KiB over %d" % (high, before))
        self.assertEqual(info_field(self.raw, "client_query_buffer_limit_disconnections"), 1)
        self.assertEqual(info_field(self.raw, "blocked_clients"), 0)
        self.assertEqual(self.raw.call("PING"), b"PONG")
        c.close()


class VanishingConsumersTest(FloodCase):
    N = 2000

    def test_two_thousand_blocked_consumers_vanish_at_once(self):
        q = "vanish-q"
        socks = connect_many(self.dq.port, self.N)
        block = resp.encode(("CONSUME", q, "TIMEOUT", 60))
        for s in socks:
            s.sendall(block)
        wait_for(lambda: info_field(self.raw, "blocked_clients") == self.N or
                 info_field(self.raw, "blocked_clients"), 20, "all blocked")
        close_all(socks, reset=True)
        # Published at once, while deferq is still noticing the departures.
        ids = [self.raw.call("PUBLISH", q, "job-%d" % i) for i in range(50)]
        wait_for(lambda: info_field(self.raw, "blocked_clients") == 0 or
                 info_field(self.raw, "blocked_clients"), 20, "departed consumers forgotten")
        wait_for(lambda: info_field(self.raw, "connected_clients") == 1 or
                 info_field(self.raw, "connected_clients"), 20, "departed clients gone")
        # Leases given back to departed consumers go straight back to ready. A wake-up consume
        # for a departing client may still be in flight on another upstream connection than
        # QSTAT's (see below): one QSTAT can read 50 ready and the next (49, 1, 0) until its
        # reply gives the lease back. A lease not given back would stay out for its TTR (120 s).
        def settled():
            st = self.qstat(q)
            return (st["ready"], st["leased"], st["dead"]) == (50, 0, 0) or st
        wait_for(settled, 5, "all ready, none leased")
        # Redis agrees, key by key: nothing sits in the lease index.
        leased = [k for k in self.rc.keys("dq:{default/%s}:*" % q) if b"lease" in k]
        for k in leased:
            self.assertEqual(self.rc.zcard(k) if self.rc.type(k) == b"zset" else 0, 0, k)
        # A wake-up consume for a departing client may still be in flight on another upstream
        # connection than QSTAT's: its lease is given back (to the head) when its reply comes, so
        # a job can be out for that moment. Every job comes, each once.
        got, deadline = [], time.monotonic() + 5
        while len(got) < 50 and time.monotonic() < deadline:
            got += [j[1] for j in self.raw.call("CONSUME", q, "COUNT", 100) or []]
        self.assertEqual(sorted(got), sorted(ids))
        self.assertEqual(self.raw.call("ACK", q, *ids), 50)


class PayloadLimitTest(FloodCase):
    def redis_mentions(self, tag):
        """Keys of the queue, and pool-wide keys (registry, due index) that name it."""
        found = []
        for k in self.rc.keys("*"):
            kind = self.rc.type(k)
            if tag.encode() in k:
                found.append(k)
            elif kind == b"set" and self.rc.sismember(k, tag):
                found.append((k, "member"))
            elif kind == b"zset" and self.rc.zscore(k, tag) is not None:
                found.append((k, "member"))
            elif kind == b"hash" and self.rc.hexists(k, tag):
                found.append((k, "field"))
        return found

    def test_payload_of_exactly_max_payload_and_one_byte_over(self):
        q = "big-q"
        payload = bytes(i % 251 for i in range(MIB))
        used_before = self.rc.info("memory")["used_memory"]
        over = payload + b"!"
        for extra in ((), ("DELAY", 5), ("ID", "big-1")):
            self.assertEqual(self.raw.call("PUBLISH", q, over, *extra),
                             resp.Err("ERR payload too large"), extra)
        # Pipelined: every oversized one refused in order, the connection keeps working.
        self.raw.send_bytes(resp.encode(("PUBLISH", q, over)) * 5 + resp.encode(("PING",)))
        for _ in range(5):
            self.assertEqual(self.raw.read(), resp.Err("ERR payload too large"))
        self.assertEqual(self.raw.read(), b"PONG")
        self.assertEqual(self.redis_mentions("default/" + q), [], "nothing reached Redis")
        self.assertLess(self.rc.info("memory")["used_memory"] - used_before, MIB // 2)
        self.assertIsNone(self.raw.call("JOB", q, "big-1"))
        st = self.qstat(q)
        self.assertEqual((st["ready"], st["delayed"], st["published_total"]), (0, 0, 0))

        jid = self.raw.call("PUBLISH", q, payload)
        self.assertEqual(len(jid), 26)
        job = self.raw.call("CONSUME", q)
        self.assertEqual(job[1], jid)
        self.assertEqual(job[2], payload, "stored and delivered byte for byte")
        self.assertEqual(self.raw.call("ACK", q, jid), 1)


def main():
    return runner.main_with_deferq(__name__, sys.argv, "test_floods.py /path/to/deferq [-v] [-k NAME]")


if __name__ == "__main__":
    sys.exit(main())
