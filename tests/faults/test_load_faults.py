#!/usr/bin/python3
"""Faults under load (issue 13, docs/operations.md): real deferq and redis-server processes, loopback.

    /usr/bin/python3 tests/faults/test_load_faults.py /path/to/deferq [-v] [-k NAME]

test_faults.py (next to this file) pins each upstream defect with a small exact scenario; these
tests put the same faults under many clients and count every job.

test_redis_sigkill_and_aof_restart_under_twenty_publishers
    20 client threads publish while the pool's redis-server (AOF, appendfsync always) is
    SIGKILLed and restarted on its port. No request waits longer than the upstream timeout (plus
    the loop's tick and scheduling slack); failures are -TRYAGAIN or -TIMEOUT, nothing else;
    deferq reconnects by itself; every publish answered with an id is in Redis afterwards,
    checked id by id (JOB returns its payload).
test_redis_frozen_five_seconds_under_load
    redis-server is frozen with SIGSTOP for 5 s while 10 clients publish. Requests are answered
    within the timeout (-TIMEOUT / -TRYAGAIN), deferq's memory stays within 16 MiB of its level
    before, and after SIGCONT every client succeeds again; every id answered is there.
test_deferq_started_while_its_pool_is_down_serves_when_it_comes_up
    deferq starts with nothing on its pool's port and clients already calling: each gets a quick
    -TRYAGAIN; the pool comes up and they are served without a restart.
test_deferq_sigkill_under_mixed_load_balances_in_redis
    deferq is SIGKILLed and restarted during publish (now and delayed), consume, ack, nack, cancel
    and lease expiry by many clients. Afterwards, in Redis: published = acked + cancelled +
    expired + ready + delayed + leased + dead; the gauges match the records; every id answered by
    PUBLISH and not acked or cancelled is still there.

Prints its measurements, ends with "N passed, M failed". Needs Debian's python3-redis.
"""

import os
import random
import signal
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))

from dqtest import procs, resp, runner  # noqa: E402
from dqtest.procs import rss_kib  # noqa: E402

DEFERQ = None
TIMEOUT_MS = 1000  # the pool's upstream timeout in these tests (the default)
# How long past the upstream timeout an answer may come: the loop checks timeouts every 100 ms,
# and these 2-core machines oversleep by tens of ms under load.
SLACK_MS = 1500
UPSTREAM_ERRORS = ("TRYAGAIN pool 'default'", "TIMEOUT pool 'default'")


def config(redis_port):
    return ('[pools.default]\naddr = "redis://127.0.0.1:%d"\nconnections_per_thread = 2\n'
            "timeout_ms = %d\n" % (redis_port, TIMEOUT_MS))


def qstats(rc, queue):
    """The queue's counters and gauges as Redis holds them (the stats hash), and the number of
    job records (ready, leased and dead jobs) counted independently. Delayed publishes are one
    field, pd, counted in both the delayed gauge and published_total (docs/storage.md), and
    staged delayed jobs have their record in P.."j" too (their member in P.."w")."""
    prefix = "dq:{default/%s}:" % queue
    raw = rc.hgetall(prefix + "s")
    s = {k.decode(): int(v) for k, v in raw.items() if v.lstrip(b"-").isdigit()}
    pd = s.pop("pd", 0)
    s["delayed"] = s.get("delayed", 0) + pd
    s["published_total"] = s.get("published_total", 0) + pd
    s["leased"] = rc.zcard(prefix + "l")
    s["records"] = rc.hlen(prefix + "j") - rc.zcard(prefix + "w")
    return s


class Client:
    """One client thread's connection to deferq that reconnects (bounded) when deferq goes away.
    call() returns the reply, or None when the connection broke (the outcome is unknown)."""

    def __init__(self, port):
        self.port = port
        self.raw = None
        self.slowest_ms = 0.0

    def call(self, *args):
        if self.raw is None:
            try:
                self.raw = resp.Raw(self.port, timeout=10)
            except OSError:
                time.sleep(0.05)
                return None
        t = time.monotonic()
        try:
            r = self.raw.call(*args)
        except (OSError, ConnectionError):
            self.raw.close()
            self.raw = None
            return None
        self.slowest_ms = max(self.slowest_ms, (time.monotonic() - t) * 1000)
        return r

    def close(self):
        if self.raw is not None:
            self.raw.close()


