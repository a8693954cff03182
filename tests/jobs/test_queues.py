#!/usr/bin/python3
"""Queue commands (QSTAT / QUEUES / PURGE / DEADLETTER) and the patterns built on jobs:
request/reply, EVERY, BACKOFF (docs/commands.md).

A part of the job suite: see jobcase.py (run every part with test_jobs.py)."""

import datetime
import sys
import time
import zoneinfo

import redis

from jobcase import (DEFAULT_TTL, hi, JobTestCase, LATE_MS, lo, main, now_ms)


# --------------------------------------------------------------------------------------------
# QSTAT / QUEUES / PURGE / DEADLETTER
# --------------------------------------------------------------------------------------------

class QueueTests(JobTestCase):

    def test_qstat_counts_are_exact_after_each_step(self):
        q = self.q
        self.assertQstat(q)
        a = self.pub(q, b"a")
        self.assertQstat(q, ready=1, published_total=1)
        b = self.pub(q, b"b", "TRIES", 2)
        self.pub(q, b"c", "DELAY", 100)
        self.assertQstat(q, ready=2, delayed=1, published_total=3)
        self.assertEqual(self.consume(q)[1], a)
        self.assertQstat(q, ready=1, delayed=1, leased=1, published_total=3, consumed_total=1)
        self.cmd("ACK", q, a)
        self.assertQstat(q, ready=1, delayed=1, published_total=3, consumed_total=1, acked_total=1)
        self.assertEqual(self.consume(q)[1], b)
        self.cmd("NACK", q, b)
        self.assertQstat(q, ready=1, delayed=1, published_total=3, consumed_total=2,
                         acked_total=1)
        self.assertEqual(self.consume(q)[1], b)
        self.cmd("NACK", q, b)
        self.assertQstat(q, delayed=1, dead=1, published_total=3, consumed_total=3,
                         acked_total=1, dead_total=1)
        self.cmd("DEADLETTER", "RESPAWN", q)
        self.assertQstat(q, ready=1, delayed=1, published_total=3, consumed_total=3,
                         acked_total=1, dead_total=1)
        self.cmd("PUBLISH", q, b"e", "TTL", 1)
        self.assertQstat(q, ready=2, delayed=1, published_total=4, consumed_total=3,
                         acked_total=1, dead_total=1)
        self.cmd("CANCEL", q, b)
        self.assertQstat(q, ready=1, delayed=1, published_total=4, consumed_total=3,
                         acked_total=1, dead_total=1)

    def test_a_queue_that_never_had_a_job_is_not_an_error(self):
        q = self.q
        self.assertQstat(q)
        self.assertEqual(self.raw.call_bytes("PEEK", q), b"*0\r\n")
        self.assertEqual(self.cmd("PEEK", q, "COUNT", 10), [])
        self.assertEqual(self.cmd("DEADLETTER", "SIZE", q), 0)
        self.assertEqual(self.cmd("DEADLETTER", "PEEK", q), [])
        self.assertEqual(self.cmd("DEADLETTER", "RESPAWN", q), 0)
        self.assertEqual(self.cmd("DEADLETTER", "DELETE", q), 0)
        self.assertEqual(self.cmd("PURGE", q), 0)
        self.assertEqual(self.cmd("ACK", q, "x"), 0)
        self.assertEqual(self.cmd("CANCEL", q, "x"), 0)
        self.assertIsNone(self.consume(q))
        self.assertIsNone(self.cmd("JOB", q, "x"))
        self.assertEqual(self.cmd("QUEUES"), [], "only PUBLISH creates a queue")

    def test_queues_lists_queues_holding_jobs_and_match_filters_with_a_glob(self):
        names = ["jobs.mail", "jobs.sms", "other:x", "jobsX"]
        for n in names:
            self.pub(n, b"x")
        self.assertEqual(sorted(self.cmd("QUEUES")), sorted(n.encode() for n in names))
        self.assertEqual(sorted(self.cmd("QUEUES", "MATCH", "jobs.*")), [b"jobs.mail", b"jobs.sms"])
        self.assertEqual(self.cmd("QUEUES", "MATCH", "*:x"), [b"other:x"])
        self.assertEqual(self.cmd("QUEUES", "MATCH", "jobs?"), [b"jobsX"])
        self.assertEqual(self.cmd("QUEUES", "MATCH", "nothing*"), [])
        self.assertEqual(sorted(self.cmd("queues", "match", "*")), sorted(n.encode() for n in names))
        # a queue with only a dead or only a delayed job is listed; an emptied one is not
        jid = self.consume("jobs.sms")[1]
        self.cmd("NACK", "jobs.sms", jid)
        self.cmd("PUBLISH", "delayed.only", b"x", "DELAY", 100)
        jid = self.consume("other:x")[1]
        self.assertEqual(self.cmd("ACK", "other:x", jid), 1)
        self.assertEqual(sorted(self.cmd("QUEUES")),
                         [b"delayed.only", b"jobs.mail", b"jobs.sms", b"jobsX"])
        # consuming (even blocking) or asking about a queue does not create it
        self.assertIsNone(self.consume("ghost", "TIMEOUT", "0.1"))
        self.cmd("QSTAT", "ghost2")
        self.cmd("PEEK", "ghost3")
        self.assertNotIn(b"ghost", self.cmd("QUEUES"))
        self.assertEqual(self.cmd("QUEUES", "MATCH", "ghost*"), [])

    def test_queues_are_per_namespace(self):
        other = self.raw_client()
        self.assertEqual(other.call("AUTH", "teamb", "anything"), b"OK")
        self.assertIsInstance(other.call("PUBLISH", "shared", "from-b"), bytes)
        self.assertIsInstance(other.call("PUBLISH", "only-b", "x"), bytes)
        self.pub("shared", b"from-default")
        self.assertEqual(sorted(self.cmd("QUEUES")), [b"shared"])
        self.assertEqual(sorted(other.call("QUEUES")), [b"only-b", b"shared"])
        self.assertEqual(self.consume("shared")[2], b"from-default")
        self.assertIsNone(self.consume("shared"))
        self.assertEqual(other.call("CONSUME", "shared")[2], b"from-b")

    def test_purge_removes_every_job_in_every_state(self):
        q = self.q
        leased = self.pub(q, b"l", "TRIES", 2)
        dead = self.pub(q, b"x")
        self.pub(q, b"r")
        self.pub(q, b"d", "DELAY", 100)
        self.assertEqual(self.consume(q)[1], leased)
        self.assertEqual(self.consume(q)[1], dead)
        self.assertEqual(self.cmd("NACK", q, dead), 1)
        self.assertQstat(q, ready=1, delayed=1, leased=1, dead=1, published_total=4,
                         consumed_total=2, dead_total=1)
        self.assertEqual(self.cmd("PURGE", q), 4)
        st = self.qstat(q)
        self.assertEqual((st["ready"], st["delayed"], st["leased"], st["dead"]), (0, 0, 0, 0))
        self.assertEqual(self.cmd("DEADLETTER", "SIZE", q), 0)
        self.assertIsNone(self.job(q, leased))
        self.assertEqual(self.cmd("ACK", q, leased), 0)
        self.assertEqual(self.cmd("TOUCH", q, leased), 0)
        self.assertEqual(self.cmd("PURGE", q), 0)
        self.assertEqual(self.cmd("QUEUES"), [])
        self.assertIsNone(self.consume(q))
        jid = self.pub(q, b"after")
        self.assertJobReply(self.consume(q), q, jid, b"after", 0, what="queue usable after PURGE")

    def _kill(self, q, n, tries=1):
        """Publishes n jobs and runs each out of tries; returns their ids in order of death."""
        ids = []
        for i in range(n):
            jid = self.pub(q, b"dead%d" % i, "TRIES", tries)
            for _ in range(tries):
                self.assertEqual(self.consume(q)[1], jid)
                self.assertEqual(self.cmd("NACK", q, jid), 1)
            ids.append(jid)
        return ids

    def test_deadletter_size_and_peek_in_order_of_death(self):
        q = self.q
        ids = self._kill(q, 3)
        self.assertEqual(self.cmd("DEADLETTER", "SIZE", q), 3)
        peek = self.cmd("DEADLETTER", "PEEK", q)
        self.assertEqual(len(peek), 1, "DEADLETTER PEEK defaults to COUNT 1: %r" % peek)
        self.assertJobReply(peek[0], q, ids[0], b"dead0", 0)
        peek = self.cmd("DEADLETTER", "PEEK", q, "COUNT", 10)
        self.assertEqual(len(peek), 3)
        for i, j in enumerate(peek):
            self.assertJobReply(j, q, ids[i], b"dead%d" % i, 0)
        self.assertEqual(self.cmd("DEADLETTER", "SIZE", q), 3, "PEEK changes nothing")
        # order of death, not of publish
        q2 = self.q + ".2"
        first = self.pub(q2, b"first")
        second = self.pub(q2, b"second")
        self.consume(q2)
        self.consume(q2)
        self.cmd("NACK", q2, second)
        self.cmd("NACK", q2, first)
        self.assertEqual([j[1] for j in self.cmd("DEADLETTER", "PEEK", q2, "COUNT", 2)],
                         [second, first])

    def test_deadletter_respawn_moves_oldest_back_to_ready_with_tries_1_and_ttl(self):
        q = self.q
        ids = self._kill(q, 4, tries=2)
        self.assertEqual(self.cmd("DEADLETTER", "RESPAWN", q), 1, "default COUNT 1")
        self.assertEqual(self.cmd("DEADLETTER", "SIZE", q), 3)
        j = self.job(q, ids[0])
        self.assertEqual((j[b"state"], j[b"tries_left"]), (b"ready", 1))
        self.assertTtl(j[b"ttl_left_s"], DEFAULT_TTL, "ttl reset to the default")
        self.assertJobReply(self.cmd("PEEK", q)[0], q, ids[0], b"dead0", 1)
        self.assertEqual(self.cmd("DEADLETTER", "RESPAWN", q, "COUNT", 2, "TTL", 50), 2)
        peek = self.cmd("PEEK", q, "COUNT", 10)
        self.assertEqual(sorted(j[1] for j in peek), sorted(ids[:3]))
        for j in peek[1:]:
            self.assertEqual(j[3], 1)
            self.assertTtl(j[4], 50)
        self.assertEqual(self.cmd("DEADLETTER", "RESPAWN", q, "COUNT", 10), 1, "only one left")
        self.assertEqual(self.cmd("DEADLETTER", "SIZE", q), 0)
        self.assertQstat(q, ready=4, published_total=4, consumed_total=8, dead_total=4)
        reply = self.consume(q)
        self.assertJobReply(reply, q, ids[0], b"dead0", 0, what="respawned job is deliverable")
        self.cmd("NACK", q, ids[0])
        self.assertEqual(self.job(q, ids[0])[b"state"], b"dead", "tries 1 only")

    def test_deadletter_delete_oldest_count_and_by_id(self):
        q = self.q
        ids = self._kill(q, 5)
        self.assertEqual(self.cmd("DEADLETTER", "DELETE", q), 1, "default COUNT 1")
        self.assertIsNone(self.job(q, ids[0]), "the oldest was deleted")
        self.assertEqual(self.cmd("DEADLETTER", "DELETE", q, "ID", ids[3]), 1)
        self.assertIsNone(self.job(q, ids[3]))
        self.assertEqual(self.cmd("DEADLETTER", "DELETE", q, "ID", ids[3]), 0)
        self.assertEqual(self.cmd("DEADLETTER", "DELETE", q, "ID", "nosuch"), 0)
        self.assertEqual([j[1] for j in self.cmd("DEADLETTER", "PEEK", q, "COUNT", 10)],
                         [ids[1], ids[2], ids[4]])
        self.assertEqual(self.cmd("DEADLETTER", "DELETE", q, "COUNT", 2), 2)
        self.assertEqual([j[1] for j in self.cmd("DEADLETTER", "PEEK", q, "COUNT", 10)], [ids[4]])
        self.assertEqual(self.cmd("DEADLETTER", "DELETE", q, "COUNT", 10), 1)
        self.assertEqual(self.cmd("DEADLETTER", "SIZE", q), 0)
        live = self.pub(q, b"live")
        self.assertEqual(self.cmd("DEADLETTER", "DELETE", q, "ID", live), 0,
                         "a job that is not dead is not in the dead letter")
        self.assertEqual(self.job(q, live)[b"state"], b"ready")
        self.assertQstat(q, ready=1, published_total=6, consumed_total=5, dead_total=5)

    def test_browse_lists_delayed_and_leased_jobs_in_due_order_and_counts_what_falls_due(self):
        q = self.q
        now = int(time.time() * 1000)
        later = self.pub(q, b"in 4000 s", "DELAY", 4000)
        soon = self.pub(q, b"in 10 s", "DELAY", 10, "TRIES", 3)
        mid = self.pub(q, b"m" * 1000, "DELAY", 100)
        near = self.pub(q, b"in 3 s", "DELAY", 3)  # staged by the pump's look-ahead soon
        leased = self.pub(q, b"now")
        self.assertEqual(self.consume(q, "TTR", 30)[1], leased)
        time.sleep(1.2)
        jobs = self.cmd("BROWSE", q, "DELAYED")
        self.assertEqual([j[0] for j in jobs], [near, soon, mid, later])
        self.assertEqual(jobs[1][2:], [b"in 10 s", 7, 3, 0])
        self.assertEqual((jobs[2][2], jobs[2][3]), (b"m" * 200, 1000), "payload: its head")
        for j, delay in zip(jobs, (3, 10, 100, 4000)):
            self.assertLessEqual(abs(j[1] - (now + delay * 1000)), 1500, j)
        # Pages: COUNT, then FROM the last due time shown plus 1 ms.
        first = self.cmd("BROWSE", q, "DELAYED", "COUNT", 2)
        self.assertEqual([j[0] for j in first], [near, soon])
        rest = self.cmd("BROWSE", q, "DELAYED", "FROM", first[-1][1] + 1, "COUNT", 10)
        self.assertEqual([j[0] for j in rest], [mid, later])
        lease = self.cmd("BROWSE", q, "LEASED")
        self.assertEqual([j[0] for j in lease], [leased])
        self.assertLessEqual(abs(lease[0][1] - (now + 30000)), 1500)
        self.assertEqual(self.cmd("BROWSE", q, "LEASED", "FROM", lease[0][1] + 1), [])
        due = self.cmd("BROWSE", q, "DUE", "STEP", 60, "STEPS", 3)
        due = dict(zip(due[0::2], due[1::2]))
        self.assertEqual((due[b"step_ms"], due[b"counts"], due[b"later"], due[b"complete"]),
                         (60000, [2, 1, 0], 1, 1))
        self.assertLessEqual(abs(due[b"from_ms"] - now), 5000)
        due = self.cmd("BROWSE", q, "DUE", "STEP", 3600, "STEPS", 2)
        self.assertEqual(dict(zip(due[0::2], due[1::2]))[b"counts"], [3, 1])
        self.assertEqual(self.cmd("BROWSE", "nothing-" + q, "DELAYED"), [])
        # Bad input: a clear error, nothing read.
        for args, error in (((q, "READY"), "ERR syntax error"),
                            ((q, "DELAYED", "COUNT", 0), "ERR value is not an integer or out of range"),
                            ((q, "DELAYED", "COUNT", 1001), "ERR value is not an integer or out of range"),
                            ((q, "DELAYED", "FROM", -1), "ERR value is not an integer or out of range"),
                            ((q, "DELAYED", "STEP", 60), "ERR syntax error"),
                            ((q, "DUE", "COUNT", 5), "ERR syntax error"),
                            ((q, "DUE", "STEPS", 1001), "ERR value is not an integer or out of range"),
                            ((q, "DUE", "STEP", 0), "ERR value is not an integer or out of range"),
                            ((q, "DELAYED", "COUNT", 1, "COUNT", 2), "ERR syntax error"),
                            ((q, "DELAYED", "COUNT"), "ERR syntax error"),
                            (("bad name", "DELAYED"), "ERR invalid queue name")):
            with self.assertRaises(redis.ResponseError, msg=args) as e:
                self.cmd("BROWSE", *args)
            self.assertEqual("ERR " + str(e.exception), error, args)

    def test_deadletter_respawn_by_id(self):
        q = self.q
        ids = self._kill(q, 4, tries=2)
        self.assertEqual(self.cmd("DEADLETTER", "RESPAWN", q, "ID", ids[2], "TTL", 50), 1)
        j = self.job(q, ids[2])
        self.assertEqual((j[b"state"], j[b"tries_left"], j[b"last_error"]), (b"ready", 1, None))
        self.assertTtl(j[b"ttl_left_s"], 50)
        self.assertEqual(self.cmd("DEADLETTER", "RESPAWN", q, "ID", ids[2]), 0, "not dead now")
        self.assertEqual(self.cmd("DEADLETTER", "RESPAWN", q, "ID", "nosuch"), 0)
        self.assertEqual([j[1] for j in self.cmd("DEADLETTER", "PEEK", q, "COUNT", 10)],
                         [ids[0], ids[1], ids[3]], "the others stay, in order")
        self.assertEqual(self.cmd("DEADLETTER", "SIZE", q), 3)
        reply = self.consume(q)
        self.assertEqual((reply[1], reply[2], reply[3]), (ids[2], b"dead2", 0),
                         "the respawned job is deliverable")
        self.cmd("ACK", q, ids[2])
        self.assertEqual(self.cmd("DEADLETTER", "RESPAWN", q, "ID", ids[0]), 1,
                         "the oldest, by id too")
        self.assertEqual([j[1] for j in self.cmd("DEADLETTER", "PEEK", q, "COUNT", 10)],
                         [ids[1], ids[3]])
        self.assertQstat(q, ready=1, dead=2, published_total=4, consumed_total=9, acked_total=1,
                         dead_total=4)

    def test_tries_run_out_to_dead_letter_then_respawn_makes_it_deliverable(self):
        q = self.q
        jid = self.pub(q, b"work", "TRIES", 2)
        self.assertJobReply(self.consume(q, "TTR", 1), q, jid, b"work", 1)
        self.cmd("NACK", q, jid)
        self.assertJobReply(self.consume(q), q, jid, b"work", 0)
        self.cmd("NACK", q, jid)
        self.assertIsNone(self.consume(q))
        self.assertEqual(self.cmd("DEADLETTER", "SIZE", q), 1)
        self.assertEqual(self.cmd("DEADLETTER", "RESPAWN", q, "TTL", 60), 1)
        self.assertJobReply(self.consume(q), q, jid, b"work", 0, ttl=60)
        self.assertEqual(self.cmd("ACK", q, jid), 1)
        self.assertQstat(q, published_total=1, consumed_total=3, acked_total=1, dead_total=1)

    def test_nack_reason_and_expired_leases_stay_with_the_job(self):
        q = self.q
        jid = self.pub(q, b"mail", "TRIES", 3)
        self.consume(q, "TTR", 30)
        t0 = now_ms()
        self.assertEqual(self.cmd("NACK", q, jid, "REASON", "smtp down: 421 \u2709"), 1)
        j = self.job(q, jid)
        self.assertEqual((j[b"state"], j[b"last_error"], j[b"last_error_attempt"]),
                         (b"ready", "smtp down: 421 \u2709".encode(), 1))
        self.assertTrue(lo(t0) <= j[b"last_error_ms"] <= hi(now_ms()))
        self.consume(q, "TTR", 1)  # attempt 2's lease expires: recorded as such
        self.assertEqual(self.consume(q, "TTR", 30, "TIMEOUT", 5)[5], 3)
        j = self.job(q, jid)
        self.assertEqual((j[b"state"], j[b"last_error"], j[b"last_error_attempt"]),
                         (b"leased", b"lease expired", 2))
        # 510 bytes and a 3-byte character: cut before the character, at 510 bytes.
        self.assertEqual(self.cmd("NACK", q, jid, "DELAY", 0, "REASON", "x" * 510 + "\u2709"), 1)
        dead = self.cmd("DEADLETTER", "PEEK", q, "WITHERRORS")
        self.assertEqual(len(dead[0]), 10, dead)
        self.assertEqual((dead[0][1], dead[0][7], dead[0][8]), (jid, b"x" * 510, 3))
        self.assertEqual(self.cmd("DEADLETTER", "PEEK", q, "COUNT", 5)[0][:7][1], jid,
                         "without WITHERRORS a dead job is the usual 7 fields")
        self.assertEqual(len(self.cmd("DEADLETTER", "PEEK", q)[0]), 7)

    def test_an_expired_lease_is_the_recorded_reason_of_a_dead_job(self):
        q = self.q
        jid = self.pub(q, b"slow", "TRIES", 1)
        self.consume(q, "TTR", 1)
        deadline = time.time() + 5
        while self.cmd("DEADLETTER", "SIZE", q) == 0 and time.time() < deadline:
            time.sleep(0.1)
        dead = self.cmd("DEADLETTER", "PEEK", q, "WITHERRORS", "COUNT", 1)
        self.assertEqual((dead[0][1], dead[0][7], dead[0][8]), (jid, b"lease expired", 1))
        # A job that never failed has none; respawning forgets it; an ACK takes it along.
        ok = self.pub(q, b"fine")
        self.assertEqual((self.job(q, ok)[b"last_error"], self.job(q, ok)[b"last_error_attempt"]),
                         (None, 0))
        self.assertEqual(self.cmd("DEADLETTER", "RESPAWN", q), 1)
        self.assertIsNone(self.job(q, jid)[b"last_error"])

    def test_nack_keeptry_snoozes_without_spending_a_try(self):
        q = self.q
        jid = self.pub(q, b"payment", "BACKOFF", 60)  # one try; a failure would wait 60 s
        for n in (1, 2):
            self.assertEqual(self.consume(q)[5], n)
            self.assertEqual(self.cmd("NACK", q, jid, "KEEPTRY"), 1)  # ready at once: no BACKOFF
        job = self.consume(q)
        self.assertEqual((job[3], job[5]), (0, 3), "still its one try; the third delivery")
        self.assertEqual(self.cmd("NACK", q, jid, "DELAY", 1, "KEEPTRY"), 1)
        j = self.job(q, jid)
        self.assertEqual((j[b"state"], j[b"tries_left"], j[b"last_error"]), (b"delayed", 1, None))
        job = self.consume(q, "TIMEOUT", 5)
        self.assertEqual((job[1], job[5]), (jid, 4))
        self.assertEqual(self.cmd("ACK", q, jid), 1)
        self.assertQstat(q, published_total=1, consumed_total=4, acked_total=1, dead_total=0)

    def test_nack_reason_and_witherrors_errors(self):
        q = self.q
        jid = self.pub(q, b"x")
        self.expect_errors([
            (("NACK", q, jid, "REASON"), "ERR syntax error"),
            (("NACK", q, jid, "REASON", "a", "REASON", "b"), "ERR syntax error"),
            (("NACK", q, jid, "DELAY", 1, "DELAY", 2), "ERR syntax error"),
            (("NACK", q, jid, "KEEPTRY", "KEEPTRY"), "ERR syntax error"),
            (("NACK", q, jid, "KEEPTRY", "DELAY"), "ERR syntax error"),
            (("NACK", q, jid, "DELAY", "soon", "REASON", "a"),
             "ERR value is not an integer or out of range"),
            (("DEADLETTER", "PEEK", q, "WITHERRORS", "WITHERRORS"), "ERR syntax error"),
            (("DEADLETTER", "PEEK", q, "COUNT"), "ERR syntax error"),
            (("DEADLETTER", "PEEK", q, "COUNT", 0, "WITHERRORS"),
             "ERR value is not an integer or out of range"),
        ])
        self.assertEqual(self.cmd("NACK", q, jid, "REASON", "not leased"), 0)
        self.assertIsNone(self.job(q, jid)[b"last_error"], "a NACK that changed nothing")


