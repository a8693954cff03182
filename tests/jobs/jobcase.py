"""The base of the job-command suites (tests/jobs/test_*.py): one redis-server and one deferq
for the whole run, JobTestCase with its client helpers and exact-reply assertions, and main().

    /usr/bin/python3 tests/jobs/test_jobs.py /path/to/deferq [unittest args, e.g. -k ttl]
    /usr/bin/python3 tests/jobs/test_publish.py /path/to/deferq      (one part alone)

test_jobs.py runs every part (test_publish, test_consume, test_queues, test_shapes,
test_instances); each part also runs on its own. Processes, the raw RESP client and the runner
come from the shared harness in tests/lib/dqtest.

Timing: the server's pump currently runs every 100 ms, so a job may be up to LATE_MS late; a job
is never allowed to be early, which is asserted strictly against the wall clock (client and server
share the machine's clock).
"""

import math
import os
import sys
import threading
import time
import types
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))

from dqtest import procs, runner  # noqa: E402
from dqtest.ids import CROCKFORD, id_time_ms  # noqa: E402,F401  (for the parts)
from dqtest.resp import Err, Raw, RMap, encode  # noqa: E402,F401  (RMap, encode: for the parts)

try:
    import redis
except ImportError:  # pragma: no cover - the environment is wrong, say so clearly
    sys.stderr.write("the job tests need redis-py: run them with /usr/bin/python3\n")
    sys.exit(2)

LATE_MS = 300          # allowed delivery lateness (pump tick 100 ms + slack on a busy machine)
WAKE_MS = 50           # a blocked consumer must be woken this fast by a PUBLISH
# Across instances the issue-3 contract is "at the latest one pump interval (100 ms) later";
# the cross-instance wake of issue 4 will bring this down to WAKE_MS.
CROSS_INSTANCE_WAKE_MS = 150
MAX_PAYLOAD = 4096     # main server's [server] max_payload
JOB_FIELDS = [b"id", b"queue", b"state", b"payload", b"tries_left", b"attempt", b"created_ms",
              b"due_ms", b"ttl_left_s", b"every_s", b"backoff_s", b"last_error",
              b"last_error_attempt", b"last_error_ms", b"cron", b"tz", b"priority",
              b"result", b"finished_ms"]
QSTAT_FIELDS = [b"ready", b"delayed", b"leased", b"dead", b"published_total", b"consumed_total",
                b"acked_total", b"expired_total", b"dead_total", b"paused", b"schedules"]
DEFAULT_TTL = 86400
DEFAULT_TTR_MS = 120 * 1000


def now_ms():
    return time.time() * 1000.0


def lo(t):  # a "before" timestamp, floored: the server's integer ms clock is >= this
    return math.floor(t)


def hi(t):  # an "after" timestamp, ceiled
    return math.ceil(t)


MAIN_CONFIG = """\
[server]
max_payload = %d
max_bulk_len = 65536
""" % MAX_PAYLOAD

# The run's shared servers, set by main(): deferq = the binary under test, tmpdir, redis (the
# procs.Redis every test flushes) and dq (the main procs.Deferq).
ENV = types.SimpleNamespace(deferq=None, tmpdir=None, redis=None, dq=None)


def start_deferq(redis_port, config_text, name):
    return procs.Deferq(ENV.deferq, ENV.tmpdir, redis_port, config_text, name).start()


# --------------------------------------------------------------------------------------------
# Test base
# --------------------------------------------------------------------------------------------

class Consumer(threading.Thread):
    """Runs one (blocking) command on its own connection; records when it returned."""

    def __init__(self, port, *args, raw=False):
        super().__init__(daemon=True)
        self.port = port
        self.args = args
        self.raw = raw
        self.result = None
        self.error = None
        self.t_sent = None
        self.t_done = None
        if raw:
            self.conn = Raw(port)
        else:
            self.conn = redis.Redis(host="127.0.0.1", port=port, socket_timeout=20,
                                    single_connection_client=True)
            self.conn.ping()

    def run(self):
        try:
            self.t_sent = now_ms()
            if self.raw:
                self.result = self.conn.call(*self.args)
            else:
                self.result = self.conn.execute_command(*self.args)
        except Exception as e:  # reported by the test
            self.error = e
        finally:
            self.t_done = now_ms()

    def finish(self, timeout=20):
        self.join(timeout)
        if self.is_alive():
            raise AssertionError("consumer %r did not return" % (self.args,))
        if self.error is not None:
            raise AssertionError("consumer %r failed: %r" % (self.args, self.error))
        return self.result

    def close(self):
        try:
            self.conn.close()
        except Exception:
            pass