class Publishers:
    """n threads publishing unique payloads to `queue` until stop(); records id -> payload for
    every PUBLISH answered with an id, and every error text."""

    def __init__(self, port, n, queue):
        self.port = port
        self.queue = queue
        self.halt = threading.Event()
        self.lock = threading.Lock()
        self.ids = {}
        self.errors = []
        self.lost = 0  # connection broke mid-request
        self.slowest_ms = 0.0
        self.ok_after = {}  # thread -> successes after mark()
        self.mark_t = None
        self.threads = [threading.Thread(target=self.run, args=(i,), daemon=True)
                        for i in range(n)]

    def start(self):
        for t in self.threads:
            t.start()
        return self

    def mark(self):
        self.mark_t = time.monotonic()

    def run(self, i):
        c = Client(self.port)
        k = 0
        while not self.halt.is_set() and k < 100_000:
            payload = "p-%d-%d" % (i, k)
            k += 1
            r = c.call("PUBLISH", self.queue, payload)
            with self.lock:
                if isinstance(r, bytes):
                    self.ids[r] = payload.encode()
                    if self.mark_t is not None and time.monotonic() > self.mark_t:
                        self.ok_after[i] = self.ok_after.get(i, 0) + 1
                elif r is None:
                    self.lost += 1
                else:
                    self.errors.append(str(r))
            if not isinstance(r, bytes):
                time.sleep(0.01)
        with self.lock:
            self.slowest_ms = max(self.slowest_ms, c.slowest_ms)
        c.close()

    def stop(self):
        self.halt.set()
        for t in self.threads:
            t.join(30)


class LoadFaultCase(unittest.TestCase):
    def setUp(self):
        self.tmp = procs.make_tmpdir("loadfaults")
        self.servers = []

    def tearDown(self):
        for s in self.servers:
            if s.proc is not None and s.proc.poll() is None:
                s.proc.send_signal(signal.SIGCONT)
            s.stop()
        procs.remove_tmpdir(self.tmp)

    def redis(self, *extra, appendonly=False, port=None):
        r = procs.Redis(self.tmp, extra=extra, appendonly=appendonly, port=port)
        self.servers.append(r)
        return r

    def deferq(self, redis_port, wait_pool=True, threads=2):
        d = procs.Deferq(DEFERQ, self.tmp, redis_port, config_text=config(redis_port),
                         threads=threads, wait_pool=wait_pool)
        self.servers.append(d)
        return d.start()

    def assert_upstream_errors_only(self, errors):
        odd = [e for e in errors if not e.startswith(UPSTREAM_ERRORS)]
        self.assertEqual(odd[:5], [], "errors other than TRYAGAIN/TIMEOUT")

    def assert_every_id_there(self, port, queue, ids):
        """JOB of every id answered: it exists and carries its payload."""
        raw = resp.Raw(port, timeout=30)
        try:
            items = list(ids.items())
            missing = []
            for start in range(0, len(items), 500):
                chunk = items[start:start + 500]
                raw.send_bytes(b"".join(resp.encode(("JOB", queue, jid)) for jid, _ in chunk))
                for jid, payload in chunk:
                    r = raw.read()
                    if not isinstance(r, list):
                        missing.append((jid, r))
                        continue
                    job = dict(zip(r[0::2], r[1::2]))
                    if job.get(b"payload") != payload:
                        missing.append((jid, job.get(b"payload")))
            self.assertEqual(missing[:5], [], "%d of %d answered ids missing or wrong"
                             % (len(missing), len(ids)))
        finally:
            raw.close()


class RedisKillTest(LoadFaultCase):
    def test_redis_sigkill_and_aof_restart_under_twenty_publishers(self):
        rd = self.redis("--appendfsync", "always", appendonly=True).start()
        dq = self.deferq(rd.port)
        pubs = Publishers(dq.port, 20, "kill-q").start()
        time.sleep(2.0)
        before_kill = len(pubs.ids)
        rd.kill9()
        time.sleep(1.0)
        rd.start()  # same port and directory: the AOF is loaded
        pubs.mark()
        time.sleep(3.0)
        pubs.stop()
        print("\n  %d publishes answered with an id (%d before the kill), %d errors, %d broken; "
              "slowest answer %.0f ms" % (len(pubs.ids), before_kill, len(pubs.errors),
                                          pubs.lost, pubs.slowest_ms))
        self.assertGreater(before_kill, 0)
        self.assertGreater(len(pubs.errors), 0, "the kill was noticed")
        self.assert_upstream_errors_only(pubs.errors)
        self.assertEqual(pubs.lost, 0, "deferq itself kept every connection")
        self.assertLess(pubs.slowest_ms, TIMEOUT_MS + SLACK_MS, "no hang past the timeout")
        self.assertGreater(sum(pubs.ok_after.values()), 0, "served again after the restart")
        self.assert_every_id_there(dq.port, "kill-q", pubs.ids)


