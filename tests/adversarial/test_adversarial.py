#!/usr/bin/python3
"""What an operator, a full Redis or a hostile client does to deferq (issue 20), against the real
deferq binary and real redis-server processes, each test with its own processes on free loopback
ports:

    /usr/bin/python3 tests/adversarial/test_adversarial.py /path/to/deferq [-v] [-k NAME]

PolicyTest        CONFIG SET maxmemory-policy allkeys-lru under publishing load: every publish
                  acknowledged more than 1 s after the change was refused (TRYAGAIN with the
                  reason), none of the refused ones is in Redis, every acknowledged one is; reads
                  go on; it heals when the policy is noeviction again. An eviction between two
                  readings refuses writes too.
MaxmemoryTest     Redis at maxmemory (noeviction): consume, ack, nack, cancel, touch, purge and
                  every read work, publish answers an OOM error naming the pool; deferq started
                  against the full Redis serves reads; the library is loaded once per Redis.
FullDiskTest      AOF on a full tmpfs (or, where mounting is refused, a file size limit): writes
                  answer MISCONF naming the pool, reads work, a log line says so; writes resume
                  when the disk has room.
SignalsTest       SIGHUP is logged and reloads the log level; deferq keeps serving.
ProxyFaultTest    a TCP proxy between deferq and Redis that delays, cuts a reply in the middle,
                  half-closes and resets: no acknowledged publish lost, no TRYAGAIN applied, no
                  job stuck.

Prints "N passed, M failed" and exits non-zero on any failure. Needs redis-py (Debian's
python3-redis), hence /usr/bin/python3.
"""

import os
import resource
import signal
import subprocess
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))

from dqtest import procs, runner  # noqa: E402
from dqtest.probe import info_pool, qstat, read_log, wait_for  # noqa: E402
from dqtest.proxy import FaultProxy  # noqa: E402
from dqtest.resp import Err, Raw  # noqa: E402

DEFERQ = None  # path of the deferq binary, from argv[1]


def function_loads(client):
    stats = client.info("commandstats")
    return stats.get("cmdstat_function|load", {}).get("calls", 0)


class Case(unittest.TestCase):
    """Each test's processes live in its own directory and are stopped whatever happens."""

    def setUp(self):
        self.tmp = procs.make_tmpdir("adversarial")
        self.servers = []
        self.cleanups = []

    def tearDown(self):
        for fn in reversed(self.cleanups):
            fn()
        for server in self.servers:
            if server.proc is not None:
                server.proc.send_signal(signal.SIGCONT)
            server.stop()
        procs.remove_tmpdir(self.tmp)

    def redis(self, *extra, appendonly=False, directory=None):
        server = procs.Redis(self.tmp, extra=extra, appendonly=appendonly)
        if directory is not None:
            server.dir = directory
        self.servers.append(server)
        return server.start()

    def deferq(self, redis_port, config="", **kw):
        text = ('[pools.default]\naddr = "redis://127.0.0.1:%d"\n' % redis_port) + config
        server = procs.Deferq(DEFERQ, self.tmp, None, text, **kw)
        self.servers.append(server)
        return server.start()


# --------------------------------------------------------------------------------------------