class JobTestCase(unittest.TestCase):
    dq = None  # the Deferq instance under test; None = the module's main one

    @classmethod
    def server(cls):
        return cls.dq or ENV.dq

    def setUp(self):
        srv = self.server()
        if not srv.alive():
            srv.start()
        self.port = srv.port
        self.r = redis.Redis(host="127.0.0.1", port=ENV.redis.port, socket_timeout=10)
        self.r.flushall()
        self.c = self.client()
        self.raw = Raw(self.port)
        self.q = "q." + self._testMethodName[5:60]
        self._closers = [self.r.close, self.c.close, self.raw.close]

    def tearDown(self):
        for close in self._closers:
            try:
                close()
            except Exception:
                pass
        srv = self.server()
        if not srv.alive():
            rc = srv.proc.returncode
            tail = srv.log_tail()
            srv.start()
            raise AssertionError("deferq exited during this test (rc=%s); log tail:\n%s"
                                 % (rc, tail))

    # ---- clients

    def client(self, port=None):
        c = redis.Redis(host="127.0.0.1", port=port or self.port, socket_timeout=20,
                        single_connection_client=True, decode_responses=False)
        self._closers_add(c.close)
        return c

    def raw_client(self, port=None):
        r = Raw(port or self.port)
        self._closers_add(r.close)
        return r

    def _closers_add(self, fn):
        if hasattr(self, "_closers"):
            self._closers.append(fn)

    def consumer(self, *args, raw=False, port=None):
        t = Consumer(port or self.port, *args, raw=raw)
        self._closers_add(t.close)
        return t

    # ---- commands

    def cmd(self, *args, client=None):
        return (client or self.c).execute_command(*args)

    def pub(self, q, payload, *opts, client=None):
        jid = self.cmd("PUBLISH", q, payload, *opts, client=client)
        self.assertIsInstance(jid, bytes, "PUBLISH %r %r %r" % (q, payload, opts))
        return jid

    def pub_timed(self, q, payload, *opts):
        t0 = now_ms()
        jid = self.pub(q, payload, *opts)
        return jid, t0, now_ms()

    def consume(self, *args, client=None):
        return self.cmd("CONSUME", *args, client=client)

    def consume_timed(self, *args, client=None):
        t0 = now_ms()
        r = self.consume(*args, client=client)
        return r, t0, now_ms()

    def job(self, q, jid, client=None):
        reply = self.cmd("JOB", q, jid, client=client)
        if reply is None:
            return None
        self.assertIsInstance(reply, list, "JOB %s %r" % (q, jid))
        keys = reply[0::2]
        self.assertEqual(keys, JOB_FIELDS, "JOB %s %r field names/order: %r" % (q, jid, reply))
        d = dict(zip(keys, reply[1::2]))
        for k in (b"tries_left", b"attempt", b"created_ms", b"due_ms", b"ttl_left_s", b"every_s",
                  b"backoff_s", b"last_error_attempt", b"last_error_ms", b"priority"):
            self.assertIsInstance(d[k], int, "JOB %s %r: %s is not an integer: %r" % (q, jid, k, d))
        return d

    def qstat(self, q, client=None):
        reply = self.cmd("QSTAT", q, client=client)
        self.assertIsInstance(reply, list, "QSTAT %s" % q)
        keys = reply[0::2]
        self.assertEqual(keys, QSTAT_FIELDS, "QSTAT %s field names/order: %r" % (q, reply))
        d = {k.decode(): v for k, v in zip(keys, reply[1::2])}
        for k, v in d.items():
            self.assertIsInstance(v, int, "QSTAT %s: %s not an integer: %r" % (q, k, reply))
        return d

    def assertQstat(self, q, msg="", **expected):
        """Exact QSTAT: every field not named must be 0."""
        want = {k.decode(): 0 for k in QSTAT_FIELDS}
        for k, v in expected.items():
            self.assertIn(k, want)
            want[k] = v
        self.assertEqual(self.qstat(q), want, "QSTAT %s %s" % (q, msg))

    def assertTtl(self, got, ttl, what=""):
        if ttl == -1:
            self.assertEqual(got, -1, what)
        else:
            self.assertIsInstance(got, int, what)
            self.assertIn(got, (ttl, ttl - 1), "ttl_left_s %r, want %d (or %d) %s"
                          % (got, ttl, ttl - 1, what))

    def assertJobReply(self, reply, q, jid, payload, tries_left, ttl=DEFAULT_TTL, what="",
                       born=None, at=None):
        """A job, the same array in RESP2 and RESP3: [queue, id, payload, tries_left, ttl_left_s,
        attempt, elapsed_ms].
        born=(t0, t1): when the job's ttl started counting (its PUBLISH, or the due time of an
        EVERY occurrence); at=(t0, t1): when the reply was produced (default: before now).
        Then ttl_left_s = ttl - age, rounded either way, for an age in the window these give.
        Without born the job is assumed to be under a second old: ttl or ttl - 1."""
        what = "%s reply=%r" % (what, reply)
        self.assertIsInstance(reply, list, what)
        self.assertEqual(len(reply), 7, what)
        self.assertIsInstance(reply[5], int, what)  # attempt: deliveries so far
        self.assertGreaterEqual(reply[5], 0, what)
        self.assertIsInstance(reply[6], int, what)  # elapsed_ms since publish
        self.assertGreaterEqual(reply[6], 0, what)
        self.assertEqual(reply[0], q.encode() if isinstance(q, str) else q, what)
        if jid is not None:
            self.assertEqual(reply[1], jid, what)
        self.assertEqual(reply[2], payload, what)
        self.assertIsInstance(reply[3], int, what)
        self.assertEqual(reply[3], tries_left, what)
        if ttl is not None and born is not None and ttl != -1:
            age_max = (at[1] if at else now_ms()) - born[0]
            age_min = max(0.0, at[0] - born[1]) if at else 0.0
            low = math.floor(ttl - age_max / 1000.0)
            high = math.ceil(ttl - age_min / 1000.0)
            self.assertIsInstance(reply[4], int, what)
            self.assertTrue(low <= reply[4] <= high,
                            "ttl_left_s %r not in [%d, %d]: ttl %d counted from %.0f..%.0f ms "
                            "before the reply %s" % (reply[4], low, high, ttl, age_min, age_max,
                                                     what))
        elif ttl is not None:
            self.assertTtl(reply[4], ttl, what)

    def expect_errors(self, cases, client=None):
        """cases: [(args, expected error text)]. Collects every mismatch, then fails once."""
        raw = client or self.raw
        bad = []
        for args, want in cases:
            got = raw.call(*args)
            if not (isinstance(got, Err) and got == want):
                bad.append("  request %r\n    want -%s\n    got  %r" % (list(args), want, got))
        self.assertEqual(raw.call("PING"), b"PONG", "connection unusable after errors")
        if bad:
            self.fail("%d of %d error cases wrong:\n%s" % (len(bad), len(cases), "\n".join(bad)))

    def poll_consume(self, *args, until_ms, client=None):
        """Polls CONSUME (non-blocking) until a job comes or until_ms passes.
        Returns (reply, t_sent, t_returned) of the last attempt."""
        while True:
            t0 = now_ms()
            r = self.consume(*args, client=client)
            t1 = now_ms()
            if r is not None or t1 > until_ms:
                return r, t0, t1
            time.sleep(0.005)

    def assertDeliveredOnTime(self, due_ms, t_sent, t_returned, what=""):
        """Never early (strict), at most LATE_MS late."""
        self.assertGreaterEqual(hi(t_returned), due_ms,
                                "%s delivered %.1f ms BEFORE its due time" % (what, due_ms - t_returned))
        self.assertLessEqual(t_sent - due_ms, LATE_MS,
                             "%s delivered %.0f ms late" % (what, t_sent - due_ms))

    def sleep_until(self, t_ms):
        d = (t_ms - now_ms()) / 1000.0
        if d > 0:
            time.sleep(d)