class RedisFreezeTest(LoadFaultCase):
    def test_redis_frozen_five_seconds_under_load(self):
        rd = self.redis().start()
        dq = self.deferq(rd.port)
        pubs = Publishers(dq.port, 10, "freeze-q").start()
        time.sleep(1.0)
        base = rss_kib(dq.proc.pid)
        peak = base
        rd.proc.send_signal(signal.SIGSTOP)
        frozen_at = len(pubs.ids)
        try:
            t0 = time.monotonic()
            while time.monotonic() - t0 < 5.0:
                peak = max(peak, rss_kib(dq.proc.pid))
                time.sleep(0.05)
            answered_frozen = len(pubs.ids) - frozen_at
        finally:
            rd.proc.send_signal(signal.SIGCONT)
        pubs.mark()
        time.sleep(3.0)
        pubs.stop()
        print("\n  frozen 5 s: VmRSS %d KiB before, peak %d KiB; %d errors, slowest answer %.0f ms;"
              " %d ids answered, %d while frozen" % (base, peak, len(pubs.errors),
                                                    pubs.slowest_ms, len(pubs.ids),
                                                    answered_frozen))
        self.assertGreater(len(pubs.errors), 0)
        self.assert_upstream_errors_only(pubs.errors)
        self.assertEqual(pubs.lost, 0)
        self.assertLess(pubs.slowest_ms, TIMEOUT_MS + SLACK_MS)
        self.assertLess(peak - base, 16 * 1024, "deferq's memory while Redis is frozen")
        self.assertEqual(len(pubs.ok_after), 10, "every client served again after SIGCONT")
        self.assert_every_id_there(dq.port, "freeze-q", pubs.ids)


class LatePoolTest(LoadFaultCase):
    def test_deferq_started_while_its_pool_is_down_serves_when_it_comes_up(self):
        port = procs.free_port()
        dq = self.deferq(port, wait_pool=False)
        c = Client(dq.port)
        answers = []
        for _ in range(10):
            t = time.monotonic()
            r = c.call("PUBLISH", "late-q", "x")
            answers.append((r, (time.monotonic() - t) * 1000))
            time.sleep(0.05)
        self.assertTrue(all(isinstance(r, str) and r.startswith("TRYAGAIN pool 'default'")
                            for r, _ in answers), answers[:3])
        slowest = max(ms for _, ms in answers)
        self.assertLess(slowest, 200, "TRYAGAIN comes at once while the pool is down")
        self.redis(port=port).start()
        deadline = time.monotonic() + 10
        r = None
        while time.monotonic() < deadline:
            r = c.call("PUBLISH", "late-q", "served")
            if isinstance(r, bytes):
                break
            time.sleep(0.1)
        print("\n  pool down: slowest TRYAGAIN %.1f ms; served %.1f s after the pool came up"
              % (slowest, 10 - (deadline - time.monotonic())))
        self.assertIsInstance(r, bytes, "not served within 10 s of the pool coming up")
        job = c.call("CONSUME", "late-q")
        self.assertEqual((job[1], job[2]), (r, b"served"))
        self.assertEqual(c.call("ACK", "late-q", r), 1)
        c.close()


