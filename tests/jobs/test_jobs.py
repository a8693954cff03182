#!/usr/bin/python3
"""Integration tests for deferq's job commands (SPEC §3, §4, §8).

    /usr/bin/python3 tests/jobs/test_jobs.py /path/to/deferq [unittest args, e.g. -k ttl]

Starts its own redis-server and deferq on free loopback ports (127.0.0.1 only), drives every job
command through redis-py (RESP2) and a small raw RESP client (exact bytes, error texts, RESP3),
and stops both servers at the end. Ends with the line "N passed, M failed" and exits non-zero when
any test failed.

Needs redis-py (Debian's python3-redis), hence /usr/bin/python3.

Timing: the server's pump currently runs every 100 ms, so a job may be up to LATE_MS late; a job
is never allowed to be early, which is asserted strictly against the wall clock (client and server
share the machine's clock).
"""

import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

try:
    import redis
except ImportError:  # pragma: no cover - the environment is wrong, say so clearly
    sys.stderr.write("test_jobs.py needs redis-py: run it with /usr/bin/python3\n")
    sys.exit(2)

DEFERQ = None          # path of the binary under test (argv[1])
LATE_MS = 300          # allowed delivery lateness (pump tick 100 ms + slack on a busy machine)
WAKE_MS = 50           # a blocked consumer must be woken this fast by a PUBLISH
# Across instances the issue-3 contract is "at the latest one pump interval (100 ms) later";
# the cross-instance wake of issue 4 will bring this down to WAKE_MS.
CROSS_INSTANCE_WAKE_MS = 150
MAX_PAYLOAD = 4096     # main server's [server] max_payload
CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
JOB_FIELDS = [b"id", b"queue", b"state", b"payload", b"tries_left", b"attempt", b"created_ms",
              b"due_ms", b"ttl_left_s", b"every_s", b"backoff_s"]
QSTAT_FIELDS = [b"ready", b"delayed", b"leased", b"dead", b"published_total", b"consumed_total",
                b"acked_total", b"expired_total", b"dead_total"]
RESP3_JOB_KEYS = {b"queue", b"id", b"payload", b"tries_left", b"ttl_left_s", b"elapsed_ms",
                  b"attempt"}
DEFAULT_TTL = 86400
DEFAULT_TTR_MS = 120 * 1000


def now_ms():
    return time.time() * 1000.0


def lo(t):  # a "before" timestamp, floored: the server's integer ms clock is >= this
    return math.floor(t)


def hi(t):  # an "after" timestamp, ceiled
    return math.ceil(t)


def id_time_ms(job_id):
    """The 48-bit timestamp of a generated id (first 10 Crockford base32 characters)."""
    v = 0
    for ch in job_id[:10].decode("ascii"):
        v = v * 32 + CROCKFORD.index(ch)
    return v


# --------------------------------------------------------------------------------------------
# Raw RESP client (exact bytes, full error texts, RESP3)
# --------------------------------------------------------------------------------------------

class Err(str):
    """An error reply; the text is the line without the leading '-'."""


class Status(bytes):
    """A simple-string reply."""


class RMap(list):
    """A RESP3 map, kept as an ordered list of (key, value) pairs."""

    def as_dict(self):
        return dict(self)

    def keys_in_order(self):
        return [k for k, _ in self]


class Null3:
    """RESP3 null (`_`)."""

    def __repr__(self):
        return "Null3"

    def __eq__(self, other):
        return isinstance(other, Null3)

    def __hash__(self):
        return 0


NULL3 = Null3()