# --------------------------------------------------------------------------------------------
# Request/reply, EVERY, BACKOFF
# --------------------------------------------------------------------------------------------

class PatternTests(JobTestCase):

    def test_request_reply_over_a_queue_named_after_the_job_id(self):
        work = self.q
        producer = self.client()
        jid = self.pub(work, b"2+2", client=producer)
        waiter = self.consumer("CONSUME", jid, "TIMEOUT", 5)
        waiter.start()
        worker = self.client()
        job = self.consume(work, client=worker)
        self.assertJobReply(job, work, jid, b"2+2", 0)
        time.sleep(0.1)
        self.assertTrue(waiter.is_alive())
        answer_id = self.pub(job[1], b"4", client=worker)
        self.assertEqual(self.cmd("ACK", work, jid, client=worker), 1)
        reply = waiter.finish()
        self.assertJobReply(reply, jid, answer_id, b"4", 0)
        self.assertEqual(self.cmd("ACK", jid, answer_id, client=producer), 1)
        self.assertEqual(self.cmd("QUEUES"), [])

    def _first_occurrence(self, q, payload, *opts):
        """PUBLISH a recurring job due 100 ms from now (PAT) and lease its first occurrence.
        Returns (id, first due, reply)."""
        p0 = int(now_ms()) + 100
        jid = self.pub(q, payload, "PAT", p0, *opts)
        reply, c0, c1 = self.poll_consume(q, until_ms=p0 + LATE_MS + 500)
        self.assertIsNotNone(reply, "first occurrence never delivered")
        self.assertDeliveredOnTime(p0, c0, c1, "first occurrence")
        return jid, p0, reply

    def test_every_reschedules_on_ack_at_previous_due_plus_interval_never_before(self):
        q = self.q
        p0 = int(now_ms()) + 150
        jid = self.pub(q, b"tick", "PAT", p0, "EVERY", 1)
        j = self.job(q, jid)
        self.assertEqual((j[b"state"], j[b"every_s"], j[b"due_ms"]), (b"delayed", 1, p0))
        reply, c0, c1 = self.poll_consume(q, until_ms=p0 + LATE_MS + 500)
        self.assertJobReply(reply, q, jid, b"tick", 0)
        self.assertDeliveredOnTime(p0, c0, c1, "first occurrence")
        self.assertEqual(self.cmd("ACK", q, jid), 1)
        j = self.job(q, jid)
        self.assertEqual((j[b"state"], j[b"due_ms"], j[b"attempt"]), (b"delayed", p0 + 1000, 0),
                         "next occurrence = previous due + 1 s; same id")
        self.assertQstat(q, delayed=1, published_total=1, consumed_total=1, acked_total=1,
                         schedules=1)
        reply, c0, c1 = self.poll_consume(q, until_ms=p0 + 1000 + LATE_MS + 500)
        self.assertJobReply(reply, q, jid, b"tick", 0, born=(p0 + 1000, p0 + 1000))
        self.assertDeliveredOnTime(p0 + 1000, c0, c1, "second occurrence")
        self.assertEqual(self.cmd("ACK", q, jid), 1)
        self.assertEqual(self.job(q, jid)[b"due_ms"], p0 + 2000)
        self.assertEqual(self.cmd("CANCEL", q, jid), 1)

    def test_every_skips_occurrences_already_past_at_ack_time(self):
        q = self.q
        jid, p0, reply = self._first_occurrence(q, b"tick", "EVERY", 1)
        self.assertJobReply(reply, q, jid, b"tick", 0)
        self.sleep_until(p0 + 2500)
        self.assertEqual(self.cmd("ACK", q, jid), 1)
        j = self.job(q, jid)
        self.assertEqual((j[b"state"], j[b"due_ms"]), (b"delayed", p0 + 3000),
                         "p0+1s and p0+2s are past at ACK time; next is p0+3s")
        self.assertEqual(self.cmd("CANCEL", q, jid), 1)

    def test_every_occurrence_gets_full_tries_and_ttl_from_its_due_time(self):
        q = self.q
        jid, p0, reply = self._first_occurrence(q, b"tick", "EVERY", 2, "TRIES", 2, "TTL", 2)
        self.assertJobReply(reply, q, jid, b"tick", 1, ttl=2)
        self.assertEqual(self.cmd("NACK", q, jid), 1)
        self.assertJobReply(self.consume(q), q, jid, b"tick", 0, ttl=2, born=(p0, p0))
        self.assertEqual(self.cmd("ACK", q, jid), 1)
        j = self.job(q, jid)
        self.assertEqual((j[b"state"], j[b"due_ms"], j[b"tries_left"], j[b"every_s"]),
                         (b"delayed", p0 + 2000, 2, 2))
        reply, c0, c1 = self.poll_consume(q, until_ms=p0 + 2000 + LATE_MS + 500)
        self.assertIsNotNone(reply, "the second occurrence's TTL counts from its due time, "
                                    "so it must not have expired")
        self.assertDeliveredOnTime(p0 + 2000, c0, c1, "second occurrence")
        self.assertJobReply(reply, q, jid, b"tick", 1, ttl=2, what="full tries again",
                            born=(p0 + 2000, p0 + 2000))
        self.assertEqual(self.job(q, jid)[b"attempt"], 1)
        self.assertEqual(self.cmd("CANCEL", q, jid), 1)

    def test_cancel_stops_a_recurring_job_for_good(self):
        qa, qb = self.q + ".leased", self.q + ".delayed"
        a, p0, reply = self._first_occurrence(qa, b"a", "EVERY", 1, "ID", "cron-a")
        self.assertEqual(a, b"cron-a")
        b, pb, reply = self._first_occurrence(qb, b"b", "EVERY", 1)
        self.assertEqual(self.cmd("ACK", qb, b), 1)
        self.assertEqual(self.job(qb, b)[b"state"], b"delayed")
        self.assertEqual(self.cmd("CANCEL", qa, a), 1, "cancel while leased")
        self.assertEqual(self.cmd("CANCEL", qb, b), 1, "cancel between occurrences")
        self.assertEqual(self.cmd("ACK", qa, a), 0)
        self.sleep_until(pb + 1000 + LATE_MS + 100)
        self.assertIsNone(self.consume(qa, qb))
        self.assertIsNone(self.job(qa, a))
        self.assertIsNone(self.job(qb, b))
        self.assertEqual(self.cmd("QUEUES"), [])

    def test_every_occurrence_out_of_tries_dies_as_its_own_job_and_the_schedule_goes_on(self):
        for q, opts in ((self.q, ()), (self.q + ".custom", ("ID", "cron-x"))):
            jid, p0, reply = self._first_occurrence(q, b"tick", "EVERY", 1, *opts)
            self.assertEqual(self.cmd("NACK", q, jid, "REASON", "down"), 1)
            j = self.job(q, jid)
            self.assertEqual((j[b"state"], j[b"due_ms"], j[b"tries_left"], j[b"last_error"]),
                             (b"delayed", p0 + 1000, 1, None), "the next occurrence, afresh")
            [dead] = self.cmd("DEADLETTER", "PEEK", q, "WITHERRORS")
            copy = dead[1]
            self.assertNotEqual(copy, jid, "the dead occurrence has an id of its own")
            self.assertEqual((dead[2], dead[3], dead[7], dead[8]), (b"tick", 0, b"down", 1))
            jc = self.job(q, copy)
            self.assertEqual((jc[b"state"], jc[b"every_s"], jc[b"last_error"]),
                             (b"dead", 0, b"down"))
            # The schedule goes on: the next occurrence is delivered on time.
            reply, c0, c1 = self.poll_consume(q, until_ms=p0 + 1000 + LATE_MS + 500)
            self.assertIsNotNone(reply, "the next occurrence never came")
            self.assertDeliveredOnTime(p0 + 1000, c0, c1, "next occurrence")
            self.assertEqual(reply[1], jid)
            self.assertEqual(self.cmd("ACK", q, jid), 1)
            # The copy is a one-off job: respawned, delivered, acked, gone.
            self.assertEqual(self.cmd("DEADLETTER", "RESPAWN", q), 1)
            reply = self.consume(q)
            self.assertEqual((reply[1], reply[2]), (copy, b"tick"))
            self.assertEqual(self.cmd("ACK", q, copy), 1)
            self.assertIsNone(self.job(q, copy))
            self.assertEqual(self.cmd("CANCEL", q, jid), 1)

    def test_cron_runs_on_the_wall_clock_of_its_zone_with_generated_and_custom_ids(self):
        q = self.q
        # Every second, in Paris: each occurrence on a whole second, the next after the ACK.
        t0 = now_ms()
        jid = self.pub(q, b"tick", "CRON", "* * * * * *", "TZ", "Europe/Paris")
        j = self.job(q, jid)
        self.assertEqual((j[b"state"], j[b"cron"], j[b"tz"], j[b"every_s"]),
                         (b"delayed", b"* * * * * *", b"Europe/Paris", 0))
        due = j[b"due_ms"]
        self.assertEqual(due % 1000, 0)
        self.assertTrue(lo(t0) < due <= hi(t0) + 1000, "the first whole second after PUBLISH")
        for n in range(2):
            reply, c0, c1 = self.poll_consume(q, until_ms=due + LATE_MS + 500)
            self.assertIsNotNone(reply, "occurrence %d never came" % n)
            self.assertDeliveredOnTime(due, c0, c1, "occurrence %d" % n)
            self.assertEqual(reply[1], jid)
            a0 = now_ms()
            self.assertEqual(self.cmd("ACK", q, jid), 1)
            nxt = self.job(q, jid)[b"due_ms"]
            self.assertTrue(nxt % 1000 == 0 and lo(a0) < nxt <= hi(now_ms()) + 1000,
                            "the first whole second after the ACK: %d (ack at %d)" % (nxt, a0))
            due = nxt
        self.assertEqual(self.cmd("CANCEL", q, jid), 1)
        # A custom id, daily at 02:30 in New York: the same instant Python's zoneinfo finds.
        zone = zoneinfo.ZoneInfo("America/New_York")
        jid = self.pub(q, b"nightly", "ID", "nightly", "CRON", "30 2 * * *", "TZ",
                       "America/New_York")
        self.assertEqual(jid, b"nightly")
        local = datetime.datetime.now(zone)
        want = local.replace(hour=2, minute=30, second=0, microsecond=0)
        if want <= local:
            want = (want + datetime.timedelta(days=1)).replace(hour=2, minute=30)
        j = self.job(q, jid)
        self.assertEqual((j[b"due_ms"], j[b"cron"], j[b"tz"]),
                         (int(want.timestamp()) * 1000, b"30 2 * * *", b"America/New_York"))
        # Without TZ the zone is UTC; @hourly names "0 * * * *".
        jid = self.pub(q, b"hourly", "CRON", "@hourly")
        j = self.job(q, jid)
        self.assertEqual((j[b"due_ms"] % 3_600_000, j[b"tz"]), (0, b"UTC"))
        self.assertEqual(self.cmd("CANCEL", q, b"nightly", jid), 2)

    def test_cron_refuses_what_is_not_a_schedule_and_changes_nothing(self):
        q = self.q
        raw = self.raw_client()
        for args, want in [
                (("CRON", "1 2 3"), "ERR CRON wants 5 or 6 fields"),
                (("CRON", "61 * * * *"), "ERR CRON field out of range or malformed"),
                (("CRON", "0 0 30 2 *"), "ERR CRON never fires: no chosen month has that day"),
                (("CRON", "* * * * *", "TZ", "Mars/Olympus_Mons"), "ERR unknown time zone"),
                (("CRON", "* * * * *", "TZ", "../../etc/passwd"), "ERR unknown time zone"),
                (("TZ", "UTC"), "ERR syntax error"),
                (("CRON", "* * * * *", "EVERY", 5), "ERR syntax error"),
                (("CRON", "* * * * *", "CRON", "* * * * *"), "ERR syntax error"),
                (("CRON", "* * * * *", "TZ", "UTC", "TZ", "UTC"), "ERR syntax error")]:
            got = raw.call("PUBLISH", q, "x", *args)
            self.assertTrue(str(got).startswith(want), "%r: %r" % (args, got))
        self.assertEqual(self.cmd("QUEUES"), [])

    def test_backoff_delays_redelivery_after_nack_exponentially(self):
        q = self.q
        jid, p0, p1 = self.pub_timed(q, b"b", "TRIES", 3, "BACKOFF", 1)
        self.assertEqual(self.job(q, jid)[b"backoff_s"], 1)
        self.assertEqual(self.consume(q)[1], jid)
        t0 = now_ms()
        self.assertEqual(self.cmd("NACK", q, jid), 1)
        t1 = now_ms()
        j = self.job(q, jid)
        self.assertEqual(j[b"state"], b"delayed")
        due = j[b"due_ms"]
        self.assertTrue(lo(t0) + 1000 <= due <= hi(t1) + 1000, "attempt 1: 1 s (%d,%d,%d)"
                        % (due, t0, t1))
        self.assertIsNone(self.consume(q))
        reply, c0, c1 = self.poll_consume(q, until_ms=due + LATE_MS + 500)
        self.assertJobReply(reply, q, jid, b"b", 1, born=(p0, p1))
        self.assertDeliveredOnTime(due, c0, c1, "after BACKOFF 1")
        self.assertGreaterEqual(hi(c1), lo(t0) + 1000)
        t0 = now_ms()
        self.assertEqual(self.cmd("NACK", q, jid), 1)
        t1 = now_ms()
        due = self.job(q, jid)[b"due_ms"]
        self.assertTrue(lo(t0) + 2000 <= due <= hi(t1) + 2000, "attempt 2: 2 s (%d,%d,%d)"
                        % (due, t0, t1))
        self.assertEqual(self.cmd("CANCEL", q, jid), 1)

    def test_backoff_applies_when_the_lease_expires(self):
        q = self.q
        jid, p0, p1 = self.pub_timed(q, b"b", "TRIES", 2, "BACKOFF", 1)
        self.consume(q, "TTR", 1)
        lease_end = self.job(q, jid)[b"due_ms"]
        self.sleep_until(lease_end + LATE_MS + 50)
        j = self.job(q, jid)
        self.assertEqual(j[b"state"], b"delayed", "backoff after ttr expiry")
        self.assertTrue(lease_end + 1000 <= j[b"due_ms"] <= lease_end + 1000 + LATE_MS,
                        "due %d vs lease end %d + 1 s" % (j[b"due_ms"], lease_end))
        self.assertIsNone(self.consume(q))
        reply, c0, c1 = self.poll_consume(q, until_ms=j[b"due_ms"] + LATE_MS + 500)
        self.assertJobReply(reply, q, jid, b"b", 0, born=(p0, p1))
        self.assertDeliveredOnTime(j[b"due_ms"], c0, c1, "after ttr + BACKOFF")
        self.assertGreaterEqual(hi(c1), lease_end + 1000)

    def test_nack_delay_overrides_backoff_and_backoff_is_capped_at_one_day(self):
        q = self.q
        jid = self.pub(q, b"b", "TRIES", 5, "BACKOFF", 50000, "TTL", 0)
        self.consume(q)
        t0 = now_ms()
        self.assertEqual(self.cmd("NACK", q, jid, "DELAY", 2), 1)
        t1 = now_ms()
        due = self.job(q, jid)[b"due_ms"]
        self.assertTrue(lo(t0) + 2000 <= due <= hi(t1) + 2000, "NACK DELAY 2 wins over BACKOFF")
        self.assertEqual(self.cmd("ACK", q, jid), 1)
        jid = self.pub(q, b"c", "TRIES", 5, "BACKOFF", 50000, "TTL", 0)
        self.consume(q)
        self.assertEqual(self.cmd("NACK", q, jid, "DELAY", 0), 1)
        self.assertEqual(self.job(q, jid)[b"state"], b"ready", "NACK DELAY 0: ready at once")
        self.consume(q)
        t0 = now_ms()
        self.assertEqual(self.cmd("NACK", q, jid), 1)
        t1 = now_ms()
        due = self.job(q, jid)[b"due_ms"]
        self.assertTrue(lo(t0) + 86400000 <= due <= hi(t1) + 86400000,
                        "attempt 2: 50000*2 s capped at 1 day; due %d vs now %d" % (due, t0))

    def test_backoff_max_and_jitter(self):
        q = self.q
        # MAX lifts or lowers the one-day cap: 50000 s * 2 capped at 3 days, not at one.
        jid = self.pub(q, b"m", "TRIES", 5, "BACKOFF", 50000, "MAX", 3 * 86400, "TTL", 0)
        self.consume(q)
        self.assertEqual(self.cmd("NACK", q, jid, "DELAY", 0), 1)  # attempt 1: no wait
        self.consume(q)
        t0 = now_ms()
        self.assertEqual(self.cmd("NACK", q, jid), 1)  # attempt 2: 100000 s, under MAX
        due = self.job(q, jid)[b"due_ms"]
        self.assertTrue(lo(t0) + 100000000 <= due <= hi(now_ms()) + 100000000, due - t0)
        self.assertEqual(self.cmd("CANCEL", q, jid), 1)
        # JITTER: each job waits a part of its backoff drawn evenly, not all the same.
        waits = []
        for i in range(12):
            jid = self.pub(q, b"j%d" % i, "TRIES", 2, "BACKOFF", 1000, "JITTER")
            self.assertEqual(self.consume(q)[1], jid)
            t0 = now_ms()
            self.assertEqual(self.cmd("NACK", q, jid), 1)
            j = self.job(q, jid)
            waits.append(j[b"due_ms"] - t0 if j[b"state"] == b"delayed" else 0)
        self.assertTrue(all(-50 <= w <= 1000 * 1000 + 50 for w in waits), waits)
        self.assertGreater(len(set(waits)), 8, waits)
        self.expect_errors([
            (("PUBLISH", q, "x", "MAX", 5), "ERR syntax error"),
            (("PUBLISH", q, "x", "JITTER"), "ERR syntax error"),
            (("PUBLISH", q, "x", "BACKOFF", 1, "JITTER", "JITTER"), "ERR syntax error"),
            (("PUBLISH", q, "x", "BACKOFF", 1, "MAX", 0), "ERR value is not an integer or out of range"),
            (("PUBLISH", q, "x", "BACKOFF", 1, "MAX", 2**31),
             "ERR value is not an integer or out of range"),
        ])


if __name__ == "__main__":
    sys.exit(main(__name__))
