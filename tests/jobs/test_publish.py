#!/usr/bin/python3
"""PUBLISH and its options (docs/commands.md), and the argument errors every job command shares.

A part of the job suite: see jobcase.py (run every part with test_jobs.py)."""

import math
import sys
import time

from jobcase import (CROCKFORD, DEFAULT_TTL, DEFAULT_TTR_MS, hi, id_time_ms, JobTestCase, LATE_MS,
                     lo, main, MAX_PAYLOAD, now_ms)


# --------------------------------------------------------------------------------------------
# PUBLISH
# --------------------------------------------------------------------------------------------

class PublishTests(JobTestCase):

    def test_publish_without_options_is_ready_at_once_with_default_ttl_tries_and_ttr(self):
        q = self.q
        jid, t0, t1 = self.pub_timed(q, b"hello")
        self.assertEqual(len(jid), 26, jid)
        self.assertTrue(all(chr(ch) in CROCKFORD for ch in jid), jid)
        ts = id_time_ms(jid)
        self.assertTrue(lo(t0) <= ts <= hi(t1), "id timestamp %d not the publish time [%d,%d]"
                        % (ts, t0, t1))
        j = self.job(q, jid)
        self.assertEqual(j[b"id"], jid)
        self.assertEqual(j[b"queue"], q.encode())
        self.assertEqual(j[b"state"], b"ready")
        self.assertEqual(j[b"payload"], b"hello")
        self.assertEqual(j[b"tries_left"], 1)
        self.assertEqual(j[b"attempt"], 0)
        self.assertTrue(lo(t0) <= j[b"created_ms"] <= hi(t1), j)
        self.assertEqual(j[b"due_ms"], ts, "ready job: due_ms = when it became ready = first due")
        self.assertTtl(j[b"ttl_left_s"], DEFAULT_TTL)
        self.assertEqual(j[b"every_s"], 0)
        self.assertEqual(j[b"backoff_s"], 0)
        self.assertQstat(q, ready=1, published_total=1)
        self.assertEqual(len(self.cmd("PEEK", q)), 1)
        self.assertJobReply(self.cmd("PEEK", q)[0], q, jid, b"hello", 1)
        reply, c0, c1 = self.consume_timed(q)
        self.assertLess(c1 - c0, 200, "TIMEOUT defaults to 0 (no blocking)")
        self.assertJobReply(reply, q, jid, b"hello", 0, what="CONSUME")
        j = self.job(q, jid)
        self.assertEqual(j[b"state"], b"leased")
        self.assertEqual(j[b"attempt"], 1)
        self.assertEqual(j[b"tries_left"], 0)
        self.assertTrue(lo(c0) + DEFAULT_TTR_MS <= j[b"due_ms"] <= hi(c1) + DEFAULT_TTR_MS,
                        "leased due_ms %d should be lease end = consume time + default ttr 120 s "
                        "[%d,%d]" % (j[b"due_ms"], c0 + DEFAULT_TTR_MS, c1 + DEFAULT_TTR_MS))
        self.assertQstat(q, leased=1, published_total=1, consumed_total=1)
        self.assertEqual(self.cmd("ACK", q, jid), 1)
        self.assertIsNone(self.job(q, jid))
        self.assertQstat(q, published_total=1, consumed_total=1, acked_total=1)

    def test_generated_ids_are_unique_and_their_timestamp_is_the_first_due_time(self):
        q = self.q
        t0 = now_ms()
        p = self.c.pipeline(transaction=False)
        for i in range(300):
            p.execute_command("PUBLISH", q, b"x%d" % i)
        ids = p.execute()
        t1 = now_ms()
        self.assertEqual(len(set(ids)), 300, "ids are not unique")
        for jid in ids:
            self.assertEqual(len(jid), 26, jid)
            self.assertTrue(all(chr(ch) in CROCKFORD for ch in jid), jid)
            self.assertTrue(lo(t0) <= id_time_ms(jid) <= hi(t1), jid)
        late = self.pub(q, b"a", "PDELAY", 5000)
        now = self.pub(q, b"b", "PDELAY", 0)
        mid = self.pub(q, b"c", "PDELAY", 2000)
        self.assertEqual(sorted([late, now, mid]), [now, mid, late], "ids sort by due time")
        for jid in (late, mid):
            self.assertEqual(id_time_ms(jid), self.job(q, jid)[b"due_ms"], jid)
        pat = int(now_ms()) + 60000
        jid = self.pub(q, b"d", "PAT", pat)
        self.assertEqual(id_time_ms(jid), pat)
        self.assertGreater(jid, late)

    def test_publish_delay_seconds_is_delayed_and_never_consumable_before_due(self):
        q = self.q
        jid, t0, t1 = self.pub_timed(q, b"later", "DELAY", 1, "TRIES", 2)
        j = self.job(q, jid)
        self.assertEqual(j[b"state"], b"delayed")
        due = j[b"due_ms"]
        self.assertTrue(lo(t0) + 1000 <= due <= hi(t1) + 1000, "due_ms %d vs publish [%d,%d]+1000"
                        % (due, t0, t1))
        self.assertEqual(j[b"tries_left"], 2)
        self.assertEqual(j[b"attempt"], 0)
        self.assertQstat(q, delayed=1, published_total=1)
        self.assertEqual(self.cmd("PEEK", q), [], "a delayed job is not ready")
        self.assertIsNone(self.consume(q))
        reply, c0, c1 = self.poll_consume(q, until_ms=due + LATE_MS + 500)
        self.assertIsNotNone(reply, "not delivered by due + %d ms" % (LATE_MS + 500))
        self.assertDeliveredOnTime(due, c0, c1, "DELAY 1")
        self.assertJobReply(reply, q, jid, b"later", 1, born=(t0, t1), at=(c0, c1))
        self.assertGreaterEqual(hi(c1), lo(t0) + 1000)
        self.assertQstat(q, leased=1, published_total=1, consumed_total=1)

    def test_publish_pdelay_milliseconds_and_zero_delays_are_ready_at_once(self):
        q = self.q
        jid, t0, t1 = self.pub_timed(q, b"p", "PDELAY", 300)
        due = self.job(q, jid)[b"due_ms"]
        self.assertTrue(lo(t0) + 300 <= due <= hi(t1) + 300, (due, t0, t1))
        self.assertEqual(self.job(q, jid)[b"state"], b"delayed")
        self.assertIsNone(self.consume(q))
        reply, c0, c1 = self.poll_consume(q, until_ms=due + LATE_MS + 500)
        self.assertIsNotNone(reply, "not delivered by due + %d ms" % (LATE_MS + 500))
        self.assertDeliveredOnTime(due, c0, c1, "PDELAY 300")
        self.assertJobReply(reply, q, jid, b"p", 0, born=(t0, t1), at=(c0, c1))
        a = self.pub(q, b"d0", "DELAY", 0)
        b = self.pub(q, b"p0", "PDELAY", 0)
        self.assertEqual(self.job(q, a)[b"state"], b"ready")
        self.assertEqual(self.job(q, b)[b"state"], b"ready")
        self.assertJobReply(self.consume(q), q, a, b"d0", 0)
        self.assertJobReply(self.consume(q), q, b, b"p0", 0)

    def test_publish_at_future_unix_seconds_falls_due_exactly_then(self):
        q = self.q
        at = math.ceil(time.time() + 0.4)
        jid, t0, t1 = self.pub_timed(q, b"at", "AT", at)
        j = self.job(q, jid)
        self.assertEqual(j[b"state"], b"delayed")
        self.assertEqual(j[b"due_ms"], at * 1000)
        self.assertEqual(id_time_ms(jid), at * 1000)
        self.assertIsNone(self.consume(q))
        reply, c0, c1 = self.poll_consume(q, until_ms=at * 1000 + LATE_MS + 500)
        self.assertIsNotNone(reply, "not delivered by due + %d ms" % (LATE_MS + 500))
        self.assertDeliveredOnTime(at * 1000, c0, c1, "AT")
        self.assertJobReply(reply, q, jid, b"at", 0, born=(t0, t1), at=(c0, c1))

    def test_publish_pat_future_unix_ms_falls_due_exactly_then(self):
        q = self.q
        pat = int(now_ms()) + 350
        jid, t0, t1 = self.pub_timed(q, b"pat", "PAT", pat)
        j = self.job(q, jid)
        self.assertEqual(j[b"state"], b"delayed")
        self.assertEqual(j[b"due_ms"], pat)
        self.assertEqual(id_time_ms(jid), pat)
        self.assertQstat(q, delayed=1, published_total=1)
        reply, c0, c1 = self.poll_consume(q, until_ms=pat + LATE_MS + 500)
        self.assertIsNotNone(reply, "not delivered by due + %d ms" % (LATE_MS + 500))
        self.assertDeliveredOnTime(pat, c0, c1, "PAT")
        self.assertJobReply(reply, q, jid, b"pat", 0, born=(t0, t1), at=(c0, c1))

    def test_publish_at_and_pat_in_the_past_are_ready_at_once(self):
        q = self.q
        ids = [self.pub(q, b"at0", "AT", 0),
               self.pub(q, b"at-past", "AT", int(time.time()) - 10),
               self.pub(q, b"pat0", "PAT", 0),
               self.pub(q, b"pat-past", "PAT", int(now_ms()) - 1000)]
        for jid in ids:
            self.assertEqual(self.job(q, jid)[b"state"], b"ready", jid)
        self.assertQstat(q, ready=4, published_total=4)
        peek = self.cmd("PEEK", q, "COUNT", 10)
        self.assertEqual([j[1] for j in peek], ids, "ready in publish order")
        for jid, payload in zip(ids, [b"at0", b"at-past", b"pat0", b"pat-past"]):
            self.assertJobReply(self.consume(q), q, jid, payload, 0)

    def test_publish_ttl_sets_ttl_left_and_ttl_0_never_expires(self):
        q = self.q
        a = self.pub(q, b"a", "TTL", 100)
        b = self.pub(q, b"b", "TTL", 0)
        c = self.pub(q, b"c", "TTL", 0, "DELAY", 10)
        peek = self.cmd("PEEK", q, "COUNT", 2)
        self.assertJobReply(peek[0], q, a, b"a", 1, ttl=100)
        self.assertJobReply(peek[1], q, b, b"b", 1, ttl=-1)
        self.assertTtl(self.job(q, a)[b"ttl_left_s"], 100)
        self.assertEqual(self.job(q, b)[b"ttl_left_s"], -1)
        self.assertEqual(self.job(q, c)[b"ttl_left_s"], -1)
        self.assertEqual(self.job(q, c)[b"state"], b"delayed")
        self.assertJobReply(self.consume(q), q, a, b"a", 0, ttl=100)
        self.assertJobReply(self.consume(q), q, b, b"b", 0, ttl=-1)

    def test_ttl_equal_to_delay_is_accepted_and_shorter_is_rejected(self):
        q = self.q
        self.pub(q, b"eq", "DELAY", 5, "TTL", 5)
        self.pub(q, b"eqms", "PDELAY", 1000, "TTL", 1)
        far = int(time.time()) + 100
        self.expect_errors([
            (("PUBLISH", q, "x", "DELAY", 10, "TTL", 5), "ERR ttl is shorter than delay"),
            (("PUBLISH", q, "x", "PDELAY", 1500, "TTL", 1), "ERR ttl is shorter than delay"),
            (("PUBLISH", q, "x", "TTL", 1, "PDELAY", 1001), "ERR ttl is shorter than delay"),
            (("PUBLISH", q, "x", "AT", far, "TTL", 10), "ERR ttl is shorter than delay"),
            (("PUBLISH", q, "x", "PAT", far * 1000, "TTL", 50), "ERR ttl is shorter than delay"),
        ])
        self.assertQstat(q, delayed=2, published_total=2, msg="rejected publishes create nothing")

    def test_ttl_counts_from_publish_not_from_the_due_time(self):
        q = self.q
        jid, t0, t1 = self.pub_timed(q, b"x", "DELAY", 10, "TTL", 100)
        self.assertTtl(self.job(q, jid)[b"ttl_left_s"], 100, "JOB right after PUBLISH DELAY 10 TTL 100")
        q2 = self.q + ".2"
        jid, t0, t1 = self.pub_timed(q2, b"y", "PDELAY", 1000, "TTL", 2)
        due = self.job(q2, jid)[b"due_ms"]
        reply, c0, c1 = self.poll_consume(q2, until_ms=due + LATE_MS + 500)
        self.assertIsNotNone(reply, "not delivered by due + %d ms" % (LATE_MS + 500))
        self.assertDeliveredOnTime(due, c0, c1, "PDELAY 1000")
        self.assertJobReply(reply, q2, jid, b"y", 0, ttl=2, born=(t0, t1), at=(c0, c1),
                            what="PDELAY 1000 TTL 2 delivered about 1 s after publish")

    def test_ttl_expired_job_is_never_delivered_and_counted_expired(self):
        qr, ql = self.q + ".ready", self.q + ".leased"
        r_id, t0, _ = self.pub_timed(qr, b"r", "TTL", 1)
        l_id = self.pub(ql, b"l", "TTL", 1, "TRIES", 2)
        reply, c0, c1 = self.consume_timed(ql, "TTR", 1)
        self.assertJobReply(reply, ql, l_id, b"l", 1, ttl=1)
        # the ttl ends at publish+1 s, the lease at consume+1 s; wait for both (and the pump)
        self.sleep_until(c1 + 1000 + LATE_MS + 100)
        self.assertIsNone(self.consume(qr), "a job whose ttl passed must not be delivered")
        self.assertIsNone(self.consume(ql), "a lease that ends after the ttl must not redeliver")
        self.assertIsNone(self.job(qr, r_id))
        self.assertIsNone(self.job(ql, l_id))
        self.assertQstat(qr, published_total=1, expired_total=1)
        self.assertQstat(ql, published_total=1, consumed_total=1, expired_total=1)

    def test_tries_sets_how_many_deliveries_and_tries_left_counts_down(self):
        qa, qb, qc = self.q + ".a", self.q + ".b", self.q + ".c"
        a = self.pub(qa, b"a", "TRIES", 3)
        b = self.pub(qb, b"b", "TRIES", 65535)
        c = self.pub(qc, b"c", "TRIES", 1)
        self.assertJobReply(self.cmd("PEEK", qa)[0], qa, a, b"a", 3)
        self.assertJobReply(self.cmd("PEEK", qb)[0], qb, b, b"b", 65535)
        self.assertJobReply(self.cmd("PEEK", qc)[0], qc, c, b"c", 1)
        for attempt, left in ((1, 2), (2, 1), (3, 0)):
            self.assertJobReply(self.consume(qa), qa, a, b"a", left, what="attempt %d" % attempt)
            j = self.job(qa, a)
            self.assertEqual((j[b"state"], j[b"attempt"], j[b"tries_left"]),
                             (b"leased", attempt, left))
            self.assertEqual(self.cmd("NACK", qa, a), 1)
            if left:
                self.assertJobReply(self.cmd("PEEK", qa)[0], qa, a, b"a", left, what="NACKed")
        j = self.job(qa, a)
        self.assertEqual((j[b"state"], j[b"attempt"], j[b"tries_left"]), (b"dead", 3, 0))
        self.assertIsNone(self.consume(qa), "delivered at most 3 times")
        self.assertJobReply(self.consume(qb), qb, b, b"b", 65534)
        self.assertJobReply(self.consume(qc), qc, c, b"c", 0)
        self.assertQstat(qa, dead=1, published_total=1, consumed_total=3, dead_total=1)

    def test_publish_id_is_idempotent_while_a_job_holds_it_in_each_state(self):
        qd, qr, ql, qx = (self.q + s for s in (".delayed", ".ready", ".leased", ".dead"))
        self.assertEqual(self.pub(qd, b"first", "ID", "k", "DELAY", 100), b"k")
        self.assertEqual(self.pub(qr, b"first", "ID", "k"), b"k")
        self.assertEqual(self.pub(ql, b"first", "ID", "k", "TRIES", 2), b"k")
        self.assertEqual(self.pub(qx, b"first", "ID", "k"), b"k")
        self.assertJobReply(self.consume(ql), ql, b"k", b"first", 1)
        self.assertJobReply(self.consume(qx), qx, b"k", b"first", 0)
        self.assertEqual(self.cmd("NACK", qx, b"k"), 1)
        states = {qd: b"delayed", qr: b"ready", ql: b"leased", qx: b"dead"}
        for q, state in states.items():
            self.assertEqual(self.job(q, b"k")[b"state"], state, q)
            before = self.qstat(q)
            self.assertEqual(self.pub(q, b"second", "ID", "k"), b"k", q)
            self.assertEqual(self.pub(q, b"third", "ID", "k", "DELAY", 50, "TRIES", 9), b"k", q)
            j = self.job(q, b"k")
            self.assertEqual((j[b"state"], j[b"payload"]), (state, b"first"),
                             "%s: a duplicate PUBLISH ID must change nothing" % q)
            after = self.qstat(q)
            for k in ("ready", "delayed", "leased", "dead"):
                self.assertEqual(after[k], before[k], "%s %s" % (q, k))
        self.assertEqual(self.job(ql, b"k")[b"tries_left"], 1)
        # once the job is finished the id is free again
        self.assertEqual(self.cmd("ACK", qr, b"k"), 1)
        self.assertEqual(self.pub(qr, b"new", "ID", "k"), b"k")
        j = self.job(qr, b"k")
        self.assertEqual((j[b"state"], j[b"payload"], j[b"attempt"]), (b"ready", b"new", 0))
        # the same key in another queue is another job
        self.assertEqual(self.pub(self.q + ".other", b"o", "ID", "k"), b"k")
        self.assertEqual(self.job(self.q + ".other", b"k")[b"payload"], b"o")

    def test_publish_id_keep_holds_the_key_after_the_job_finished(self):
        q = self.q
        self.assertEqual(self.pub(q, b"first", "ID", "charge-7", "KEEP", 2), b"charge-7")
        job = self.consume(q)
        self.assertEqual(self.cmd("ACK", q, job[1]), 1)
        # The retry of a publish that timed out, after the first copy was done: a no-op.
        self.assertEqual(self.pub(q, b"retry", "ID", "charge-7", "KEEP", 2), b"charge-7")
        self.assertIsNone(self.consume(q), "no second copy within the window")
        self.assertIsNone(self.job(q, "charge-7"))
        self.assertQstat(q, published_total=1, consumed_total=1, acked_total=1)
        time.sleep(2.2)
        self.assertEqual(self.pub(q, b"later", "ID", "charge-7", "KEEP", 2), b"charge-7")
        self.assertEqual(self.consume(q)[2], b"later", "after the window the key is free")
        self.expect_errors([
            (("PUBLISH", q, "x", "KEEP", 5), "ERR syntax error"),
            (("PUBLISH", q, "x", "ID", "a", "KEEP", 0), "ERR value is not an integer or out of range"),
            (("PUBLISH", q, "x", "ID", "a", "KEEP", 1, "KEEP", 2), "ERR syntax error"),
        ])

    def test_publish_id_replace_updates_the_job_in_each_state(self):
        qd, qr, ql, qx, qn = (self.q + s for s in (".delayed", ".ready", ".leased", ".dead",
                                                    ".none"))
        # delayed -> replaced by a ready job with new payload, tries, ttl
        self.pub(qd, b"old", "ID", "k", "DELAY", 100)
        self.assertEqual(self.pub(qd, b"new", "ID", "k", "REPLACE", "TRIES", 2, "TTL", 50), b"k")
        j = self.job(qd, b"k")
        self.assertEqual((j[b"state"], j[b"payload"], j[b"tries_left"]), (b"ready", b"new", 2))
        self.assertTtl(j[b"ttl_left_s"], 50)
        self.assertEqual(j[b"attempt"], 0)
        self.assertQstat(qd, ready=1, published_total=2)
        self.assertJobReply(self.consume(qd), qd, b"k", b"new", 1, ttl=50)
        # ready -> replaced by a delayed job
        self.pub(qr, b"old", "ID", "k")
        _, t0, t1 = self.pub_timed(qr, b"new", "ID", "k", "REPLACE", "PDELAY", 300)
        j = self.job(qr, b"k")
        self.assertEqual((j[b"state"], j[b"payload"]), (b"delayed", b"new"))
        due = j[b"due_ms"]
        self.assertTrue(lo(t0) + 300 <= due <= hi(t1) + 300, (due, t0, t1))
        self.assertQstat(qr, delayed=1, published_total=2)
        self.assertIsNone(self.consume(qr))
        reply, c0, c1 = self.poll_consume(qr, until_ms=due + LATE_MS + 500)
        self.assertIsNotNone(reply, "not delivered by due + %d ms" % (LATE_MS + 500))
        self.assertDeliveredOnTime(due, c0, c1, "replaced PDELAY 300")
        self.assertJobReply(reply, qr, b"k", b"new", 0, born=(t0, t1), at=(c0, c1))
        # leased -> the lease is dropped, the new job is scheduled (ready at once)
        self.pub(ql, b"old", "ID", "k", "TRIES", 5)
        self.assertJobReply(self.consume(ql), ql, b"k", b"old", 4)
        self.assertEqual(self.pub(ql, b"new", "ID", "k", "REPLACE"), b"k")
        j = self.job(ql, b"k")
        self.assertEqual((j[b"state"], j[b"payload"], j[b"tries_left"], j[b"attempt"]),
                         (b"ready", b"new", 1, 0))
        self.assertQstat(ql, ready=1, published_total=2, consumed_total=1)
        self.assertEqual(self.cmd("NACK", ql, b"k"), 0, "the old lease is gone")
        self.assertJobReply(self.consume(ql), ql, b"k", b"new", 0)
        # dead -> back to life
        self.pub(qx, b"old", "ID", "k")
        self.consume(qx)
        self.assertEqual(self.cmd("NACK", qx, b"k"), 1)
        self.assertEqual(self.job(qx, b"k")[b"state"], b"dead")
        self.assertEqual(self.pub(qx, b"new", "ID", "k", "REPLACE", "TRIES", 3), b"k")
        j = self.job(qx, b"k")
        self.assertEqual((j[b"state"], j[b"payload"], j[b"tries_left"]), (b"ready", b"new", 3))
        self.assertEqual(self.cmd("DEADLETTER", "SIZE", qx), 0)
        self.assertQstat(qx, ready=1, published_total=2, consumed_total=1, dead_total=1)
        # REPLACE when nothing holds the id just publishes
        self.assertEqual(self.pub(qn, b"only", "ID", "k", "REPLACE"), b"k")
        self.assertEqual(self.job(qn, b"k")[b"payload"], b"only")
        self.assertQstat(qn, ready=1, published_total=1)

    def test_ack_after_replace_of_a_leased_job_completes_the_current_job(self):
        q = self.q
        self.pub(q, b"v1", "ID", "order-7", "TRIES", 3)
        self.assertJobReply(self.consume(q), q, b"order-7", b"v1", 2)
        self.pub(q, b"v2", "ID", "order-7", "REPLACE")
        self.assertEqual(self.cmd("ACK", q, b"order-7"), 1)
        self.assertIsNone(self.job(q, b"order-7"))
        self.assertIsNone(self.consume(q))
        self.assertQstat(q, published_total=2, consumed_total=1, acked_total=1)

    def test_publish_rejects_invalid_job_ids_and_accepts_every_allowed_character(self):
        q = self.q
        bad = [b"", b"a b", b"a/b", b"{a}", b"a*", b"caf\xc3\xa9", b"x" * 201, b"a\x00b",
               b"a\r\nb", b"a,b"]
        self.expect_errors([(("PUBLISH", q, "x", "ID", k), "ERR invalid job id") for k in bad]
                           + [(("PUBLISH", q, "x", "ID", k, "REPLACE"), "ERR invalid job id")
                              for k in bad[:3]])
        self.assertQstat(q, msg="nothing was created")
        good = [b"Az09_.:-", b"y" * 200, b"7", b"order:123", b"-", b"."]
        for k in good:
            self.assertEqual(self.pub(q, b"ok", "ID", k), k)
        self.assertQstat(q, ready=len(good), published_total=len(good))

    def test_publish_payload_up_to_max_payload_is_accepted_and_larger_is_rejected(self):
        q = self.q
        big = bytes(i % 251 for i in range(MAX_PAYLOAD))
        jid = self.pub(q, big)
        self.expect_errors([
            (("PUBLISH", q, b"z" * (MAX_PAYLOAD + 1)), "ERR payload too large"),
            (("PUBLISH", q, b"z" * (MAX_PAYLOAD + 1000), "DELAY", 5), "ERR payload too large"),
        ])
        self.assertQstat(q, ready=1, published_total=1)
        self.assertJobReply(self.consume(q), q, jid, big, 0)

    def test_publish_numeric_options_reject_bad_and_out_of_range_values(self):
        q = self.q
        E = "ERR value is not an integer or out of range"
        cases = []
        for opt in ("DELAY", "PDELAY", "TTL", "EVERY", "BACKOFF"):
            for v in ("-1", "abc", "1.5", "", "1e3", " 1", "99999999999999999999999"):
                cases.append((("PUBLISH", q, "x", opt, v), E))
        for opt in ("AT", "PAT"):
            for v in ("abc", "1.5", "", "1e3", "99999999999999999999999"):
                cases.append((("PUBLISH", q, "x", opt, v, "TTL", 0), E))
        for v in ("0", "65536", "-1", "abc", "2.0", "100000"):
            cases.append((("PUBLISH", q, "x", "TRIES", v), E))
        self.expect_errors(cases)
        self.assertQstat(q, msg="nothing was created")
        self.assertEqual(self.cmd("QUEUES"), [], "a failed PUBLISH creates no queue")

    def test_publish_syntax_errors_for_unknown_option_missing_value_and_two_due_options(self):
        q = self.q
        S = "ERR syntax error"
        cases = [(("PUBLISH", q, "x", "FOO"), S),
                 (("PUBLISH", q, "x", "FOO", "1"), S),
                 (("PUBLISH", q, "x", "TTR", "1"), S),
                 (("PUBLISH", q, "x", "TTL", "5", "BAR"), S)]
        for opt in ("DELAY", "PDELAY", "AT", "PAT", "TTL", "TRIES", "ID", "EVERY", "BACKOFF"):
            cases.append((("PUBLISH", q, "x", opt), S))
            cases.append((("PUBLISH", q, "x", "TRIES", "2", opt), S))
        pat = int(now_ms()) + 5000
        due = {"DELAY": "5", "PDELAY": "5000", "AT": str(pat // 1000), "PAT": str(pat)}
        names = list(due)
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                cases.append((("PUBLISH", q, "x", a, due[a], b, due[b]), S))
                cases.append((("PUBLISH", q, "x", b, due[b], "TTL", "100", a, due[a]), S))
        self.expect_errors(cases)
        self.assertQstat(q, msg="nothing was created")

    def test_command_names_and_options_are_case_insensitive(self):
        q = self.q
        jid = self.cmd("publish", q, b"x", "pdelay", 0, "Tries", 2, "ttl", 30)
        self.assertJobReply(self.cmd("Peek", q, "count", 1)[0], q, jid, b"x", 2, ttl=30)
        self.assertJobReply(self.cmd("consume", q, "ttr", 5, "timeout", 0), q, jid, b"x", 1, ttl=30)
        self.assertEqual(self.cmd("ack", q, jid), 1)


# --------------------------------------------------------------------------------------------
# Errors shared by all job commands
# --------------------------------------------------------------------------------------------

class ArgumentErrorTests(JobTestCase):

    def test_wrong_number_of_arguments_uses_redis_text_with_lowercase_command(self):
        def w(name):
            return "ERR wrong number of arguments for '%s' command" % name
        q = self.q
        self.expect_errors([
            (("PUBLISH",), w("publish")),
            (("PUBLISH", q), w("publish")),
            (("publish", q), w("publish")),
            (("CONSUME",), w("consume")),
            (("ACK",), w("ack")),
            (("ACK", q), w("ack")),
            (("NACK", q), w("nack")),
            (("TOUCH", q), w("touch")),
            (("CANCEL", q), w("cancel")),
            (("JOB", q), w("job")),
            (("JOB", q, "a", "b"), w("job")),
            (("PEEK",), w("peek")),
            (("QSTAT",), w("qstat")),
            (("QSTAT", q, q), w("qstat")),
            (("PURGE",), w("purge")),
            (("PURGE", q, q), w("purge")),
            (("DEADLETTER",), w("deadletter")),
        ])

    def test_invalid_queue_names_are_rejected_by_every_job_command(self):
        E = "ERR invalid queue name"
        bad = [b"", b"a b", b"a/b", b"{q}", b"q*", b"caf\xc3\xa9", b"x" * 201, b"a\x00",
               b"TTR", b"ttr", b"Timeout", b"TIMEOUT", b"count", b"COUNT"]
        cases = []
        for name in bad:
            cases += [
                (("PUBLISH", name, "x"), E),
                (("ACK", name, "id"), E),
                (("NACK", name, "id"), E),
                (("TOUCH", name, "id"), E),
                (("CANCEL", name, "id"), E),
                (("JOB", name, "id"), E),
                (("PEEK", name), E),
                (("QSTAT", name), E),
                (("PURGE", name), E),
                (("DEADLETTER", "SIZE", name), E),
                (("DEADLETTER", "PEEK", name), E),
                (("DEADLETTER", "RESPAWN", name), E),
                (("DEADLETTER", "DELETE", name), E),
            ]
        # CONSUME: a bad name anywhere in the queue list (keywords are options there)
        for name in bad[:8]:
            cases.append((("CONSUME", name), E))
            cases.append((("CONSUME", "good", name, "TIMEOUT", "0"), E))
        self.expect_errors(cases)
        self.assertEqual(self.cmd("QUEUES"), [])
        # the longest valid name, every allowed character
        for name in (b"y" * 200, b"Az09_.:-", b"ttrx", b"counts"):
            jid = self.pub(name, b"ok")
            self.assertJobReply(self.consume(name), name, jid, b"ok", 0)

    def test_consume_option_errors(self):
        q = self.q
        E = "ERR value is not an integer or out of range"
        S = "ERR syntax error"
        F = "ERR timeout is not a float or out of range"
        N = "ERR timeout is negative"
        self.expect_errors([
            (("CONSUME", q, "COUNT", "0"), E),
            (("CONSUME", q, "COUNT", "1001"), E),
            (("CONSUME", q, "COUNT", "-1"), E),
            (("CONSUME", q, "COUNT", "abc"), E),
            (("CONSUME", q, "COUNT", "1.5"), E),
            (("CONSUME", q, "TTR", "-1"), E),
            (("CONSUME", q, "TTR", "abc"), E),
            (("CONSUME", q, "TTR", "1.5"), E),
            (("CONSUME", q, "TTR", "99999999999999999999999"), E),
            (("CONSUME", q, "TIMEOUT", "abc"), F),
            (("CONSUME", q, "TIMEOUT", ""), F),
            (("CONSUME", q, "TIMEOUT", "0.5x"), F),
            (("CONSUME", q, "TIMEOUT", "-1"), N),
            (("CONSUME", q, "TIMEOUT", "-0.5"), N),
            (("CONSUME", q, "COUNT"), S),
            (("CONSUME", q, "TTR"), S),
            (("CONSUME", q, "TIMEOUT"), S),
            (("CONSUME", q, "TTR", "5", "COUNT"), S),
        ])
        # COUNT 1 and COUNT 1000 are in range
        self.assertIsNone(self.consume(q, "COUNT", 1))
        self.assertIsNone(self.consume(q, "COUNT", 1000))

    def test_other_commands_option_errors(self):
        q = self.q
        E = "ERR value is not an integer or out of range"
        S = "ERR syntax error"
        jid = self.pub(q, b"x", "TRIES", 2)
        self.consume(q)
        self.expect_errors([
            (("NACK", q, jid, "DELAY", "-1"), E),
            (("NACK", q, jid, "DELAY", "abc"), E),
            (("NACK", q, jid, "DELAY"), S),
            (("NACK", q, jid, "FOO", "1"), S),
            (("TOUCH", q, jid, "TTR", "-1"), E),
            (("TOUCH", q, jid, "TTR", "x"), E),
            (("TOUCH", q, jid, "TTR"), S),
            (("TOUCH", q, jid, "FOO"), S),
            (("PEEK", q, "COUNT", "0"), E),
            (("PEEK", q, "COUNT", "1001"), E),
            (("PEEK", q, "COUNT", "-1"), E),
            (("PEEK", q, "COUNT", "x"), E),
            (("PEEK", q, "COUNT"), S),
            (("PEEK", q, "FOO", "1"), S),
            (("QUEUES", "MATCH"), S),
            (("QUEUES", "FOO", "*"), S),
            (("DEADLETTER", "PEEK", q, "COUNT", "-1"), E),
            (("DEADLETTER", "PEEK", q, "COUNT", "x"), E),
            (("DEADLETTER", "RESPAWN", q, "COUNT", "-1"), E),
            (("DEADLETTER", "RESPAWN", q, "COUNT", "x"), E),
            (("DEADLETTER", "RESPAWN", q, "TTL", "-1"), E),
            (("DEADLETTER", "RESPAWN", q, "TTL", "x"), E),
            (("DEADLETTER", "DELETE", q, "COUNT", "-1"), E),
            (("DEADLETTER", "DELETE", q, "COUNT", "x"), E),
            (("DEADLETTER", "DELETE", q, "COUNT"), S),
            (("DEADLETTER", "DELETE", q, "ID"), S),
            (("DEADLETTER", "RESPAWN", q, "FOO", "1"), S),
            (("DEADLETTER", "RESPAWN", q, "ID"), S),
            (("DEADLETTER", "RESPAWN", q, "ID", "a", "COUNT", "2"), S),
            (("DEADLETTER", "RESPAWN", q, "COUNT", "2", "ID", "a"), S),
            (("DEADLETTER", "RESPAWN", q, "ID", "a", "ID", "b"), S),
            (("DEADLETTER", "RESPAWN", q, "ID", "bad id"), "ERR invalid job id"),
        ])
        j = self.job(q, jid)
        self.assertEqual((j[b"state"], j[b"tries_left"]), (b"leased", 1),
                         "rejected commands must not change the job")


if __name__ == "__main__":
    sys.exit(main(__name__))