def encode(args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        if isinstance(a, int):
            a = str(a).encode()
        elif isinstance(a, str):
            a = a.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


class Raw:
    def __init__(self, port, timeout=15.0):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        self.consumed = []

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def send(self, *args):
        self.sock.sendall(encode(args))

    def send_bytes(self, data):
        self.sock.sendall(data)

    def _fill(self):
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionError("connection closed by deferq")
        self.buf += chunk

    def _line(self):
        while True:
            i = self.buf.find(b"\r\n")
            if i >= 0:
                line, self.buf = self.buf[:i], self.buf[i + 2:]
                self.consumed.append(line + b"\r\n")
                return line
            self._fill()

    def _exact(self, n):
        while len(self.buf) < n + 2:
            self._fill()
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        self.consumed.append(data + b"\r\n")
        return data

    def _parse(self):
        line = self._line()
        t, rest = line[:1], line[1:]
        if t == b"+":
            return Status(rest)
        if t == b"-":
            return Err(rest.decode("utf-8", "replace"))
        if t in (b":", b"("):
            return int(rest)
        if t == b"$":
            n = int(rest)
            return None if n < 0 else self._exact(n)
        if t == b"=":
            return self._exact(int(rest))[4:]
        if t in (b"*", b"~", b">"):
            n = int(rest)
            return None if n < 0 else [self._parse() for _ in range(n)]
        if t == b"%":
            n = int(rest)
            m = RMap()
            for _ in range(n):
                k = self._parse()
                m.append((k, self._parse()))
            return m
        if t == b"|":
            for _ in range(int(rest) * 2):
                self._parse()
            return self._parse()
        if t == b"_":
            return NULL3
        if t == b",":
            return float(rest)
        if t == b"#":
            return rest == b"t"
        raise ValueError("unexpected RESP type byte in %r" % line)

    def read(self):
        self.consumed = []
        return self._parse()

    def read_bytes(self):
        """One reply, as the exact bytes on the wire."""
        self.read()
        return b"".join(self.consumed)

    def call(self, *args):
        self.send(*args)
        return self.read()

    def call_bytes(self, *args):
        self.send(*args)
        return self.read_bytes()


# --------------------------------------------------------------------------------------------
# Processes
# --------------------------------------------------------------------------------------------

def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def answers_ping(port):
    try:
        r = Raw(port, timeout=0.5)
        try:
            return r.call("PING") == b"PONG"
        finally:
            r.close()
    except (OSError, ConnectionError, ValueError):
        return False


def stop_process(proc, bound=5.0):
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(bound)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


class Redis:
    def __init__(self, tmpdir, extra=(), port=None):
        self.tmpdir = tmpdir
        self.extra = list(extra)
        self.port = port
        self.proc = None

    def start(self):
        for _ in range(5):
            port = self.port or free_port()
            log = open(os.path.join(self.tmpdir, "redis-%d.log" % port), "ab")
            self.proc = subprocess.Popen(
                ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                 "--appendonly", "no", "--dir", self.tmpdir] + self.extra,
                stdout=log, stderr=subprocess.STDOUT)
            log.close()
            deadline = time.time() + 10
            while time.time() < deadline and self.proc.poll() is None:
                if answers_ping(port):
                    self.port = port
                    return self
                time.sleep(0.02)
            stop_process(self.proc)
            if self.port:  # fixed port (restart): keep trying the same one
                time.sleep(0.5)
        raise RuntimeError("redis-server did not start")

    def stop(self):
        stop_process(self.proc)


class Deferq:
    def __init__(self, tmpdir, redis_port, config_text, name):
        self.tmpdir = tmpdir
        self.redis_port = redis_port
        self.name = name
        self.config = os.path.join(tmpdir, name + ".toml")
        with open(self.config, "w") as f:
            f.write(config_text)
        self.log = os.path.join(tmpdir, name + ".log")
        self.proc = None
        self.port = None

    def start(self):
        for _ in range(5):
            port = free_port()
            log = open(self.log, "ab")
            self.proc = subprocess.Popen(
                [DEFERQ, "--port", str(port), "--threads", "2",
                 "--pool", "default=redis://127.0.0.1:%d" % self.redis_port,
                 "--config", self.config],
                stdout=log, stderr=subprocess.STDOUT)
            log.close()
            deadline = time.time() + 10
            while time.time() < deadline and self.proc.poll() is None:
                if answers_ping(port):
                    self.port = port
                    return self
                time.sleep(0.02)
            stop_process(self.proc)
        raise RuntimeError("deferq did not start; log:\n" + self.log_tail())

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self):
        stop_process(self.proc)

    def kill9(self):
        if self.alive():
            self.proc.kill()
            self.proc.wait(5)

    def log_tail(self, n=30):
        try:
            with open(self.log, "rb") as f:
                return b"\n".join(f.read().splitlines()[-n:]).decode("utf-8", "replace")
        except OSError:
            return "(no log)"


MAIN_CONFIG = """\
[server]
max_payload = %d
max_bulk_len = 65536
""" % MAX_PAYLOAD

TMPDIR = None
REDIS = None
DQ = None


def setUpModule():
    global TMPDIR, REDIS, DQ
    TMPDIR = tempfile.mkdtemp(prefix="deferq-jobs-")
    REDIS = Redis(TMPDIR).start()
    DQ = Deferq(TMPDIR, REDIS.port, MAIN_CONFIG, "deferq-main").start()


