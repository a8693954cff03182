#!/usr/bin/python3
"""Pipelines of job commands (src/persist/call_batch.h): a client's consecutive commands of one
kind on one queue reach Redis as one batch call, and every command still gets its own reply, in
order, with exactly the effect it has alone; a command of another kind or queue in between keeps
its place.

A part of the job suite: see jobcase.py (run every part with test_jobs.py)."""

import sys

import redis

from jobcase import JobTestCase, main


class PipelineTests(JobTestCase):

    def fcalls(self):
        return self.r.info("commandstats").get("cmdstat_fcall", {}).get("calls", 0)

    def pipeline(self, commands):
        p = self.c.pipeline(transaction=False)
        for args in commands:
            p.execute_command(*args)
        return p.execute(raise_on_error=False)

    def test_a_pipeline_is_batched_and_every_command_has_its_own_reply(self):
        q = self.q
        self.cmd("QSTAT", q)  # the connection is up and its library loaded
        self.r.config_resetstat()
        commands = [("PUBLISH", q, b"p%d" % i) for i in range(40)]
        # The same custom id five times: created once, then the same id for the others.
        commands += [("PUBLISH", q, b"dup", "ID", "same")] * 5
        commands += [("PUBLISH", q, b"late", "DELAY", 60)]
        commands += [("CONSUME", q)] * 45  # 41 ready jobs: 41 jobs, then 4 nulls
        replies = self.pipeline(commands)
        ids = replies[:40]
        self.assertTrue(all(isinstance(i, bytes) for i in ids), replies[:40])
        self.assertEqual(len(set(ids)), 40)
        self.assertEqual(replies[40:45], [b"same"] * 5)
        self.assertIsInstance(replies[45], bytes)
        jobs = replies[46:]
        self.assertEqual([j[1] for j in jobs[:41]], ids + [b"same"])  # FIFO, one job each
        self.assertEqual([j[2] for j in jobs[:41]], [b"p%d" % i for i in range(40)] + [b"dup"])
        self.assertEqual(jobs[41:], [None] * 4)
        # Far fewer calls than commands: the pipeline went out in batches.
        self.assertLessEqual(self.fcalls(), 12)
        acks = self.pipeline([("ACK", q, j[1]) for j in jobs[:41]] + [("ACK", q, ids[0])])
        self.assertEqual(acks, [1] * 41 + [0])
        self.assertQstat(q, ready=0, delayed=1, leased=0, published_total=42, consumed_total=41,
                         acked_total=41)

    def test_commands_in_between_keep_their_place(self):
        q, other = self.q, self.q + ".other"
        replies = self.pipeline([
            ("PUBLISH", q, b"a", "ID", "k1"),
            ("PUBLISH", other, b"x"),
            ("CONSUME", q),
            ("ACK", q, "k1"),
            ("PUBLISH", q, b"b", "ID", "k1"),  # k1 is gone: a new job
            ("PUBLISH", q, b"c", "ID", "k1"),  # k1 exists: nothing new
            ("QSTAT", q),
            ("CONSUME", q),
            ("CONSUME", other),
        ])
        self.assertEqual(replies[0], b"k1")
        self.assertIsInstance(replies[1], bytes)
        self.assertEqual(replies[2][1:3], [b"k1", b"a"])
        self.assertEqual(replies[3], 1)
        self.assertEqual(replies[4:6], [b"k1", b"k1"])
        st = dict(zip(replies[6][0::2], replies[6][1::2]))
        self.assertEqual((st[b"ready"], st[b"published_total"], st[b"acked_total"]), (1, 2, 1))
        self.assertEqual(replies[7][1:3], [b"k1", b"b"])
        self.assertEqual(replies[8][2], b"x")

    def test_a_refused_command_in_a_pipeline_changes_nothing_else(self):
        q = self.q
        replies = self.pipeline([("PUBLISH", q, b"1"), ("PUBLISH", q, b"2", "TRIES", "x"),
                                 ("PUBLISH", q, b"3"), ("ACK", q, "not an id"), ("ACK", q, "00000000000000000000000000")])
        self.assertIsInstance(replies[0], bytes)
        self.assertIsInstance(replies[1], redis.ResponseError)
        self.assertIsInstance(replies[2], bytes)
        self.assertIsInstance(replies[3], redis.ResponseError)
        self.assertEqual(replies[4], 0)
        self.assertQstat(q, ready=2, published_total=2)


if __name__ == "__main__":
    sys.exit(main(__name__))
