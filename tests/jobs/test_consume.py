#!/usr/bin/python3
"""CONSUME (priority order, COUNT, blocking and wake-ups, lease expiry) and the job lifecycle:
ACK / NACK / TOUCH / CANCEL / JOB / PEEK (docs/commands.md).

A part of the job suite: see jobcase.py (run every part with test_jobs.py)."""

import sys
import time

from jobcase import (hi, JobTestCase, LATE_MS, lo, main, now_ms, WAKE_MS)


# --------------------------------------------------------------------------------------------
# CONSUME
# --------------------------------------------------------------------------------------------

class ConsumeTests(JobTestCase):

    def test_consume_tries_queues_in_the_given_priority_order_fifo_within_each(self):
        qa, qb = self.q + ".a", self.q + ".b"
        a = [self.pub(qa, b"a%d" % i) for i in range(2)]
        b = [self.pub(qb, b"b%d" % i) for i in range(3)]
        self.assertJobReply(self.consume(qb, qa), qb, b[0], b"b0", 0)
        self.assertJobReply(self.consume(qa, qb), qa, a[0], b"a0", 0)
        self.assertJobReply(self.consume(qb, qa), qb, b[1], b"b1", 0)
        self.assertJobReply(self.consume(qb, qa), qb, b[2], b"b2", 0)
        self.assertJobReply(self.consume(qb, qa), qa, a[1], b"a1", 0, what="qb empty -> qa")
        self.assertIsNone(self.consume(qb, qa))

    def test_consume_count_returns_an_array_filling_from_later_queues(self):
        qa, qb, qc = self.q + ".a", self.q + ".b", self.q + ".c"
        a = self.pub(qa, b"a")
        b = [self.pub(qb, b"b%d" % i) for i in range(3)]
        c = self.pub(qc, b"c")
        reply = self.consume(qa, qb, qc, "COUNT", 3)
        self.assertIsInstance(reply, list)
        self.assertEqual(len(reply), 3, reply)
        self.assertJobReply(reply[0], qa, a, b"a", 0)
        self.assertJobReply(reply[1], qb, b[0], b"b0", 0)
        self.assertJobReply(reply[2], qb, b[1], b"b1", 0)
        reply = self.consume(qa, qb, qc, "COUNT", 10)
        self.assertEqual(len(reply), 2, "up to n: only 2 remain: %r" % reply)
        self.assertJobReply(reply[0], qb, b[2], b"b2", 0)
        self.assertJobReply(reply[1], qc, c, b"c", 0)
        self.assertIsNone(self.consume(qa, qb, qc, "COUNT", 10), "COUNT with nothing -> null")
        d = self.pub(qc, b"d")
        reply = self.consume(qa, qb, qc, "COUNT", 1)
        self.assertEqual(len(reply), 1, "COUNT 1 is an array of one job: %r" % reply)
        self.assertJobReply(reply[0], qc, d, b"d", 0)
        self.assertQstat(qb, leased=3, published_total=3, consumed_total=3)

    def test_consume_ttr_sets_the_lease_length(self):
        q = self.q
        jid = self.pub(q, b"x")
        reply, c0, c1 = self.consume_timed(q, "TTR", 7)
        self.assertJobReply(reply, q, jid, b"x", 0)
        due = self.job(q, jid)[b"due_ms"]
        self.assertTrue(lo(c0) + 7000 <= due <= hi(c1) + 7000, (due, c0, c1))

    def test_consume_timeout_blocks_and_returns_null_after_the_timeout(self):
        q = self.q
        for args, secs in ((("TIMEOUT", 1), 1.0), (("TIMEOUT", "0.5"), 0.5),
                           (("TIMEOUT", "0.3", "COUNT", 5), 0.3)):
            t0 = time.time()
            reply = self.raw.call_bytes("CONSUME", q, self.q + ".other", *args)
            took = time.time() - t0
            self.assertEqual(reply, b"*-1\r\n", "CONSUME %r" % (args,))
            self.assertGreaterEqual(took, secs - 0.005, "returned before TIMEOUT %r" % (args,))
            self.assertLessEqual(took, secs + LATE_MS / 1000.0, "TIMEOUT %r took %.3f s"
                                 % (args, took))
        t0 = time.time()
        self.assertEqual(self.raw.call_bytes("CONSUME", q, "TIMEOUT", 0), b"*-1\r\n")
        self.assertLess(time.time() - t0, 0.2, "TIMEOUT 0 does not block")

    def test_blocked_consumer_is_woken_by_publish_from_another_connection_within_50ms(self):
        qa, qb = self.q + ".a", self.q + ".b"
        for target, count in ((qb, None), (qa, None), (qa, 3)):
            args = ["CONSUME", qa, qb, "TIMEOUT", 5] + (["COUNT", count] if count else [])
            t = self.consumer(*args)
            t.start()
            time.sleep(0.3)
            self.assertTrue(t.is_alive(), "consumer must block on empty queues")
            t_pub = now_ms()
            jid = self.pub(target, b"wake")
            reply = t.finish()
            woke = t.t_done - t_pub
            if count:
                self.assertEqual(len(reply), 1, "COUNT n returns as soon as one job is there")
                reply = reply[0]
            self.assertJobReply(reply, target, jid, b"wake", 0)
            self.assertLessEqual(woke, WAKE_MS, "woken %.1f ms after PUBLISH (%s)" % (woke, args))
            t.close()

    def test_blocked_consumer_is_woken_when_a_delayed_job_falls_due_never_before(self):
        q = self.q
        t = self.consumer("CONSUME", q, "TIMEOUT", 3)
        t.start()
        jid, t0, t1 = self.pub_timed(q, b"due", "PDELAY", 400)
        due = self.job(q, jid)[b"due_ms"]
        reply = t.finish()
        self.assertIsNotNone(reply, "not delivered within TIMEOUT 3")
        self.assertDeliveredOnTime(due, t.t_done, t.t_done, "blocked consumer, PDELAY 400")
        self.assertJobReply(reply, q, jid, b"due", 0, born=(t0, t1), at=(due, t.t_done))

    def test_blocked_consumer_is_woken_by_nack_and_by_respawn(self):
        q, qd = self.q, self.q + ".dead"
        jid = self.pub(q, b"n", "TRIES", 2)
        self.assertJobReply(self.consume(q), q, jid, b"n", 1)
        other = self.client()
        t = self.consumer("CONSUME", q, "TIMEOUT", 5)
        t.start()
        time.sleep(0.2)
        t0 = now_ms()
        self.assertEqual(self.cmd("NACK", q, jid, client=other), 1)
        self.assertJobReply(t.finish(), q, jid, b"n", 0)
        self.assertLessEqual(t.t_done - t0, WAKE_MS, "woken by NACK after %.1f ms" % (t.t_done - t0))
        did = self.pub(qd, b"d")
        self.consume(qd)
        self.assertEqual(self.cmd("NACK", qd, did), 1)
        t = self.consumer("CONSUME", qd, "TIMEOUT", 5)
        t.start()
        time.sleep(0.2)
        t0 = now_ms()
        self.assertEqual(self.cmd("DEADLETTER", "RESPAWN", qd, client=other), 1)
        self.assertJobReply(t.finish(), qd, did, b"d", 0)
        self.assertLessEqual(t.t_done - t0, WAKE_MS, "woken by RESPAWN after %.1f ms"
                             % (t.t_done - t0))

    def test_blocked_consumers_on_one_queue_are_served_first_come_first_served(self):
        q = self.q
        ts = []
        for i in range(3):
            t = self.consumer("CONSUME", q, "TIMEOUT", 5)
            t.start()
            ts.append(t)
            time.sleep(0.1)
        for i in range(3):
            jid = self.pub(q, b"job%d" % i)
            self.assertJobReply(ts[i].finish(), q, jid, b"job%d" % i, 0,
                                what="consumer %d (blocked %d-th)" % (i, i + 1))
            for later in ts[i + 1:]:
                self.assertTrue(later.is_alive(), "a later consumer got served too")

    def test_blocked_consumer_that_disconnects_is_forgotten_and_leases_nothing(self):
        q = self.q
        gone = self.raw_client()
        gone.send("CONSUME", q, "TIMEOUT", 5)
        time.sleep(0.1)
        t = self.consumer("CONSUME", q, "TIMEOUT", 5)
        t.start()
        time.sleep(0.1)
        gone.close()
        time.sleep(0.1)
        jid = self.pub(q, b"x")
        self.assertJobReply(t.finish(), q, jid, b"x", 0, what="the live consumer")
        self.assertQstat(q, leased=1, published_total=1, consumed_total=1)
        # and with nobody left blocked, the next job stays ready
        gone2 = self.raw_client()
        gone2.send("CONSUME", q, "TIMEOUT", 5)
        time.sleep(0.1)
        gone2.close()
        time.sleep(0.1)
        j2 = self.pub(q, b"y")
        time.sleep(0.1)
        self.assertEqual(self.job(q, j2)[b"state"], b"ready")
        self.assertQstat(q, ready=1, leased=1, published_total=2, consumed_total=1)

    def test_lease_expiry_redelivers_not_before_lease_end_then_dead_letters(self):
        qa, qb = self.q + ".a", self.q + ".b"
        a, p0, p1 = self.pub_timed(qa, b"a", "TRIES", 2)
        b = self.pub(qb, b"b")
        first = self.client()
        reply, c0, c1 = self.consume_timed(qa, "TTR", 1, client=first)
        self.assertJobReply(reply, qa, a, b"a", 1)
        self.assertJobReply(self.consume(qb, "TTR", 1), qb, b, b"b", 0)
        lease_end = self.job(qa, a)[b"due_ms"]
        lease_end_b = self.job(qb, b)[b"due_ms"]
        self.assertTrue(lo(c0) + 1000 <= lease_end <= hi(c1) + 1000, (lease_end, c0, c1))
        self.assertEqual(self.job(qa, a)[b"state"], b"leased")
        second = self.client()
        reply, s0, s1 = self.poll_consume(qa, "TTR", 5, until_ms=lease_end + LATE_MS + 500,
                                          client=second)
        self.assertJobReply(reply, qa, a, b"a", 0, what="redelivery", born=(p0, p1))
        self.assertDeliveredOnTime(lease_end, s0, s1, "redelivery after TTR 1")
        j = self.job(qa, a)
        self.assertEqual((j[b"state"], j[b"attempt"], j[b"tries_left"]), (b"leased", 2, 0))
        self.sleep_until(lease_end_b + LATE_MS + 50)
        j = self.job(qb, b)
        self.assertEqual(j[b"state"], b"dead", "ttr passed with no tries left -> dead letter")
        self.assertEqual(self.cmd("DEADLETTER", "SIZE", qb), 1)
        self.assertQstat(qb, dead=1, published_total=1, consumed_total=1, dead_total=1)
        # the first consumer's ACK completes the job that now holds the id (docs/commands.md)
        self.assertEqual(self.cmd("ACK", qa, a, client=first), 1)
        self.assertIsNone(self.job(qa, a))
        self.assertQstat(qa, published_total=1, consumed_total=2, acked_total=1)


