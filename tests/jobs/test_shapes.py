#!/usr/bin/python3
"""Payloads and reply shapes: binary round trips, exact RESP2 and RESP3 replies, pipelining,
one hash tag per queue (docs/commands.md).

A part of the job suite: see jobcase.py (run every part with test_jobs.py)."""

import sys
import time

from jobcase import encode, JOB_FIELDS, JobTestCase, main, QSTAT_FIELDS, RMap


# --------------------------------------------------------------------------------------------
# Payloads and reply shapes
# --------------------------------------------------------------------------------------------

class ShapeTests(JobTestCase):

    def test_binary_payloads_round_trip_exactly(self):
        payloads = [bytes(range(256)), b"", b"a\r\nb\r\n", b"\r\n", b"*1\r\n$4\r\nPING\r\n",
                    b"\x00" * 10, bytes(range(255, -1, -1)) * 3]
        qs = ["%s.%d" % (self.q, i) for i in range(len(payloads))]
        ids = [self.pub(q, p, "TRIES", 2) for q, p in zip(qs, payloads)]
        for q, jid, p in zip(qs, ids, payloads):
            self.assertEqual(self.job(q, jid)[b"payload"], p, "JOB")
            self.assertJobReply(self.cmd("PEEK", q)[0], q, jid, p, 2, what="PEEK")
            self.assertJobReply(self.consume(q), q, jid, p, 1, what="CONSUME")
            self.assertEqual(self.cmd("NACK", q, jid), 1)
        # exact bytes on the wire for all 256 byte values and for the empty payload
        for i in (0, 1):
            q, jid, p = qs[i], ids[i], payloads[i]
            reply = self.raw.call_bytes("CONSUME", q)
            head = b"*7\r\n$%d\r\n%s\r\n$26\r\n%s\r\n$%d\r\n%s\r\n:0\r\n:" % (
                len(q), q.encode(), jid, len(p), p)
            self.assertTrue(reply.startswith(head), "%r\ndoes not start with\n%r" % (reply, head))
        for q, jid, p in zip(qs[2:], ids[2:], payloads[2:]):
            self.assertJobReply(self.consume(q), q, jid, p, 0, what="CONSUME after NACK")
        for q, jid, p in zip(qs, ids, payloads):
            self.assertEqual(self.cmd("NACK", q, jid), 1)
            dead = self.cmd("DEADLETTER", "PEEK", q)
            self.assertJobReply(dead[0], q, jid, p, 0, what="DEADLETTER PEEK")

    def test_resp2_null_and_empty_replies_are_exact(self):
        q = self.q
        self.assertEqual(self.raw.call_bytes("CONSUME", q), b"*-1\r\n")
        self.assertEqual(self.raw.call_bytes("CONSUME", q, "COUNT", 3), b"*-1\r\n")
        self.assertEqual(self.raw.call_bytes("JOB", q, "x"), b"*-1\r\n")
        self.assertEqual(self.raw.call_bytes("PEEK", q), b"*0\r\n")
        self.assertEqual(self.raw.call_bytes("DEADLETTER", "PEEK", q), b"*0\r\n")
        self.assertEqual(self.raw.call_bytes("QUEUES"), b"*0\r\n")
        self.assertEqual(self.raw.call_bytes("ACK", q, "x"), b":0\r\n")
        self.assertEqual(self.raw.call_bytes("DEADLETTER", "SIZE", q), b":0\r\n")
        jid = self.raw.call("PUBLISH", q, "x")
        self.assertEqual(self.raw.call_bytes("PUBLISH", q, "y", "ID", "k1"), b"$2\r\nk1\r\n")
        self.assertEqual(self.raw.call_bytes("QSTAT", q),
                         b"*22\r\n$5\r\nready\r\n:2\r\n$7\r\ndelayed\r\n:0\r\n$6\r\nleased\r\n:0\r\n"
                         b"$4\r\ndead\r\n:0\r\n$15\r\npublished_total\r\n:2\r\n"
                         b"$14\r\nconsumed_total\r\n:0\r\n$11\r\nacked_total\r\n:0\r\n"
                         b"$13\r\nexpired_total\r\n:0\r\n$10\r\ndead_total\r\n:0\r\n"
                         b"$6\r\npaused\r\n:0\r\n$9\r\nschedules\r\n:0\r\n")
        self.assertEqual(self.raw.call_bytes("ACK", q, jid, "k1"), b":2\r\n")

    def test_resp3_shapes_after_hello_3(self):
        q = self.q
        r3 = self.raw_client()
        hello = r3.call("HELLO", 3)
        self.assertIsInstance(hello, RMap, hello)
        self.assertEqual(hello.as_dict().get(b"proto"), 3)
        self.assertEqual(r3.call_bytes("CONSUME", q), b"_\r\n")
        self.assertEqual(r3.call_bytes("CONSUME", q, "COUNT", 2), b"_\r\n")
        self.assertEqual(r3.call_bytes("JOB", q, "nosuch"), b"_\r\n")
        self.assertEqual(r3.call_bytes("PEEK", q), b"*0\r\n")
        jid = r3.call("PUBLISH", q, b"p\r\n", "TRIES", 3, "TTL", 0)
        self.assertIsInstance(jid, bytes)
        self.assertEqual(len(jid), 26)
        jid2 = r3.call("PUBLISH", q, b"second", "TTL", 100)
        peek = r3.call("PEEK", q)
        self.assertEqual(len(peek), 1)
        # A job is the same 7-element array in RESP3 as in RESP2 (a tuple, like BLPOP's reply).
        self.assertNotIsInstance(peek[0], RMap, peek)
        self.assertEqual(peek[0][:6], [q.encode(), jid, b"p\r\n", 3, -1, 0], peek)
        self.assertEqual(len(peek[0]), 7, peek)
        time.sleep(0.2)
        job = r3.call("CONSUME", q)
        self.assertNotIsInstance(job, RMap, job)
        self.assertEqual(len(job), 7, job)
        self.assertEqual(job[:6], [q.encode(), jid, b"p\r\n", 2, -1, 1], job)
        self.assertIsInstance(job[6], int)
        self.assertTrue(200 <= job[6] <= 200 + 1000, "elapsed_ms since publish: %r" % job[6])
        jobs = r3.call("CONSUME", q, "COUNT", 5)
        self.assertIsInstance(jobs, list)
        self.assertEqual(len(jobs), 1)
        self.assertNotIsInstance(jobs[0], RMap)
        self.assertEqual(len(jobs[0]), 7, jobs)
        self.assertEqual(jobs[0][1], jid2)
        self.assertTtl(jobs[0][4], 100)
        info = r3.call("JOB", q, jid)
        self.assertIsInstance(info, RMap, info)
        self.assertEqual(set(info.keys_in_order()), set(JOB_FIELDS), info)
        d = info.as_dict()
        self.assertEqual((d[b"state"], d[b"tries_left"], d[b"attempt"], d[b"ttl_left_s"],
                          d[b"every_s"], d[b"backoff_s"], d[b"payload"]),
                         (b"leased", 2, 1, -1, 0, 0, b"p\r\n"))
        st = r3.call("QSTAT", q)
        self.assertIsInstance(st, RMap, st)
        self.assertEqual(st.keys_in_order(), QSTAT_FIELDS)
        self.assertEqual(st.as_dict()[b"leased"], 2)
        self.assertEqual(r3.call("ACK", q, jid), 1)
        self.assertEqual(r3.call("NACK", q, jid2), 1)
        dead = r3.call("DEADLETTER", "PEEK", q)
        self.assertIsInstance(dead, list)
        self.assertNotIsInstance(dead[0], RMap, dead)
        self.assertEqual(len(dead[0]), 7, dead)
        self.assertEqual(dead[0][:4], [q.encode(), jid2, b"second", 0], dead)
        self.assertEqual(r3.call("QUEUES"), [q.encode()])
        self.assertEqual(r3.call_bytes("CONSUME", q, "TIMEOUT", "0.1"), b"_\r\n")

    def test_pipelined_commands_are_answered_in_order_and_see_earlier_writes(self):
        q = self.q
        data = b"".join(encode(["PUBLISH", q, b"p%d" % i]) for i in range(200))
        data += encode(["QSTAT", q]) + encode(["PING"])
        self.raw.send_bytes(data)
        ids = [self.raw.read() for _ in range(200)]
        self.assertTrue(all(isinstance(i, bytes) and len(i) == 26 for i in ids), ids[:3])
        self.assertEqual(len(set(ids)), 200)
        st = self.raw.read()
        self.assertEqual(self.raw.read(), b"PONG")
        self.assertEqual(dict(zip(st[0::2], st[1::2]))[b"ready"], 200,
                         "a QSTAT pipelined after 200 PUBLISHes on the same connection must see "
                         "all of them (commands of one connection run in order, as in Redis)")

    def test_jobs_published_in_one_pipeline_are_consumed_in_publish_order(self):
        q = self.q
        data = b"".join(encode(["PUBLISH", q, b"p%d" % i]) for i in range(20))
        self.raw.send_bytes(data)
        ids = [self.raw.read() for _ in range(20)]
        self.assertEqual(sorted(ids), ids, "ids of one connection's publishes are time-sortable")
        self.assertEqual([j[1] for j in self.cmd("PEEK", q, "COUNT", 20)], ids,
                         "PEEK: oldest first")
        self.assertEqual([self.consume(q)[1] for _ in range(20)], ids, "CONSUME: FIFO")

    def test_keys_of_a_queue_share_one_hash_tag(self):
        q = "tagq7"
        jid = self.pub(q, b"a", "TRIES", 2)
        self.pub(q, b"b", "DELAY", 100)
        self.pub(q, b"c", "ID", "custom")
        self.consume(q)
        self.cmd("NACK", q, jid, "DELAY", 50)
        self.consume(q)
        self.cmd("NACK", q, b"custom")
        keys = [k for k in self.r.keys("*") if b"tagq7" in k]
        self.assertTrue(keys, "no Redis key names the queue")
        for k in keys:
            self.assertIn(b"{default/tagq7}", k, "key %r is outside the queue's hash tag" % k)


if __name__ == "__main__":
    sys.exit(main(__name__))