class MixedLoad:
    """Clients of one queue doing everything at once, until stop():
    publishers (half delayed 1 s, TRIES 2), cancellers (publish with ID, then CANCEL it),
    consumers (CONSUME TTR 1 COUNT 10; ACK most, NACK some, abandon some to lease expiry)."""

    def __init__(self, port, queue):
        self.port = port
        self.q = queue
        self.halt = threading.Event()
        self.lock = threading.Lock()
        self.published = {}  # id -> payload, answered
        self.acked = set()
        self.cancelled = set()
        self.unsure = set()  # ACK or CANCEL sent, connection broke before the answer
        self.errors = []
        self.threads = []
        for i in range(4):
            self.threads.append(threading.Thread(target=self.publisher, args=(i,), daemon=True))
        for i in range(2):
            self.threads.append(threading.Thread(target=self.canceller, args=(i,), daemon=True))
        for i in range(4):
            self.threads.append(threading.Thread(target=self.consumer, args=(i,), daemon=True))

    def start(self):
        for t in self.threads:
            t.start()
        return self

    def stop(self):
        self.halt.set()
        for t in self.threads:
            t.join(30)

    def note(self, r):
        if isinstance(r, str):
            with self.lock:
                self.errors.append(r)

    def publisher(self, i):
        c = Client(self.port)
        rng = random.Random(i)
        for k in range(100_000):
            if self.halt.is_set():
                break
            payload = "m-%d-%d" % (i, k)
            extra = ("DELAY", 1) if rng.random() < 0.5 else ()
            r = c.call("PUBLISH", self.q, payload, "TRIES", 2, *extra)
            if isinstance(r, bytes):
                with self.lock:
                    self.published[r] = payload.encode()
            else:
                self.note(r)
        c.close()

    def canceller(self, i):
        c = Client(self.port)
        for k in range(100_000):
            if self.halt.is_set():
                break
            key = "c-%d-%d" % (i, k)
            r = c.call("PUBLISH", self.q, key, "ID", key, "DELAY", 2)
            if not isinstance(r, bytes):
                self.note(r)
                continue
            with self.lock:
                self.published[r] = key.encode()
            n = c.call("CANCEL", self.q, key)
            with self.lock:
                if n == 1:
                    self.cancelled.add(r)
                elif n is None:
                    self.unsure.add(r)
            self.note(n)
        c.close()

    def consumer(self, i):
        c = Client(self.port)
        rng = random.Random(100 + i)
        while not self.halt.is_set():
            jobs = c.call("CONSUME", self.q, "TTR", 1, "COUNT", 10, "TIMEOUT", "0.2")
            if not isinstance(jobs, list):
                self.note(jobs)
                continue
            for job in jobs:
                jid = job[1]
                roll = rng.random()
                if roll < 0.8:
                    n = c.call("ACK", self.q, jid)
                    with self.lock:
                        if n == 1:
                            self.acked.add(jid)
                        elif n is None:
                            self.unsure.add(jid)
                    self.note(n)
                elif roll < 0.9:
                    self.note(c.call("NACK", self.q, jid))
                # else: abandoned; its lease expires (redelivered once, then dead)
        c.close()


class DeferqKillTest(LoadFaultCase):
    def test_deferq_sigkill_under_mixed_load_balances_in_redis(self):
        rd = self.redis().start()
        dq = self.deferq(rd.port)
        load = MixedLoad(dq.port, "mixed-q").start()
        time.sleep(2.5)
        dq.kill9()
        time.sleep(0.3)
        dq.start()  # same port
        time.sleep(2.5)
        load.stop()
        rc = rd.client()
        s = qstats(rc, "mixed-q")
        terminal = (s.get("acked_total", 0) + s.get("cancelled_total", 0) +
                    s.get("expired_total", 0))
        live = s.get("ready", 0) + s.get("delayed", 0) + s["leased"] + s.get("dead", 0)
        print("\n  published %d (answered %d), acked %d, cancelled %d, expired %d; now ready %d, "
              "delayed %d, leased %d, dead %d; %d client errors"
              % (s.get("published_total", 0), len(load.published), s.get("acked_total", 0),
                 s.get("cancelled_total", 0), s.get("expired_total", 0), s.get("ready", 0),
                 s.get("delayed", 0), s["leased"], s.get("dead", 0), len(load.errors)))
        self.assertGreater(len(load.acked), 0)
        self.assertGreater(len(load.cancelled), 0)
        self.assertEqual(s.get("published_total", 0), terminal + live,
                         "published = acked + cancelled + expired + ready + delayed + leased + "
                         "dead: %r" % s)
        self.assertEqual(s["records"], s.get("ready", 0) + s["leased"] + s.get("dead", 0),
                         "the gauges match the job records")
        self.assertGreaterEqual(s.get("published_total", 0), len(load.published))
        self.assert_upstream_errors_only(load.errors)
        # Every answered id that was neither acked nor cancelled (nor maybe so, when the answer
        # was lost with deferq) is still in Redis.
        done = load.acked | load.cancelled | load.unsure
        rest = {jid: p for jid, p in load.published.items() if jid not in done}
        self.assert_every_id_there(dq.port, "mixed-q", rest)


def main():
    return runner.main_with_deferq(__name__, sys.argv, "test_load_faults.py /path/to/deferq [-v] [-k NAME]")


if __name__ == "__main__":
    sys.exit(main())
