#!/usr/bin/python3
"""Storage costs that must not grow with what is stored (issue 8): the real deferq binary on its
own redis-server, thousands of queues and jobs, and Redis's own counters as the witness.

    /usr/bin/python3 tests/storage/test_storage.py /path/to/deferq [unittest options]

- The pump's periodic work follows the queues with work due, not the queues stored: with 10,000
  queues holding one delayed job each, an idle second costs a handful of Redis calls.
- One-off reply queues (docs/commands.md request/reply) leave the registry once drained, and nothing of
  them is left in Redis once their retention (server.retain_seconds) has passed.
- Ready jobs whose ttl passes with no consumer are removed and counted within the stated delay.
- Newest-first cancels leave the ready list bounded, and a non-blocking CONSUME is never short
  while jobs are ready.
(A fresh start under 1,600 requests in flight is tests/faults' StartupTests.)

Each test flushes Redis and restarts nothing; Redis is read through INFO commandstats
(CONFIG RESETSTAT first), which counts every call whatever the machine's load.
"""

import os
import sys
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))

from dqtest import procs, runner  # noqa: E402

import redis  # noqa: E402

QUEUES = 10000
PAGE = 200  # commands per pipeline round trip (few in flight per upstream connection)
RETAIN_S = 3  # server.retain_seconds: how long an emptied queue keeps its counters


class Env:
    binary = None
    tmpdir = None
    redis = None
    dq = None


def pipelined(client, items, add):
    """add(pipe, item) for every item, PAGE per round trip; every reply, errors included."""
    out = []
    for i in range(0, len(items), PAGE):
        pipe = client.pipeline(transaction=False)
        for item in items[i:i + PAGE]:
            add(pipe, item)
        out.extend(pipe.execute(raise_on_error=False))
    return out


