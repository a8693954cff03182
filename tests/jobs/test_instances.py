#!/usr/bin/python3
"""Two deferq instances on one Redis (config defaults, cross-instance wake-up, crash safety),
and pool failures (-TRYAGAIN while the pool is down, refusing a pool that may evict).

A part of the job suite: see jobcase.py (run every part with test_jobs.py)."""

import os
import subprocess
import sys
import threading
import time
import unittest

from jobcase import (CROSS_INSTANCE_WAKE_MS, ENV, hi, JobTestCase, LATE_MS, lo, main, MAIN_CONFIG,
                     now_ms, procs, Raw, redis, start_deferq, TwoInstancesCase)


# --------------------------------------------------------------------------------------------
# Two deferq instances on one Redis (config defaults, cross-instance wake-up, crash safety)
# --------------------------------------------------------------------------------------------

# A killed pump owner's pool is taken over within its ownership lease (2 s, src/queue/delivery/pump.cc
# kLeaseMs) plus one try of the survivor (every kLeaseRenewMs, 500 ms).
OWNERSHIP_TAKEOVER_MS = 2500

SECOND_CONFIG = """\
[defaults]
ttl = 100
tries = 2
ttr = 1
timeout = 0.5
"""


class MultiInstanceTests(TwoInstancesCase):
    second_config, second_name = SECOND_CONFIG, "deferq-b"

    def test_config_defaults_apply_to_publish_consume_and_max_payload_defaults_to_1mib(self):
        q = self.q
        jid = self.pub(q, b"x", client=self.b)
        self.assertJobReply(self.cmd("PEEK", q, client=self.b)[0], q, jid, b"x", 2, ttl=100)
        reply, c0, c1 = self.consume_timed(q, client=self.b)
        self.assertJobReply(reply, q, jid, b"x", 1, ttl=100)
        due = self.job(q, jid)[b"due_ms"]
        self.assertTrue(lo(c0) + 1000 <= due <= hi(c1) + 1000, "default ttr 1 s: %d vs [%d,%d]"
                        % (due, c0, c1))
        t0 = time.time()
        self.assertIsNone(self.consume(q, client=self.b))
        took = time.time() - t0
        self.assertTrue(0.495 <= took <= 0.5 + LATE_MS / 1000.0, "default timeout 0.5 s: %.3f"
                        % took)
        big = b"m" * (1024 * 1024)
        self.pub(q, big, client=self.b)
        rb = self.raw_client(self.dq_b.port)
        self.assertEqual(rb.call("PUBLISH", q, big + b"!"), "ERR payload too large")

    def test_blocked_consumer_on_one_instance_is_woken_by_publish_on_another(self):
        q = self.q
        t = self.consumer("CONSUME", q, "TIMEOUT", 5, port=self.dq_b.port)
        t.start()
        time.sleep(0.3)
        t_pub = now_ms()
        jid = self.pub(q, b"cross")
        reply = t.finish()
        self.assertJobReply(reply, q, jid, b"cross", 0)
        woke = t.t_done - t_pub
        self.assertLessEqual(woke, CROSS_INSTANCE_WAKE_MS,
                             "woken %.1f ms after a PUBLISH on the other instance" % woke)

    def test_a_cron_job_published_on_one_instance_recurs_through_the_other(self):
        q = self.q
        jid = self.pub(q, b"tick", "ID", "every-second", "CRON", "* * * * * *", "TZ",
                       "America/New_York", "TRIES", 1)
        due = self.job(q, jid)[b"due_ms"]
        for n in range(2):
            reply, c0, c1 = self.poll_consume(q, until_ms=due + LATE_MS + 500, client=self.b)
            self.assertIsNotNone(reply, "occurrence %d never came to the other instance" % n)
            self.assertDeliveredOnTime(due, c0, c1, "occurrence %d" % n)
            a0 = now_ms()
            # The first occurrence fails (a dead copy; the schedule goes on), the second is acked.
            if n == 0:
                self.assertEqual(self.cmd("NACK", q, jid, "REASON", "down", client=self.b), 1)
            else:
                self.assertEqual(self.cmd("ACK", q, jid, client=self.b), 1)
            j = self.job(q, jid)
            self.assertEqual((j[b"state"], j[b"tz"]), (b"delayed", b"America/New_York"))
            self.assertTrue(lo(a0) < j[b"due_ms"] <= hi(now_ms()) + 1000)
            due = j[b"due_ms"]
        [dead] = self.cmd("DEADLETTER", "PEEK", q, "WITHERRORS")
        self.assertEqual((dead[2], dead[7]), (b"tick", b"down"))
        self.assertEqual(self.cmd("CANCEL", q, jid, client=self.b), 1)
        self.assertEqual(self.cmd("DEADLETTER", "DELETE", q), 1)

    def test_priorities_order_consumers_on_either_instance(self):
        q, late = self.q, self.q + ".late"
        for payload, level in ((b"n1", 0), (b"h1", 5), (b"n2", 0), (b"u1", 9), (b"h2", 5)):
            opts = ("PRIORITY", level) if level else ()
            if payload == b"h2":
                opts += ("ID", "custom-h2")  # a custom id keeps its level as a generated one
            self.pub(q, payload, *opts, client=self.b)
        delayed = self.pub(late, b"d9", "PDELAY", 300, "PRIORITY", 9)
        self.pub(late, b"d0", "PDELAY", 200)
        self.assertEqual(self.job(late, delayed)[b"priority"], 9)
        self.assertEqual([j[2] for j in self.cmd("PEEK", q, "COUNT", 10)],
                         [b"u1", b"h1", b"h2", b"n1", b"n2"])
        got = [self.consume(q)[2], self.consume(q, client=self.b)[2]]
        got += [j[2] for j in self.consume(q, "COUNT", 10)]
        self.assertEqual(got, [b"u1", b"h1", b"h2", b"n1", b"n2"])
        # Delayed jobs keep their level: both due, the later one with a priority comes first.
        self.sleep_until(now_ms() + 400)
        self.assertEqual([j[2] for j in self.consume(late, "COUNT", 2, client=self.b)],
                         [b"d9", b"d0"])
        raw = self.raw_client()
        self.assertEqual(str(raw.call("PUBLISH", q, "x", "PRIORITY", 10)),
                         "ERR value is not an integer or out of range")

    def test_a_stale_lease_cannot_finish_a_job_another_worker_holds(self):
        q = self.q
        jid = self.pub(q, b"charge", "TRIES", 3)
        first = self.consume(q, "TTR", 1)  # a worker on this instance: attempt 1
        self.assertEqual((first[1], first[5]), (jid, 1))
        # Its lease runs out; a worker on the other instance gets attempt 2.
        second, _, _ = self.poll_consume(q, until_ms=now_ms() + 3000, client=self.b)
        self.assertIsNotNone(second, "the job never came back after its lease")
        self.assertEqual((second[1], second[5]), (jid, 2))
        for stale in (("ACK", q, jid, "ATTEMPT", 1), ("NACK", q, jid, "REASON", "late", "ATTEMPT", 1),
                      ("TOUCH", q, jid, "TTR", 60, "ATTEMPT", 1)):
            with self.assertRaisesRegex(redis.ResponseError, "^STALE the job is not leased"):
                self.cmd(*stale)
        self.assertEqual(self.job(q, jid)[b"state"], b"leased")
        self.assertEqual(self.cmd("TOUCH", q, jid, "TTR", 30, "ATTEMPT", 2, client=self.b), 1)
        self.assertEqual(self.cmd("ACK", q, jid, "ATTEMPT", 2, client=self.b), 1)
        self.assertEqual(self.cmd("ACK", q, jid, "ATTEMPT", 2), 0, "finished: not found")
        self.assertQstat(q, acked_total=1, published_total=1, consumed_total=2)

    def test_killed_instance_loses_no_job_and_its_lease_is_redelivered(self):
        q = self.q
        published = self.pub(q + ".p", b"via-b", "TRIES", 1, client=self.b)
        leased, p0, p1 = self.pub_timed(q, b"leased", "TRIES", 2)
        reply = self.consume(q, "TTR", 1, client=self.b)
        self.assertJobReply(reply, q, leased, b"leased", 1)
        # One instance per pool pumps (docs/architecture.md). If that was B, the survivor takes
        # over when B's ownership lease runs out, which can be after the job's lease end.
        b_pumped = int(self.b.info("stats")["pump_owner"]) == 1
        killed = now_ms()
        self.dq_b.kill9()
        self.assertJobReply(self.consume(q + ".p"), q + ".p", published, b"via-b", 0, ttl=100)
        lease_end = self.job(q, leased)[b"due_ms"]
        takeover = killed + OWNERSHIP_TAKEOVER_MS if b_pumped else lease_end
        reply, c0, c1 = self.poll_consume(q, until_ms=max(lease_end, takeover) + LATE_MS + 500)
        self.assertJobReply(reply, q, leased, b"leased", 0, what="redelivered by the survivor",
                            born=(p0, p1))
        if b_pumped:
            self.assertGreaterEqual(hi(c1), lease_end, "redelivered before its lease ended")
            self.assertLessEqual(c0 - max(lease_end, takeover), LATE_MS,
                                 "redelivered late after the survivor took the pump over")
        else:
            self.assertDeliveredOnTime(lease_end, c0, c1, "lease of a killed instance")

    def test_consumers_on_two_instances_get_each_job_exactly_once(self):
        q = self.q
        n = 200
        p = self.c.pipeline(transaction=False)
        for i in range(n):
            p.execute_command("PUBLISH", q, b"%d" % i)
        ids = set(p.execute())
        got = []
        lock = threading.Lock()
        errors = []

        def work(port):
            try:
                c = redis.Redis(host="127.0.0.1", port=port, socket_timeout=20,
                                single_connection_client=True)
                while True:
                    r = c.execute_command("CONSUME", q, "COUNT", 3, "TTR", 60)
                    if r is None:
                        break
                    for j in r:
                        c.execute_command("ACK", q, j[1])
                    with lock:
                        got.extend(j[1] for j in r)
                c.close()
            except Exception as e:
                errors.append(e)

        threads = [threading.Thread(target=work, args=(port,), daemon=True)
                   for port in (self.port, self.dq_b.port, self.port, self.dq_b.port)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        self.assertEqual(errors, [])
        self.assertEqual(len(got), n, "deliveries")
        self.assertEqual(set(got), ids)
        self.assertQstat(q, published_total=n, consumed_total=n, acked_total=n)


# --------------------------------------------------------------------------------------------
# Pool failures (own redis-server, own deferq)
# --------------------------------------------------------------------------------------------

class PoolFailureTests(unittest.TestCase):

    def test_commands_answer_tryagain_quickly_while_the_pool_is_down_and_recover(self):
        rd = procs.Redis(ENV.tmpdir).start()
        dq = start_deferq(rd.port, MAIN_CONFIG, "deferq-pool")
        raw = None
        try:
            raw = Raw(dq.port)
            jid = raw.call("PUBLISH", "pq", "before")
            self.assertIsInstance(jid, bytes)
            rd.stop()
            want = "TRYAGAIN pool 'default' unavailable"
            for args in (("PUBLISH", "pq", "x"), ("CONSUME", "pq"), ("QSTAT", "pq"),
                         ("ACK", "pq", jid), ("JOB", "pq", jid)):
                t0 = time.time()
                got = raw.call(*args)
                took = time.time() - t0
                self.assertEqual(got, want, "%r while the pool is down" % (args,))
                self.assertLess(took, 1.5, "%r took %.2f s" % (args, took))
            rd.start()
            deadline = time.time() + 20
            got = None
            while time.time() < deadline:
                got = raw.call("PUBLISH", "pq", "after")
                if isinstance(got, bytes):
                    break
                time.sleep(0.2)
            self.assertIsInstance(got, bytes, "deferq did not recover: %r" % (got,))
            self.assertEqual(raw.call("CONSUME", "pq")[2], b"after",
                             "(redis restarted empty, so only the new job exists)")
            self.assertTrue(dq.alive())
        finally:
            if raw:
                raw.close()
            dq.stop()
            rd.stop()

    def test_refuses_to_start_on_a_pool_without_noeviction(self):
        rd = procs.Redis(ENV.tmpdir, extra=["--maxmemory", "100mb", "--maxmemory-policy", "allkeys-lru"])
        rd.start()
        log = os.path.join(ENV.tmpdir, "deferq-evict.log")
        port = procs.free_port()
        try:
            with open(log, "ab") as f:
                proc = subprocess.Popen(
                    [ENV.deferq, "--port", str(port), "--threads", "2",
                     "--pool", "default=redis://127.0.0.1:%d" % rd.port],
                    stdout=f, stderr=subprocess.STDOUT)
            try:
                rc = proc.wait(10)
            except subprocess.TimeoutExpired:
                rc = None
            procs.stop_process(proc)
            with open(log, "rb") as f:
                text = f.read().decode("utf-8", "replace")
            self.assertIsNotNone(rc, "deferq kept running on an allkeys-lru pool; log:\n" + text)
            self.assertNotEqual(rc, 0, "log:\n" + text)
        finally:
            rd.stop()


if __name__ == "__main__":
    sys.exit(main(__name__))
