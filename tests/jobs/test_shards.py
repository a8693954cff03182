#!/usr/bin/python3
"""Sharded queues (config [shards.NAMESPACE] QUEUE = N; docs/operations.md "Sharded queues"):
jobs spread over the shards' hash tags, every id-addressed command finds its job, CONSUME takes
from every shard and is woken by a PUBLISH on any, and QSTAT, PEEK, QUEUES, PURGE, QPAUSE and
DEADLETTER answer for the queue as a whole.

A part of the job suite: see jobcase.py (run every part with test_jobs.py)."""

import re
import sys
import time

import redis

from jobcase import ENV, JobTestCase, main, MAIN_CONFIG, now_ms, start_deferq
from dqtest.ids import shard_of_generated  # tests/lib is on the path once jobcase is imported

SHARDS = 8
SHARD_CONFIG = MAIN_CONFIG + """\
[shards.default]
hot = %d
two = 2
""" % SHARDS

TAG = re.compile(rb"^dq:\{default/(hot(?:#\d+)?)\}:")


class ShardTests(JobTestCase):
    dq = None

    @classmethod
    def setUpClass(cls):
        cls.dq = start_deferq(ENV.redis.port, SHARD_CONFIG, "deferq-shards")

    @classmethod
    def tearDownClass(cls):
        if cls.dq:
            cls.dq.stop()

    def stored_queues(self):
        """The stored queues (shards) holding keys in Redis."""
        found = set()
        for key in self.r.scan_iter(match="dq:{default/hot*", count=1000):
            m = TAG.match(key)
            if m:
                found.add(m.group(1))
        return found

    def consume_all(self, q, count=100):
        got = []
        while True:
            reply = self.consume(q, "COUNT", count)
            if reply is None:
                return got
            for job in reply:
                self.assertEqual(job[0], q.encode(), "a shard's job is the queue's: %r" % job)
            got.extend(reply)

    def test_jobs_spread_over_every_shard_and_are_each_consumed_once(self):
        generated = [self.pub("hot", b"g%d" % i) for i in range(200)]
        custom = [self.pub("hot", b"c%d" % i, "ID", "order-%d" % i) for i in range(50)]
        self.assertEqual(custom[:2], [b"order-0", b"order-1"])
        # Round-robin: one connection's publishes take the shards in turn (one thread's counter).
        per_shard = [0] * SHARDS
        for jid in generated:
            per_shard[shard_of_generated(jid, SHARDS)] += 1
        self.assertEqual(per_shard, [200 // SHARDS] * SHARDS)
        want = {b"hot"} | {b"hot#%d" % i for i in range(1, SHARDS)}
        self.assertEqual(self.stored_queues(), want, "every shard has keys of its own hash tag")
        self.assertQstat("hot", ready=250, published_total=250)
        self.assertEqual(self.cmd("QUEUES"), [b"hot"], "the shards are one queue to the client")
        self.assertEqual(self.cmd("QUEUES", "MATCH", "ho?"), [b"hot"])
        peek = self.cmd("PEEK", "hot", "COUNT", 20)
        self.assertEqual(len(peek), 20)
        self.assertEqual({j[0] for j in peek}, {b"hot"})
        self.assertEqual(len({j[1] for j in peek}), 20)
        self.assertEqual(self.cmd("PEEK", "hot", "COUNT", 1000).__len__(), 250)
        got = self.consume_all("hot")
        ids = [j[1] for j in got]
        self.assertEqual(len(ids), 250, "every job consumed")
        self.assertEqual(set(ids), set(generated) | set(custom), "each exactly once")
        self.assertEqual({j[2] for j in got},
                         {b"g%d" % i for i in range(200)} | {b"c%d" % i for i in range(50)})
        self.assertQstat("hot", leased=250, published_total=250, consumed_total=250)
        self.assertEqual(self.cmd("ACK", "hot", *ids), 250)
        self.assertQstat("hot", published_total=250, consumed_total=250, acked_total=250)
        self.assertEqual(self.cmd("QUEUES"), [])

    def test_browse_refuses_a_sharded_queue(self):
        with self.assertRaises(redis.ResponseError) as e:
            self.cmd("BROWSE", "hot", "DELAYED")
        self.assertEqual(str(e.exception), "BROWSE does not read sharded queues yet")

    def test_id_commands_find_the_job_in_its_shard(self):
        jids = [self.pub("hot", b"p%d" % i) for i in range(SHARDS)]
        jids.append(self.pub("hot", b"custom", "ID", "abc"))
        for jid in jids:
            info = self.job("hot", jid)
            self.assertEqual((info[b"queue"], info[b"state"]), (b"hot", b"ready"), jid)
        leased = {j[1]: j for j in self.consume("hot", "COUNT", 100)}
        self.assertEqual(set(leased), set(jids))
        for jid in jids:
            self.assertEqual(self.job("hot", jid)[b"state"], b"leased")
            self.assertEqual(self.cmd("TOUCH", "hot", jid, "TTR", 50), 1)
            self.assertEqual(self.cmd("NACK", "hot", jid), 1)  # one try: to the dead letter
            self.assertEqual(self.job("hot", jid)[b"state"], b"dead")
        self.assertEqual(self.cmd("DEADLETTER", "DELETE", "hot", "ID", jids[0]), 1)
        for jid in jids[1:]:
            self.assertEqual(self.cmd("DEADLETTER", "RESPAWN", "hot", "ID", jid), 1)
            self.assertEqual(self.job("hot", jid)[b"state"], b"ready")
        self.assertEqual(self.cmd("CANCEL", "hot", *jids), len(jids) - 1)
        for jid in jids:
            self.assertIsNone(self.job("hot", jid))
        # Publishing a custom id again finds the existing job (its shard follows from the id).
        self.pub("hot", b"one", "ID", "same")
        self.assertEqual(self.pub("hot", b"two", "ID", "same", "REPLACE"), b"same")
        job = self.consume("hot")
        self.assertEqual(job[2], b"two")
        self.assertIsNone(self.consume("hot"))
        # A fenced ACK reaches the job's shard too.
        self.assertEqual(self.cmd("TOUCH", "hot", b"same", "ATTEMPT", job[5]), 1)
        self.assertEqual(self.cmd("ACK", "hot", b"same", "ATTEMPT", job[5]), 1)

    def test_deadletter_aggregates_over_the_shards(self):
        jids = [self.pub("hot", b"d%d" % i) for i in range(12)]
        for job in self.consume("hot", "COUNT", 100):
            self.assertEqual(self.cmd("NACK", "hot", job[1], "REASON", b"why " + job[2]), 1)
        self.assertEqual(self.cmd("DEADLETTER", "SIZE", "hot"), 12)
        peek = self.cmd("DEADLETTER", "PEEK", "hot", "COUNT", 5)
        self.assertEqual(len(peek), 5)
        self.assertEqual({j[0] for j in peek}, {b"hot"})
        peek = self.cmd("DEADLETTER", "PEEK", "hot", "COUNT", 5, "WITHERRORS")
        self.assertEqual([(len(j), j[7], j[8]) for j in peek],
                         [(10, b"why " + j[2], 1) for j in peek])
        self.assertEqual(self.cmd("DEADLETTER", "RESPAWN", "hot", "COUNT", 7), 7)
        self.assertEqual(self.cmd("DEADLETTER", "SIZE", "hot"), 5)
        self.assertEqual(len(self.consume_all("hot")), 7)
        self.assertEqual(self.cmd("DEADLETTER", "DELETE", "hot", "COUNT", 100), 5)
        self.assertEqual(self.cmd("DEADLETTER", "SIZE", "hot"), 0)
        self.assertEqual(self.qstat("hot")["dead_total"], 12)
        self.assertEqual(len(jids), 12)

    def test_a_dead_occurrence_of_a_recurring_job_is_found_by_its_own_id(self):
        # Its new id carries its shard: JOB, ACK and DEADLETTER DELETE ID route to it.
        for i in range(SHARDS):
            jid = self.pub("hot", b"r%d" % i, "EVERY", 3600)
            self.assertEqual(self.consume("hot")[1], jid)
            self.assertEqual(self.cmd("NACK", "hot", jid), 1)
        dead = self.cmd("DEADLETTER", "PEEK", "hot", "COUNT", 100)
        self.assertEqual(len(dead), SHARDS)
        for d in dead:
            self.assertEqual(self.job("hot", d[1])[b"state"], b"dead")
            self.assertEqual(self.cmd("DEADLETTER", "DELETE", "hot", "ID", d[1]), 1)
        self.assertEqual(self.cmd("DEADLETTER", "SIZE", "hot"), 0)
        self.assertEqual(self.qstat("hot")["delayed"], SHARDS, "every schedule goes on")

    def test_blocked_consume_is_woken_by_a_publish_on_any_shard(self):
        # SHARDS publishes in turn land on every shard: each wakes a consumer blocked on the queue.
        for i in range(SHARDS):
            waiter = self.consumer("CONSUME", "hot", "TIMEOUT", 5)
            waiter.start()
            time.sleep(0.05)  # parked before the publish
            t0 = now_ms()
            jid = self.pub("hot", b"w%d" % i)
            reply = waiter.finish()
            self.assertIsNotNone(reply, "shard %d: no wake-up" % i)
            self.assertEqual((reply[0], reply[1]), (b"hot", jid))
            self.assertLess(waiter.t_done - t0, 1000, "shard %d: woken late" % i)
        self.assertQstat("hot", leased=SHARDS, published_total=SHARDS, consumed_total=SHARDS)

    def test_consume_of_several_queues_keeps_their_priority(self):
        self.pub("two", b"low")
        self.pub("hot", b"high")
        self.assertEqual(self.consume("hot", "two")[2], b"high")
        self.assertEqual(self.consume("hot", "two")[2], b"low")
        self.assertIsNone(self.consume("hot", "two"))

    def test_pause_and_purge_act_on_every_shard(self):
        for i in range(SHARDS * 2):
            self.pub("hot", b"x%d" % i)
        self.assertEqual(self.cmd("QPAUSE", "hot"), b"OK")
        self.assertEqual(self.qstat("hot")["paused"], 1)
        self.assertIsNone(self.consume("hot"), "no shard serves a paused queue")
        self.assertEqual(self.cmd("QRESUME", "hot"), b"OK")
        self.assertEqual(self.qstat("hot")["paused"], 0)
        self.assertIsNotNone(self.consume("hot"))
        self.assertEqual(self.cmd("PURGE", "hot"), SHARDS * 2)
        self.assertQstat("hot", "PURGE deletes the counters of every shard too")

    def test_two_instances_split_the_shards_pumping_and_the_survivor_takes_every_shard(self):
        # Pump ownership is per shard: instances with the same [shards] share the 8 + 2 shards
        # (INFO stats pump_shards); one that dies leaves the roster 2 s after its last renewal,
        # and the other owns them all at its next renewal (every 500 ms).
        total = SHARDS + 2
        b = start_deferq(ENV.redis.port, SHARD_CONFIG, "deferq-shards-b")
        try:
            cb = self.client(b.port)

            def owned():
                return [int(c.info("stats")["pump_shards"]) for c in (self.c, cb)]

            deadline = time.time() + 5
            while not (sum(owned()) == total and min(owned()) > 0):
                self.assertLess(time.time(), deadline, "shards not split: %s" % owned())
                time.sleep(0.05)
            split = owned()
            # The roster in Redis (shard 0's slot) holds both (run_id: the instance's id, 32 hex
            # digits, which redis-py turns into an int when they are all decimal).
            ids = {str(c.info("server")["run_id"]).zfill(32).encode() for c in (self.c, cb)}
            self.assertEqual(self.r.smembers("dq:{default/hot}:pumpers"), ids)
            t0 = time.time()
            b.kill9()
            while int(self.c.info("stats")["pump_shards"]) < total:
                self.assertLess(time.time() - t0, 3.0, "the survivor did not take every shard")
                time.sleep(0.05)
            took = time.time() - t0
            self.assertGreater(took, 1.0, "taken before the dead instance's membership ended")
            print("  [split %s; all %d shards on the survivor %.2f s after the kill]"
                  % (split, total, took), end=" ", flush=True)
        finally:
            b.stop()


if __name__ == "__main__":
    sys.exit(main(__name__))