class StorageTest(unittest.TestCase):
    def setUp(self):
        self.r = Env.redis.client(socket_timeout=30)
        self.r.flushall()
        self.c = Env.dq.client(socket_timeout=30)

    def tearDown(self):
        self.c.close()
        self.r.close()

    def calls(self):
        """{command: calls} since the last CONFIG RESETSTAT (INFO and CONFIG left out)."""
        stats = self.r.info("commandstats")
        return {k[len("cmdstat_"):]: v["calls"] for k, v in stats.items()
                if k not in ("cmdstat_info", "cmdstat_config")}

    def idle_calls(self, seconds):
        self.r.config_resetstat()
        time.sleep(seconds)
        return self.calls()

    def key_memory(self):
        """{key: its memory, exactly (MEMORY USAGE ... SAMPLES 0)}. used_memory also moves with the
        clients' buffers, the Lua heaps' garbage collection and incremental rehashing, by 1-2%
        of a Redis of this size whatever deferq holds."""
        return {k: self.r.memory_usage(k, samples=0) for k in self.r.scan_iter(count=1000)}

    def assertNoErrors(self, replies, what):
        errors = [r for r in replies if isinstance(r, Exception)]
        self.assertEqual(errors[:3], [], "%d of %d %s failed" % (len(errors), len(replies), what))

    def test_idle_work_follows_queues_with_work_due_not_queues_stored(self):
        names = ["idle.%d" % i for i in range(QUEUES)]
        replies = pipelined(self.c, names,
                            lambda p, q: p.execute_command("PUBLISH", q, b"x" * 64, "DELAY", 3600))
        self.assertNoErrors(replies, "publishes")
        self.assertEqual(self.r.scard("dq:queues"), QUEUES)
        self.assertEqual(self.r.zcard("dq:due"), QUEUES)
        time.sleep(0.5)  # the publishes' own pump timers are far away; let the dust settle
        calls = self.idle_calls(2.0)
        # Per 100 ms sweep: one read of the due index; per 500 ms: the ownership renewal. Nothing
        # per queue: a sweep of 10,000 queues would be 200,000 calls in 2 s.
        self.assertLessEqual(calls.get("zrangebyscore", 0), 25, calls)
        self.assertLessEqual(calls.get("fcall", 0), 10, calls)
        self.assertLessEqual(sum(calls.values()), 100, calls)

        # One of them gets a job due in 300 ms: the pump runs for that queue only.
        self.r.config_resetstat()
        self.c.execute_command("PUBLISH", "idle.17", b"soon", "PDELAY", 300)
        deadline = time.time() + 5
        while time.time() < deadline:
            st = self.c.execute_command("QSTAT", "idle.17")
            if dict(zip(st[::2], st[1::2]))[b"ready"] == 1:
                break
            time.sleep(0.02)
        self.assertEqual(dict(zip(st[::2], st[1::2]))[b"ready"], 1)
        calls = self.calls()
        self.assertLessEqual(calls.get("fcall", 0), 40, calls)  # publish, qstats, a few pumps

        # Meanwhile, publishing to all of them again is no problem for the pool.
        replies = pipelined(self.c, names,
                            lambda p, q: p.execute_command("PUBLISH", q, b"y", "DELAY", 3600))
        self.assertNoErrors(replies, "publishes")

    def test_drained_one_off_reply_queues_leave_the_registry_and_then_nothing_in_redis(self):
        # What a pool holds besides: 50,000 jobs waiting for an hour (the 1% below is of a Redis
        # in use, not of an empty one, whose used_memory is mostly allocator noise).
        waiting = pipelined(self.c, list(range(50000)),
                            lambda p, _: p.execute_command("PUBLISH", "later", b"x" * 64,
                                                           "DELAY", 3600))
        self.assertNoErrors(waiting, "publishes")
        deadline = time.time() + 5  # setUp flushed Redis: the pump lease comes back first
        while not self.r.exists("dq:own") and time.time() < deadline:
            time.sleep(0.05)
        time.sleep(1.5)  # Redis finishes growing the buckets' hash tables (incremental rehash)
        keys_before = self.r.dbsize()
        memory_before = self.key_memory()
        used_before = self.r.info("memory")["used_memory"]
        names = ["reply.%d" % i for i in range(QUEUES)]
        replies = pipelined(self.c, names, lambda p, q: p.execute_command("PUBLISH", q, b"answer"))
        self.assertNoErrors(replies, "publishes")
        self.assertEqual(self.r.scard("dq:queues"), QUEUES + 1)
        jobs = pipelined(self.c, names, lambda p, q: p.execute_command("CONSUME", q))
        self.assertNoErrors(jobs, "consumes")
        self.assertEqual(sum(1 for j in jobs if j), QUEUES)
        acks = pipelined(self.c, list(zip(names, jobs)),
                         lambda p, qj: p.execute_command("ACK", qj[0], qj[1][1]))
        self.assertEqual(acks, [1] * QUEUES)
        self.assertEqual(self.r.smembers("dq:queues"), {b"default/later"})
        self.assertEqual(self.c.execute_command("QUEUES"), [b"later"])
        # Retained: their counters (QSTAT's totals) stay RETAIN_S, each with its due index entry
        # at the end of the window, and nothing runs for them meanwhile.
        self.assertEqual(self.r.zcard("dq:due"), QUEUES + 1)
        st = self.c.execute_command("QSTAT", "reply.7")
        self.assertEqual(dict(zip(st[::2], st[1::2]))[b"acked_total"], 1)
        calls = self.idle_calls(1.0)
        self.assertLessEqual(sum(calls.values()), 50, calls)
        # Then nothing of them is left: the keys Redis held before, and its memory within 1%.
        deadline = time.time() + RETAIN_S + 10
        while self.r.zcard("dq:due") > 1 and time.time() < deadline:
            time.sleep(0.2)
        self.assertEqual(self.r.zrange("dq:due", 0, -1), [b"default/later"])
        self.assertEqual(self.r.keys("dq:{reply.*"), [])
        self.assertEqual(self.r.dbsize(), keys_before)
        # Every key holds what it held before, to the byte, except the two pool-wide indexes:
        # the same members, but Redis keeps a big set's or sorted set's hash table (and encoding)
        # after it shrinks (at most 16,384 buckets for these 10,000 queues: 128 KiB each).
        memory_after = self.key_memory()
        self.assertEqual(sorted(memory_after), sorted(memory_before))
        for key, size in memory_after.items():
            if key in (b"dq:due", b"dq:queues"):
                self.assertLessEqual(size - memory_before[key], 160 * 1024, key)
            else:
                self.assertEqual(size, memory_before[key], key)
        used_after = self.r.info("memory")["used_memory"]
        print("\n  used_memory %d -> %d bytes (%.2f%%) with 50,000 jobs waiting"
              % (used_before, used_after, 100.0 * (used_after - used_before) / used_before))
        st = self.c.execute_command("QSTAT", "reply.7")
        self.assertEqual(dict(zip(st[::2], st[1::2]))[b"acked_total"], 0)

    def test_ready_jobs_past_their_ttl_are_gone_and_counted_without_a_consumer(self):
        q = "expiring"
        replies = pipelined(self.c, list(range(5000)),
                            lambda p, _: p.execute_command("PUBLISH", q, b"x" * 64, "TTL", 2))
        self.assertNoErrors(replies, "publishes")
        published = time.time()
        # The stated delay (docs/storage.md): the head of the ready list is looked at when its
        # ttl has passed, within one poll of the due index (100 ms) plus the pump's work.
        deadline = published + 2 + 1.5
        while time.time() < deadline:
            st = self.c.execute_command("QSTAT", q)
            st = dict(zip(st[::2], st[1::2]))
            if st[b"ready"] == 0:
                break
            time.sleep(0.05)
        self.assertEqual((st[b"ready"], st[b"expired_total"]), (0, 5000))
        self.assertGreater(time.time() - published, 1.9)  # not before the ttl passed
        # Left: the queue's counters until its retention ends (its due index entry says when),
        # the pump ownership and the metrics' active-queue index (docs/storage.md); no job or list.
        self.assertEqual(set(self.r.keys()) - {b"dq:active"},
                         {b"dq:{default/%s}:s" % q.encode(), b"dq:own", b"dq:due"})
        self.assertEqual(self.r.scard("dq:queues"), 0)
        self.assertEqual(self.r.zrange("dq:due", 0, -1), [b"default/" + q.encode()])

    def test_newest_first_cancels_keep_the_list_bounded_and_consume_finds_the_ready_job(self):
        q = "cancels"
        first = self.c.execute_command("PUBLISH", q, b"first")
        longest = 0
        for i in range(0, 5000, 500):
            ids = pipelined(self.c, list(range(500)),
                            lambda p, _: p.execute_command("PUBLISH", q, b"tmp"))
            self.assertNoErrors(ids, "publishes")
            replies = pipelined(self.c, list(reversed(ids)),
                                lambda p, j: p.execute_command("CANCEL", q, j))
            self.assertEqual(replies, [1] * 500)
            longest = max(longest, self.r.llen("dq:{default/%s}:r" % q))
        # One live job: the list is rebuilt before it exceeds 2 x live + 64 entries.
        self.assertLessEqual(self.r.llen("dq:{default/%s}:r" % q), 2 * 1 + 64)
        self.assertLessEqual(longest, 2 * 1 + 64)
        job = self.c.execute_command("CONSUME", q)
        self.assertEqual(job[1:3], [first, b"first"])

    def test_non_blocking_consume_is_never_short_behind_many_stale_entries(self):
        q = "stale"
        ids = pipelined(self.c, list(range(3000)),
                        lambda p, i: p.execute_command("PUBLISH", q, b"%d" % i))
        self.assertNoErrors(ids, "publishes")
        # Cancelling 1,500 jobs behind the first, newest first, leaves 1,500 stale entries ahead
        # of 1,499 ready jobs (within the compaction bound of 2 x live + 64).
        replies = pipelined(self.c, list(reversed(ids[1:1501])),
                            lambda p, j: p.execute_command("CANCEL", q, j))
        self.assertEqual(replies, [1] * 1500)
        self.assertEqual([j[1] for j in self.c.execute_command("PEEK", q, "COUNT", 2)],
                         [ids[0], ids[1501]])
        jobs = self.c.execute_command("CONSUME", q, "COUNT", 1000)
        self.assertEqual([j[1] for j in jobs], [ids[0]] + ids[1501:2500])
        jobs = self.c.execute_command("CONSUME", q, "COUNT", 1000)
        self.assertEqual([j[1] for j in jobs], ids[2500:])


def main():
    Env.binary = runner.binary_arg(sys.argv, "%s /path/to/deferq [unittest options]" % sys.argv[0])
    if Env.binary is None:
        return 2
    Env.tmpdir = procs.make_tmpdir("storage")
    try:
        Env.redis = procs.Redis(Env.tmpdir).start()
        # Without the metrics' per-queue reads (server.queue_stats): these tests count the pump's
        # and registry's own calls; the metrics' reads follow the queues worked on (docs/metrics.md).
        Env.dq = procs.Deferq(Env.binary, Env.tmpdir, Env.redis.port, name="deferq-storage",
                              config_text="[server]\nqueue_stats = false\nretain_seconds = %d\n"
                              % RETAIN_S).start()
        return runner.main(sys.modules[__name__], sys.argv)
    finally:
        if Env.dq:
            Env.dq.stop()
        if Env.redis:
            Env.redis.stop()
        procs.remove_tmpdir(Env.tmpdir)


if __name__ == "__main__":
    sys.exit(main())