def tearDownModule():
    if DQ:
        DQ.stop()
    if REDIS:
        REDIS.stop()
    if TMPDIR:
        shutil.rmtree(TMPDIR, ignore_errors=True)


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
        return cls.dq or DQ

    def setUp(self):
        srv = self.server()
        if not srv.alive():
            srv.start()
        self.port = srv.port
        self.r = redis.Redis(host="127.0.0.1", port=REDIS.port, socket_timeout=10)
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
                  b"backoff_s"):
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
        """A RESP2 job: [queue, id, payload, tries_left, ttl_left_s].
        born=(t0, t1): when the job's ttl started counting (its PUBLISH, or the due time of an
        EVERY occurrence); at=(t0, t1): when the reply was produced (default: before now).
        Then ttl_left_s = ttl - age, rounded either way, for an age in the window these give.
        Without born the job is assumed to be under a second old: ttl or ttl - 1."""
        what = "%s reply=%r" % (what, reply)
        self.assertIsInstance(reply, list, what)
        self.assertEqual(len(reply), 5, what)
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
        ])
        j = self.job(q, jid)
        self.assertEqual((j[b"state"], j[b"tries_left"]), (b"leased", 1),
                         "rejected commands must not change the job")


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
        # the first consumer's ACK completes the job that now holds the id (SPEC §8)
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
                             b"ttl_left_s": -1, b"every_s": 0, b"backoff_s": 4})
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
        self.assertQstat(q, delayed=1, published_total=1, consumed_total=1, acked_total=1)
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

    def test_every_occurrence_out_of_tries_pauses_until_respawn_and_ack_resumes(self):
        q = self.q
        jid, p0, reply = self._first_occurrence(q, b"tick", "EVERY", 1)
        self.assertEqual(self.cmd("NACK", q, jid), 1)
        self.assertEqual(self.job(q, jid)[b"state"], b"dead")
        self.sleep_until(p0 + 1000 + LATE_MS + 50)
        self.assertIsNone(self.consume(q), "the recurrence pauses while the occurrence is dead")
        self.assertEqual(self.cmd("DEADLETTER", "SIZE", q), 1)
        self.assertEqual(self.cmd("DEADLETTER", "RESPAWN", q), 1)
        self.assertJobReply(self.consume(q), q, jid, b"tick", 0)
        t0 = now_ms()
        self.assertEqual(self.cmd("ACK", q, jid), 1)
        t1 = now_ms()
        j = self.job(q, jid)
        self.assertEqual(j[b"state"], b"delayed", "the ACK resumes the recurrence")
        self.assertGreater(j[b"due_ms"], lo(t0), "resumes at the next occurrence after now")
        self.assertLessEqual(j[b"due_ms"], hi(t1) + 1000, "the NEXT occurrence, none skipped")
        self.assertEqual((j[b"due_ms"] - p0) % 1000, 0, "still on the p0 + n*1s grid")
        self.assertEqual(self.cmd("CANCEL", q, jid), 1)

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
            head = b"*5\r\n$%d\r\n%s\r\n$26\r\n%s\r\n$%d\r\n%s\r\n:0\r\n:" % (
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
                         b"*18\r\n$5\r\nready\r\n:2\r\n$7\r\ndelayed\r\n:0\r\n$6\r\nleased\r\n:0\r\n"
                         b"$4\r\ndead\r\n:0\r\n$15\r\npublished_total\r\n:2\r\n"
                         b"$14\r\nconsumed_total\r\n:0\r\n$11\r\nacked_total\r\n:0\r\n"
                         b"$13\r\nexpired_total\r\n:0\r\n$10\r\ndead_total\r\n:0\r\n")
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
        self.assertIsInstance(peek[0], RMap, peek)
        pj = peek[0].as_dict()
        self.assertEqual(set(pj), RESP3_JOB_KEYS, peek)
        self.assertEqual((pj[b"queue"], pj[b"id"], pj[b"payload"], pj[b"tries_left"],
                          pj[b"ttl_left_s"], pj[b"attempt"]), (q.encode(), jid, b"p\r\n", 3, -1, 0))
        time.sleep(0.2)
        job = r3.call("CONSUME", q)
        self.assertIsInstance(job, RMap, job)
        jd = job.as_dict()
        self.assertEqual(set(jd), RESP3_JOB_KEYS, job)
        self.assertEqual((jd[b"queue"], jd[b"id"], jd[b"payload"], jd[b"tries_left"],
                          jd[b"ttl_left_s"], jd[b"attempt"]), (q.encode(), jid, b"p\r\n", 2, -1, 1))
        self.assertIsInstance(jd[b"elapsed_ms"], int)
        self.assertTrue(200 <= jd[b"elapsed_ms"] <= 200 + 1000, "elapsed_ms since publish: %r"
                        % jd[b"elapsed_ms"])
        jobs = r3.call("CONSUME", q, "COUNT", 5)
        self.assertIsInstance(jobs, list)
        self.assertEqual(len(jobs), 1)
        self.assertIsInstance(jobs[0], RMap)
        self.assertEqual(jobs[0].as_dict()[b"id"], jid2)
        self.assertTtl(jobs[0].as_dict()[b"ttl_left_s"], 100)
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
        self.assertIsInstance(dead[0], RMap, dead)
        self.assertEqual(set(dead[0].as_dict()), RESP3_JOB_KEYS)
        self.assertEqual(dead[0].as_dict()[b"id"], jid2)
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