class PolicyTest(Case):
    def test_an_evicting_policy_set_live_refuses_writes_within_a_second_and_heals(self):
        redis = self.redis()
        dq = self.deferq(redis.port)
        r = redis.client()
        acked, refused, other = {}, [], []  # id -> time acknowledged; (id, time, error)
        stop = threading.Event()

        def publisher(n):
            raw = Raw(dq.port, timeout=5.0)
            i = 0
            while not stop.is_set() and i < 20000:
                job_id = "p%d-%d" % (n, i)
                i += 1
                reply = raw.call("PUBLISH", "orders", "x" * 100, "ID", job_id)
                now = time.monotonic()
                if isinstance(reply, Err):
                    (refused if reply.startswith("TRYAGAIN") else other).append((job_id, now, reply))
                    time.sleep(0.002)
                else:
                    acked[job_id] = now
            raw.close()

        threads = [threading.Thread(target=publisher, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        try:
            time.sleep(0.5)
            changed = time.monotonic()
            r.config_set("maxmemory-policy", "allkeys-lru")
            wait_for("publishes refused", lambda: refused, timeout=3)
            time.sleep(1.5)
            late = sorted(t - changed for t in acked.values() if t > changed + 1.0)
            self.assertEqual(late, [], "publishes acknowledged more than 1 s after the change")
            first = min(t for _, t, _ in refused)
            self.assertLess(first - changed, 1.0)
            self.assertIn("maxmemory-policy is allkeys-lru, deferq needs noeviction", refused[0][2])
            # Reads go on meanwhile.
            raw = Raw(dq.port)
            self.assertIsInstance(raw.call("QSTAT", "orders"), list)
            self.assertEqual(info_pool(raw)["writes"], "evicting")
            self.assertIn("refuses writes (TRYAGAIN), reads go on: maxmemory-policy is allkeys-lru",
                          read_log(dq))
            r.config_set("maxmemory-policy", "noeviction")
            wait_for("writes accepted again",
                     lambda: not isinstance(raw.call("PUBLISH", "orders", "after"), Err), timeout=3)
            wait_for("every connection writing", lambda: info_pool(raw)["writes"] == "ok", timeout=3)
            self.assertIn("is safe to write again", read_log(dq))
        finally:
            stop.set()
            for t in threads:
                t.join(30)
        self.assertEqual(other, [])
        # Every acknowledged publish is there; no refused one is.
        raw = Raw(dq.port)
        for job_id in acked:
            self.assertIsNotNone(raw.call("JOB", "orders", job_id), job_id)
        for job_id, _, _ in refused:
            self.assertIsNone(raw.call("JOB", "orders", job_id), job_id)
        self.assertGreater(len(refused), 0)
        self.assertRegex(raw.call("INFO", "pools").decode(), r"refused_evicting=[1-9]")

    def test_an_eviction_between_two_readings_refuses_writes_until_none_follows(self):
        redis = self.redis()
        dq = self.deferq(redis.port)
        r = redis.client()
        raw = Raw(dq.port)
        self.assertFalse(isinstance(raw.call("PUBLISH", "q", "before"), Err))
        # An eviction deferq's reading does not see the policy of: evicting for a moment only.
        for i in range(200):
            r.set("filler:%d" % i, "x" * 1000)
        used = r.info("memory")["used_memory"]
        r.config_set("maxmemory", used - 50000)
        r.config_set("maxmemory-policy", "allkeys-random")
        r.set("one-more", "x")
        r.config_set("maxmemory-policy", "noeviction")
        r.config_set("maxmemory", 0)
        self.assertGreater(r.info("stats")["evicted_keys"], 0)
        reply = wait_for("a write refused after the eviction",
                         lambda: (lambda x: x if isinstance(x, Err) else None)(
                             raw.call("PUBLISH", "q", "during")), timeout=3)
        self.assertTrue(reply.startswith("TRYAGAIN pool 'default' unavailable: "), reply)
        self.assertTrue("evicted" in reply or "allkeys-random" in reply, reply)
        wait_for("writes again", lambda: not isinstance(raw.call("PUBLISH", "q", "after"), Err),
                 timeout=3)


class MaxmemoryTest(Case):
    def fill(self, raw, queue, size=300):
        n = 0
        while n < 100000:
            reply = raw.call("PUBLISH", queue, "x" * size, "TRIES", 2)
            if isinstance(reply, Err):
                return n, reply
            n += 1
        self.fail("Redis never got full")

    def test_a_full_redis_drains_and_answers_reads_and_publish_names_the_pool(self):
        redis = self.redis()
        r = redis.client()
        dq = self.deferq(redis.port)
        raw = Raw(dq.port)
        first = raw.call("PUBLISH", "full", "first", "ID", "first")
        self.assertEqual(first, b"first")
        self.assertNotIsInstance(raw.call("PUBLISH", "dlq", "to die"), Err)
        self.assertNotIsInstance(raw.call("PUBLISH", "other", "kept", "ID", "kept"), Err)
        r.config_set("maxmemory", r.info("memory")["used_memory"] + 600000)
        n, err = self.fill(raw, "full", size=1000)
        self.assertGreater(n, 100)
        self.assertTrue(err.startswith("OOM pool 'default' is full"), err)
        self.assertIn("the command was not applied", err)
        # Reads.
        self.assertEqual(qstat(raw, "full")[b"ready"], n + 1)
        self.assertEqual(len(raw.call("PEEK", "full", "COUNT", 3)), 3)
        self.assertEqual(raw.call("JOB", "full", "first")[5], b"ready")
        self.assertEqual(raw.call("DEADLETTER", "SIZE", "full"), 0)
        self.assertEqual(raw.call("DEADLETTER", "PEEK", "full"), [])
        self.assertIn(b"full", raw.call("QUEUES"))
        # What frees or keeps memory.
        jobs = raw.call("CONSUME", "full", "COUNT", 5, "TTR", 60)
        self.assertEqual(len(jobs), 5)
        self.assertEqual(raw.call("ACK", "full", jobs[0][1]), 1)
        self.assertEqual(raw.call("TOUCH", "full", jobs[1][1], "TTR", 30), 1)
        self.assertEqual(raw.call("NACK", "full", jobs[1][1]), 1)
        self.assertEqual(raw.call("CANCEL", "full", jobs[2][1]), 1)
        # A job that runs out of tries goes to the dead letter, and back.
        dead = raw.call("CONSUME", "dlq", "TTR", 60)
        self.assertEqual(raw.call("NACK", "dlq", dead[1]), 1)
        self.assertEqual(raw.call("DEADLETTER", "SIZE", "dlq"), 1)
        self.assertEqual(raw.call("DEADLETTER", "PEEK", "dlq")[0][1], dead[1])
        self.assertEqual(raw.call("DEADLETTER", "RESPAWN", "dlq"), 1)
        self.assertEqual(qstat(raw, "dlq")[b"ready"], 1)
        # Pipelined consumes and acks (batched calls) work too.
        pipe = [("CONSUME", "full", "TTR", 60)] * 10
        got = raw.pipeline(pipe)
        self.assertTrue(all(isinstance(j, list) for j in got), (got, qstat(raw, "full")))
        acks = raw.pipeline([("ACK", "full", j[1]) for j in got])
        self.assertEqual(acks, [1] * 10)
        self.assertIn("is full (used memory over maxmemory)", read_log(dq))
        self.assertEqual(info_pool(raw)["writes"], "full")
        # Still full: a publish is refused, with the pool named.
        self.assertTrue(raw.call("PUBLISH", "full", "x" * 300000).startswith("OOM pool 'default'"))
        # deferq started against the full Redis serves reads; the library is not loaded again.
        loads = function_loads(r)
        dq2 = self.deferq(redis.port)
        raw2 = Raw(dq2.port)
        self.assertEqual(raw2.call("JOB", "other", "kept")[5], b"ready")
        self.assertIsInstance(raw2.call("CONSUME", "full"), list)
        self.assertEqual(function_loads(r), loads)
        dq2.stop()
        # Purging frees it: publishes go through again.
        self.assertGreater(raw.call("PURGE", "full"), 0)
        last = []

        def accepted():
            last[:] = [raw.call("PUBLISH", "full", "y"), r.info("memory")["used_memory"],
                       r.config_get("maxmemory")]
            return not isinstance(last[0], Err)
        try:
            wait_for("a publish accepted", accepted)
        except AssertionError:
            self.fail("no publish accepted after PURGE: %r" % (last,))

    def test_the_library_is_loaded_once_per_redis_not_once_per_connection(self):
        redis = self.redis(appendonly=True)
        r = redis.client()
        for _ in range(3):
            dq = self.deferq(redis.port, threads=2)
            dq.stop()
        self.assertEqual(function_loads(r), 1)
        aof = r.info("persistence")["aof_current_size"] if "aof_current_size" in r.info(
            "persistence") else None
        if aof is not None:
            self.assertLess(aof, 200000)


class FullDiskTest(Case):
    """Redis with AOF on a full file system: MISCONF for writes, reads go on."""

    def full_disk(self):
        """A directory on a 2 MiB tmpfs; None where mounting is refused."""
        path = os.path.join(self.tmp, "disk")
        os.makedirs(path)
        if subprocess.call(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", path],
                           stderr=subprocess.DEVNULL) != 0:
            return None
        self.cleanups.append(lambda: subprocess.call(["umount", "-l", path]))
        return path

    def test_a_full_aof_disk_refuses_writes_with_misconf_while_reads_work(self):
        path = self.full_disk()
        if path is not None:
            redis = self.redis(appendonly=True, directory=path)
        else:
            # No mount here: a file size limit gives Redis the same failed AOF writes (EFBIG).
            redis = procs.Redis(self.tmp, appendonly=True)
            redis.preexec = lambda: (signal.signal(signal.SIGXFSZ, signal.SIG_IGN),
                                     resource.setrlimit(resource.RLIMIT_FSIZE, (2 << 20, 2 << 20)))
            self.servers.append(redis)
            redis.start()
        dq = self.deferq(redis.port)
        raw = Raw(dq.port)
        raw.call("PUBLISH", "disk", "first", "ID", "first")
        n, err = 0, None
        while n < 50000:
            reply = raw.call("PUBLISH", "disk", "x" * 500)
            if isinstance(reply, Err):
                err = reply
                break
            n += 1
        self.assertIsNotNone(err, "the disk never filled")
        self.assertTrue(err.startswith("MISCONF pool 'default' cannot persist to disk"), err)
        for c in (("QSTAT", "disk"), ("PEEK", "disk"), ("JOB", "disk", "first"),
                  ("DEADLETTER", "SIZE", "disk"), ("DEADLETTER", "PEEK", "disk"), ("QUEUES",)):
            self.assertNotIsInstance(raw.call(*c), Err, c)
        self.assertEqual(raw.call("JOB", "disk", "first")[5], b"ready")
        consume = raw.call("CONSUME", "disk")
        self.assertTrue(isinstance(consume, Err) and consume.startswith("MISCONF pool 'default'"),
                        consume)
        log = read_log(dq)
        self.assertIn("cannot persist (MISCONF", log)
        self.assertEqual(info_pool(raw)["writes"], "misconf")
        if path is not None:
            subprocess.check_call(["mount", "-o", "remount,size=64m", path])
            wait_for("writes accepted again",
                     lambda: not isinstance(raw.call("PUBLISH", "disk", "after"), Err), timeout=5)
            wait_for("the log line", lambda: "persists again" in read_log(dq))


class LoadingTest(Case):
    def test_a_redis_loading_its_dataset_is_waited_for_without_a_false_aof_warning(self):
        redis = self.redis(appendonly=True)
        r = redis.client()
        pipe = r.pipeline(transaction=False)
        for i in range(3000):
            pipe.set("filler:%d" % i, "x")
        pipe.execute()
        # Rewritten, so the AOF's base is in RDB form: Redis loads it key by key (key-load-delay
        # applies) and answers clients every KiB it has loaded.
        r.bgrewriteaof()
        wait_for("the AOF rewrite", lambda: r.info("persistence")["aof_rewrite_in_progress"] == 0
                 and r.info("persistence")["aof_rewrite_scheduled"] == 0)
        dq = self.deferq(redis.port)
        raw = Raw(dq.port)
        self.assertNotIsInstance(raw.call("PUBLISH", "q", "before"), Err)
        # Restarted with a slow load (1 ms per key: about 3 s loading its AOF, answering clients
        # every KiB loaded: -LOADING, and INFO with loading:1). Not through
        # start(), which waits for PING: a loading Redis answers -LOADING.
        redis.stop()
        redis.extra = ["--key-load-delay", "1000", "--loading-process-events-interval-bytes", "1024"]
        with open(redis.log, "ab") as log:
            redis.proc = subprocess.Popen(redis.argv(redis.port), stdout=log,
                                          stderr=subprocess.STDOUT)
        wait_for("Redis loading", lambda: b"loading:1" in (
            subprocess.run(["redis-cli", "-p", str(redis.port), "INFO", "persistence"],
                           capture_output=True).stdout), timeout=10, step=0.02)
        reply = raw.call("PUBLISH", "q", "during")
        self.assertIsInstance(reply, Err)
        self.assertTrue(reply.startswith("TRYAGAIN pool 'default' unavailable"), reply)
        wait_for("the pool back", lambda: not isinstance(raw.call("PUBLISH", "q", "after"), Err),
                 timeout=20)
        log = read_log(dq)
        self.assertIn("Redis is loading its dataset into memory", log)
        self.assertNotIn("AOF is off", log)
        self.assertEqual(qstat(raw, "q")[b"ready"], 2)


class SignalsTest(Case):
    def test_sighup_is_logged_reloads_the_log_level_and_deferq_serves_on(self):
        redis = self.redis()
        dq = self.deferq(redis.port, '[server]\nloglevel = "warning"\n')
        with open(dq.config, "a") as f:
            f.write("")
        text = open(dq.config).read().replace('loglevel = "warning"', 'loglevel = "debug"')
        with open(dq.config, "w") as f:
            f.write(text)
        dq.proc.send_signal(signal.SIGHUP)
        wait_for("the reload line", lambda: "loglevel warning -> debug" in read_log(dq))
        dq.proc.send_signal(signal.SIGHUP)
        wait_for("a second reload", lambda: "loglevel debug -> debug" in read_log(dq))
        self.assertIsNone(dq.proc.poll())
        self.assertEqual(Raw(dq.port).call("PING"), b"PONG")


class Traffic:
    """Publishers (custom ids, half of them delayed 1 s) and a consumer that acks, on one queue,
    recording what every command answered."""

    def __init__(self, port, queue="q", publishers=3):
        self.port = port
        self.queue = queue
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.acked_publishes = set()
        self.refused_publishes = set()   # TRYAGAIN: never applied
        self.unknown_publishes = set()   # TIMEOUT: may have been applied
        self.other_errors = []
        self.delivered = set()
        self.acked_jobs = set()
        self.unknown_acks = set()  # ACK answered TIMEOUT: it may have been applied
        self.threads = [threading.Thread(target=self._publish, args=(n,)) for n in range(publishers)]
        self.threads.append(threading.Thread(target=self._consume))

    def start(self):
        for t in self.threads:
            t.start()
        return self

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join(60)

    def _publish(self, n):
        raw = Raw(self.port, timeout=10.0)
        i = 0
        while not self.stop.is_set() and i < 5000:
            job_id = "j%d-%d" % (n, i)
            # Faults redeliver (a lease whose reply was lost ends after its TTR): tries to spare.
            args = ["PUBLISH", self.queue, "payload-" + job_id, "ID", job_id, "TTL", 600,
                    "TRIES", 100]
            if i % 2:
                args += ["DELAY", 1]
            i += 1
            reply = raw.call(*args)
            with self.lock:
                if not isinstance(reply, Err):
                    self.acked_publishes.add(job_id)
                elif reply.startswith("TRYAGAIN"):
                    self.refused_publishes.add(job_id)
                elif reply.startswith("TIMEOUT"):
                    self.unknown_publishes.add(job_id)
                else:
                    self.other_errors.append(reply)
            time.sleep(0.003)
        raw.close()

    def consume_once(self, raw, timeout):
        job = raw.call("CONSUME", self.queue, "TTR", 2, "TIMEOUT", str(timeout))
        if isinstance(job, Err):
            if not job.startswith(("TRYAGAIN", "TIMEOUT")):
                with self.lock:
                    self.other_errors.append(job)
            time.sleep(0.02)
            return False
        if job is None:
            return False
        job_id = job[1].decode()
        with self.lock:
            self.delivered.add(job_id)
        ack = raw.call("ACK", self.queue, job_id)
        if ack == 1:
            with self.lock:
                self.acked_jobs.add(job_id)
        elif isinstance(ack, Err) and ack.startswith("TIMEOUT"):
            with self.lock:
                self.unknown_acks.add(job_id)
        elif isinstance(ack, Err) and not ack.startswith("TRYAGAIN"):
            with self.lock:
                self.other_errors.append(ack)
        return True

    def _consume(self):
        raw = Raw(self.port, timeout=10.0)
        while not self.stop.is_set():
            self.consume_once(raw, 0.2)
        raw.close()


class ProxyFaultTest(Case):
    """deferq -> FaultProxy -> Redis under publish and consume traffic; after the fault is gone,
    every acknowledged publish is delivered and acked, no refused one exists, nothing is stuck."""

    def run_fault(self, fault):
        redis = self.redis()
        proxy = FaultProxy(redis.port).start()
        self.cleanups.append(proxy.stop)
        dq = self.deferq(proxy.port, "timeout_ms = 1000\n")
        traffic = Traffic(dq.port).start()
        try:
            time.sleep(0.8)
            fault(proxy)
            proxy.clear()
            time.sleep(0.8)
        finally:
            traffic.finish()
        self.assertEqual(traffic.other_errors, [])
        self.assertGreater(len(traffic.acked_publishes), 50)
        # Drain: every job in Redis is delivered (leases of failed ACKs end after their TTR).
        raw = Raw(dq.port)
        must = traffic.acked_publishes

        def done():
            # Acked, or delivered and acked with a TIMEOUT that took effect (the job is gone).
            return {j for j in must - traffic.acked_jobs
                    if j not in traffic.unknown_acks or raw.call("JOB", "q", j) is not None}
        deadline = time.monotonic() + 20
        while done() and time.monotonic() < deadline:
            traffic.consume_once(raw, 0.5)
        missing = sorted(done())
        self.assertEqual(missing, [], "acknowledged publishes lost or stuck: %r; log:\n%s" % (
            [(j, raw.call("JOB", "q", j)) for j in missing[:5]], dq.log_tail(40)))
        self.assertEqual(sorted(traffic.refused_publishes & traffic.delivered), [],
                         "TRYAGAIN publishes that were applied")
        for job_id in traffic.refused_publishes:
            self.assertIsNone(raw.call("JOB", "q", job_id), job_id)
        # What TIMEOUT left applied is delivered too; then the queue is empty.
        while True:
            if not traffic.consume_once(raw, 0.5):
                st = qstat(raw, "q")
                if st[b"ready"] == st[b"delayed"] == st[b"leased"] == 0:
                    break
                self.assertLess(time.monotonic(), deadline + 10, "jobs stuck: %r" % st)
        self.assertEqual(traffic.other_errors, [])
        return traffic, proxy, dq

    def test_latency_below_and_above_the_upstream_timeout(self):
        def fault(proxy):
            proxy.delay(0.3)
            time.sleep(1.5)
            proxy.delay(1.6)
            time.sleep(2.5)
        traffic, _, dq = self.run_fault(fault)
        self.assertIn("connection down", read_log(dq))

    def test_replies_cut_in_the_middle(self):
        def fault(proxy):
            for _ in range(6):
                proxy.cut_next_reply()
                time.sleep(0.25)
        _, proxy, _ = self.run_fault(fault)
        self.assertGreater(proxy.cuts, 0)

    def test_half_closed_connections(self):
        def fault(proxy):
            for _ in range(3):
                proxy.half_close()
                time.sleep(0.4)
        self.run_fault(fault)

    def test_reset_connections(self):
        def fault(proxy):
            for _ in range(3):
                proxy.reset()
                time.sleep(0.4)
        self.run_fault(fault)

    def test_a_black_hole_then_recovery(self):
        def fault(proxy):
            proxy.drop(True)
            time.sleep(1.5)
            proxy.drop(False)
        self.run_fault(fault)


def main(argv):
    return runner.main_with_deferq(__name__, argv, "test_adversarial.py DEFERQ [unittest args]")


if __name__ == "__main__":
    sys.exit(main(sys.argv))