class TwoInstancesCase(JobTestCase):
    """A second deferq (`second_config`, started once per class) on the same Redis as the main
    one: `self.b` is a client of it, `dq_b` the process."""
    second_config, second_name = MAIN_CONFIG, "deferq-b"
    dq_b = None

    @classmethod
    def setUpClass(cls):
        cls.dq_b = start_deferq(ENV.redis.port, cls.second_config, cls.second_name)

    @classmethod
    def tearDownClass(cls):
        if cls.dq_b:
            cls.dq_b.stop()

    def setUp(self):
        super().setUp()
        if not self.dq_b.alive():
            self.dq_b.start()
        self.b = self.client(self.dq_b.port)


def main(module):
    """Runs the tests of `module` (a name) against the deferq binary named by argv[1], with one
    redis-server and one deferq shared by all of them; unittest options follow the binary."""
    ENV.deferq = runner.binary_arg(sys.argv, "%s /path/to/deferq [unittest options]"
                                   % sys.argv[0])
    if ENV.deferq is None:
        return 2
    ENV.tmpdir = procs.make_tmpdir("jobs")
    try:
        try:
            ENV.redis = procs.Redis(ENV.tmpdir).start()
            ENV.dq = start_deferq(ENV.redis.port, MAIN_CONFIG, "deferq-main")
        except RuntimeError as e:  # no server, no test: say why, and count it as the failure
            print("cannot start the servers: %s\n0 passed, 1 failed" % e)
            return 1
        return runner.main(module, sys.argv)
    finally:
        if ENV.dq:
            ENV.dq.stop()
        if ENV.redis:
            ENV.redis.stop()
        procs.remove_tmpdir(ENV.tmpdir)