# --------------------------------------------------------------------------------------------
# ACK / NACK / TOUCH / CANCEL / JOB / PEEK
# --------------------------------------------------------------------------------------------

class LifecycleTests(JobTestCase):

    def test_ack_counts_found_ids_and_unknown_or_finished_ids_count_zero(self):
        q = self.q
        ids = [self.pub(q, b"%d" % i) for i in range(3)]
        got = [self.consume(q)[1] for _ in range(2)]
        self.assertEqual(got, ids[:2])
        self.assertEqual(self.cmd("ACK", q, ids[0], ids[1], "nosuchid"), 2)
        self.assertEqual(self.cmd("ACK", q, ids[0]), 0, "already finished")
        self.assertEqual(self.cmd("ACK", q, "nosuchid", "other"), 0)
        self.assertEqual(self.cmd("ACK", self.q + ".elsewhere", ids[2]), 0,
                         "an id is looked up in the named queue only")
        self.assertQstat(q, ready=1, published_total=3, consumed_total=2, acked_total=2)

    def test_ack_of_a_delayed_or_ready_job_deletes_it(self):
        q = self.q
        d = self.pub(q, b"d", "DELAY", 100)
        r = self.pub(q, b"r")
        self.assertQstat(q, ready=1, delayed=1, published_total=2)
        self.assertEqual(self.cmd("ACK", q, d), 1)
        self.assertEqual(self.cmd("ACK", q, r), 1)
        self.assertIsNone(self.job(q, d))
        self.assertIsNone(self.job(q, r))
        self.assertIsNone(self.consume(q))
        self.assertQstat(q, published_total=2, acked_total=2)

    def test_nack_makes_a_leased_job_ready_again_and_answers_0_when_not_leased(self):
        q = self.q
        jid = self.pub(q, b"x", "TRIES", 3)
        self.assertEqual(self.cmd("NACK", q, jid), 0, "ready, not leased")
        self.assertEqual(self.cmd("NACK", q, "nosuch"), 0)
        self.assertJobReply(self.consume(q), q, jid, b"x", 2)
        t0 = now_ms()
        self.assertEqual(self.cmd("NACK", q, jid), 1)
        t1 = now_ms()
        j = self.job(q, jid)
        self.assertEqual((j[b"state"], j[b"tries_left"], j[b"attempt"]), (b"ready", 2, 1))
        self.assertTrue(lo(t0) <= j[b"due_ms"] <= hi(t1), "ready: due_ms = when it became ready")
        self.assertQstat(q, ready=1, published_total=1, consumed_total=1)
        self.assertEqual(self.cmd("NACK", q, jid), 0)
        self.assertJobReply(self.consume(q), q, jid, b"x", 1)
        self.assertEqual(self.job(q, jid)[b"attempt"], 2)

    def test_nack_delay_delays_the_job_and_it_is_not_delivered_before(self):
        q = self.q
        jid, p0, p1 = self.pub_timed(q, b"x", "TRIES", 2)
        self.consume(q)
        t0 = now_ms()
        self.assertEqual(self.cmd("NACK", q, jid, "DELAY", 1), 1)
        t1 = now_ms()
        j = self.job(q, jid)
        self.assertEqual(j[b"state"], b"delayed")
        due = j[b"due_ms"]
        self.assertTrue(lo(t0) + 1000 <= due <= hi(t1) + 1000, (due, t0, t1))
        self.assertQstat(q, delayed=1, published_total=1, consumed_total=1)
        reply, c0, c1 = self.poll_consume(q, until_ms=due + LATE_MS + 500)
        self.assertJobReply(reply, q, jid, b"x", 0, born=(p0, p1))
        self.assertDeliveredOnTime(due, c0, c1, "NACK DELAY 1")

    def test_nack_without_tries_left_moves_the_job_to_the_dead_letter(self):
        q = self.q
        jid = self.pub(q, b"x")
        self.consume(q)
        t0 = now_ms()
        self.assertEqual(self.cmd("NACK", q, jid), 1)
        t1 = now_ms()
        j = self.job(q, jid)
        self.assertEqual((j[b"state"], j[b"tries_left"], j[b"attempt"]), (b"dead", 0, 1))
        self.assertTrue(lo(t0) <= j[b"due_ms"] <= hi(t1), "dead: due_ms = when it died")
        self.assertIsNone(self.consume(q))
        self.assertEqual(self.cmd("DEADLETTER", "SIZE", q), 1)
        self.assertQstat(q, dead=1, published_total=1, consumed_total=1, dead_total=1)
        jid2 = self.pub(q, b"y")
        self.consume(q)
        self.assertEqual(self.cmd("NACK", q, jid2, "DELAY", 5), 1, "no tries: DELAY is moot")
        self.assertEqual(self.job(q, jid2)[b"state"], b"dead")

    def test_touch_extends_a_lease_with_new_or_original_ttr(self):
        q, q2 = self.q, self.q + ".2"
        jid = self.pub(q, b"x", "TRIES", 2)
        j2 = self.pub(q2, b"y", "TRIES", 2)
        self.assertEqual(self.cmd("TOUCH", q, jid), 0, "ready, not leased")
        self.assertEqual(self.cmd("TOUCH", q, jid, "TTR", 5), 0, "ready, not leased")
        _, c0, c1 = self.consume_timed(q, "TTR", 1)
        self.assertEqual(self.consume(q2, "TTR", 3)[1], j2)
        time.sleep(0.5)
        t0 = now_ms()
        self.assertEqual(self.cmd("TOUCH", q, jid, "TTR", 2), 1)
        t1 = now_ms()
        due = self.job(q, jid)[b"due_ms"]
        self.assertTrue(lo(t0) + 2000 <= due <= hi(t1) + 2000, (due, t0, t1))
        t0 = now_ms()
        self.assertEqual(self.cmd("TOUCH", q2, j2), 1)
        t1 = now_ms()
        due2 = self.job(q2, j2)[b"due_ms"]
        self.assertTrue(lo(t0) + 3000 <= due2 <= hi(t1) + 3000,
                        "TOUCH without TTR extends by the ttr it was leased with (3 s): "
                        "%d vs [%d,%d]" % (due2, t0 + 3000, t1 + 3000))
        self.sleep_until(c1 + 1000 + LATE_MS + 100)
        j = self.job(q, jid)
        self.assertEqual((j[b"state"], j[b"attempt"]), (b"leased", 1),
                         "the touched lease must outlive the original ttr")
        self.assertIsNone(self.consume(q))
        self.assertEqual(self.cmd("TOUCH", q, "nosuch"), 0)
        self.assertEqual(self.cmd("ACK", q, jid), 1)
        self.assertEqual(self.cmd("TOUCH", q, jid), 0, "finished")
        self.assertEqual(self.cmd("NACK", q2, j2), 1)
        self.assertEqual(self.cmd("TOUCH", q2, j2), 0, "ready again, not leased")

    def test_cancel_removes_a_job_in_each_state(self):
        q = self.q
        ll = self.pub(q, b"l")
        x = self.pub(q, b"x")
        r = self.pub(q, b"r")
        d = self.pub(q, b"d", "DELAY", 100)
        self.assertEqual(self.consume(q)[1], ll)
        self.assertEqual(self.consume(q)[1], x)
        self.assertEqual(self.cmd("NACK", q, x), 1)
        states = {d: b"delayed", r: b"ready", ll: b"leased", x: b"dead"}
        for jid, st in states.items():
            self.assertEqual(self.job(q, jid)[b"state"], st)
        self.assertQstat(q, ready=1, delayed=1, leased=1, dead=1, published_total=4,
                         consumed_total=2, dead_total=1)
        self.assertEqual(self.cmd("CANCEL", q, d), 1)
        self.assertEqual(self.cmd("CANCEL", q, r, "nosuch"), 1)
        self.assertEqual(self.cmd("CANCEL", q, ll, x), 2)
        self.assertEqual(self.cmd("CANCEL", q, d, r, ll, x), 0)
        for jid in states:
            self.assertIsNone(self.job(q, jid))
        self.assertEqual(self.cmd("ACK", q, ll), 0)
        self.assertEqual(self.cmd("DEADLETTER", "SIZE", q), 0)
        st = self.qstat(q)
        for k in ("ready", "delayed", "leased", "dead"):
            self.assertEqual(st[k], 0, k)
        self.assertEqual(self.cmd("QUEUES"), [])

    def test_job_reports_each_state_with_its_due_ms(self):
        q = self.q
        t0 = now_ms()
        jid = self.pub(q, b"payload", "PDELAY", 300, "TRIES", 3, "TTL", 0, "BACKOFF", 4)
        t1 = now_ms()
        j = self.job(q, jid)
        self.assertEqual(j, {b"id": jid, b"queue": q.encode(), b"state": b"delayed",
                             b"payload": b"payload", b"tries_left": 3, b"attempt": 0,
                             b"created_ms": j[b"created_ms"], b"due_ms": j[b"due_ms"],
                             b"ttl_left_s": -1, b"every_s": 0, b"backoff_s": 4,
                             b"last_error": None, b"last_error_attempt": 0,
                             b"last_error_ms": 0, b"cron": None, b"tz": None,
                             b"priority": 0, b"result": None, b"finished_ms": 0})
        self.assertTrue(lo(t0) <= j[b"created_ms"] <= hi(t1))
        due = j[b"due_ms"]
        self.assertEqual(due, j[b"created_ms"] + 300, "delayed: due_ms = when it falls due")
        self.sleep_until(due + LATE_MS)
        j = self.job(q, jid)
        self.assertEqual(j[b"state"], b"ready")
        self.assertTrue(due <= j[b"due_ms"] <= due + LATE_MS,
                        "ready: due_ms = when it became ready: %d vs due %d" % (j[b"due_ms"], due))
        _, c0, c1 = self.consume_timed(q, "TTR", 30)
        j = self.job(q, jid)
        self.assertEqual((j[b"state"], j[b"tries_left"], j[b"attempt"]), (b"leased", 2, 1))
        self.assertTrue(lo(c0) + 30000 <= j[b"due_ms"] <= hi(c1) + 30000,
                        "leased: due_ms = lease end")
        self.cmd("NACK", q, jid, "DELAY", 0)
        self.consume(q)
        self.cmd("NACK", q, jid, "DELAY", 0)
        self.consume(q)
        t0 = now_ms()
        self.cmd("NACK", q, jid)
        t1 = now_ms()
        j = self.job(q, jid)
        self.assertEqual((j[b"state"], j[b"tries_left"], j[b"attempt"]), (b"dead", 0, 3))
        self.assertTrue(lo(t0) <= j[b"due_ms"] <= hi(t1), "dead: due_ms = when it died")
        self.assertEqual(j[b"payload"], b"payload")
        self.assertEqual(j[b"backoff_s"], 4)

    def test_job_of_an_unknown_id_is_null(self):
        q = self.q
        self.assertEqual(self.raw.call_bytes("JOB", q, "nosuch"), b"*-1\r\n")
        jid = self.pub(q, b"x")
        self.assertEqual(self.raw.call_bytes("JOB", self.q + ".x", jid), b"*-1\r\n")
        self.assertIsNone(self.cmd("JOB", q, "nosuch"))

    def test_peek_defaults_to_one_job_oldest_first_and_does_not_lease(self):
        q = self.q
        ids = [self.pub(q, b"p%d" % i, "TRIES", 3) for i in range(3)]
        self.pub(q, b"later", "DELAY", 100)
        peek = self.cmd("PEEK", q)
        self.assertEqual(len(peek), 1, "PEEK defaults to COUNT 1: %r" % peek)
        self.assertJobReply(peek[0], q, ids[0], b"p0", 3)
        peek = self.cmd("PEEK", q, "COUNT", 2)
        self.assertEqual([j[1] for j in peek], ids[:2])
        peek = self.cmd("PEEK", q, "COUNT", 1000)
        self.assertEqual(len(peek), 3, "only ready jobs")
        for i, j in enumerate(peek):
            self.assertJobReply(j, q, ids[i], b"p%d" % i, 3)
        self.assertQstat(q, ready=3, delayed=1, published_total=4)
        self.assertEqual(self.job(q, ids[0])[b"attempt"], 0)
        self.assertJobReply(self.consume(q), q, ids[0], b"p0", 2)
        self.assertEqual([j[1] for j in self.cmd("PEEK", q, "COUNT", 5)], ids[1:],
                         "leased jobs are not peeked")

    def test_delayed_jobs_become_ready_in_due_time_order(self):
        q = self.q
        late = self.pub(q, b"late", "PDELAY", 450)
        early = self.pub(q, b"early", "PDELAY", 150)
        mid = self.pub(q, b"mid", "PDELAY", 300)
        now = self.pub(q, b"now")
        self.sleep_until(self.job(q, late)[b"due_ms"] + LATE_MS)
        self.assertEqual([j[1] for j in self.cmd("PEEK", q, "COUNT", 10)], [now, early, mid, late])
        self.assertEqual([self.consume(q)[1] for _ in range(4)], [now, early, mid, late])


if __name__ == "__main__":
    sys.exit(main(__name__))