# --------------------------------------------------------------------------------------------
# Two deferq instances on one Redis (config defaults, cross-instance wake-up, crash safety)
# --------------------------------------------------------------------------------------------

SECOND_CONFIG = """\
[defaults]
ttl = 100
tries = 2
ttr = 1
timeout = 0.5
"""


class MultiInstanceTests(JobTestCase):
    dq_b = None

    @classmethod
    def setUpClass(cls):
        cls.dq_b = Deferq(TMPDIR, REDIS.port, SECOND_CONFIG, "deferq-b").start()

    @classmethod
    def tearDownClass(cls):
        if cls.dq_b:
            cls.dq_b.stop()

    def setUp(self):
        super().setUp()
        if not self.dq_b.alive():
            self.dq_b.start()
        self.b = self.client(self.dq_b.port)

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

    def test_killed_instance_loses_no_job_and_its_lease_is_redelivered(self):
        q = self.q
        published = self.pub(q + ".p", b"via-b", "TRIES", 1, client=self.b)
        leased, p0, p1 = self.pub_timed(q, b"leased", "TRIES", 2)
        reply = self.consume(q, "TTR", 1, client=self.b)
        self.assertJobReply(reply, q, leased, b"leased", 1)
        self.dq_b.kill9()
        self.assertJobReply(self.consume(q + ".p"), q + ".p", published, b"via-b", 0, ttl=100)
        lease_end = self.job(q, leased)[b"due_ms"]
        reply, c0, c1 = self.poll_consume(q, until_ms=lease_end + LATE_MS + 500)
        self.assertJobReply(reply, q, leased, b"leased", 0, what="redelivered by the survivor",
                            born=(p0, p1))
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
        rd = Redis(TMPDIR).start()
        dq = Deferq(TMPDIR, rd.port, MAIN_CONFIG, "deferq-pool").start()
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
        rd = Redis(TMPDIR, extra=["--maxmemory", "100mb", "--maxmemory-policy", "allkeys-lru"])
        rd.start()
        log = os.path.join(TMPDIR, "deferq-evict.log")
        port = free_port()
        try:
            with open(log, "ab") as f:
                proc = subprocess.Popen(
                    [DEFERQ, "--port", str(port), "--threads", "2",
                     "--pool", "default=redis://127.0.0.1:%d" % rd.port],
                    stdout=f, stderr=subprocess.STDOUT)
            try:
                rc = proc.wait(10)
            except subprocess.TimeoutExpired:
                rc = None
            stop_process(proc)
            with open(log, "rb") as f:
                text = f.read().decode("utf-8", "replace")
            self.assertIsNotNone(rc, "deferq kept running on an allkeys-lru pool; log:\n" + text)
            self.assertNotEqual(rc, 0, "log:\n" + text)
        finally:
            rd.stop()


# --------------------------------------------------------------------------------------------

class CountingResult(unittest.TextTestResult):
    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.failed_ids = set()
        self.started = {}

    def startTest(self, test):
        self.started[test.id()] = time.time()
        super().startTest(test)

    def stopTest(self, test):
        super().stopTest(test)
        t = self.started.get(test.id())
        if t is not None and self.showAll:
            self.stream.writeln("    (%.2f s)" % (time.time() - t))

    def addFailure(self, test, err):
        self.failed_ids.add(test.id())
        super().addFailure(test, err)

    def addError(self, test, err):
        self.failed_ids.add(test.id())
        super().addError(test, err)

    def addSubTest(self, test, subtest, err):
        if err is not None:
            self.failed_ids.add(test.id())
        super().addSubTest(test, subtest, err)


def main():
    global DEFERQ
    if len(sys.argv) < 2:
        sys.stderr.write("usage: %s /path/to/deferq [unittest options]\n" % sys.argv[0])
        return 2
    DEFERQ = os.path.abspath(sys.argv[1])
    if not os.access(DEFERQ, os.X_OK):
        sys.stderr.write("not an executable: %s\n" % DEFERQ)
        return 2
    argv = [sys.argv[0]] + sys.argv[2:]
    runner = unittest.TextTestRunner(stream=sys.stdout, verbosity=2, resultclass=CountingResult)
    prog = unittest.main(module=__name__, argv=argv, testRunner=runner, exit=False)
    result = prog.result
    ran = result.testsRun
    failed = len(result.failed_ids)
    print("%d passed, %d failed" % (ran - failed - len(result.skipped), failed))
    return 1 if failed or ran == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
