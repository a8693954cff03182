#!/usr/bin/python3
"""CALL, WAITJOB, ACK ... RESULT and PUBLISH ... RETAIN (docs/commands.md "Results and CALL"):
requesters and workers on two deferq instances on one Redis.

A part of the job suite: see jobcase.py (run every part with test_jobs.py)."""

import socket
import threading
import time

from jobcase import MAIN_CONFIG, main, redis, TwoInstancesCase

# The second instance keeps an emptied queue's counters 1 s only (server.retain_seconds), so the
# test of 10,000 CALLs can see Redis left as it was.
SECOND_CONFIG = MAIN_CONFIG + "retain_seconds = 1\n"


class Worker(threading.Thread):
    """Consumes `q` on `port` and acks each job with RESULT made by `answer(payload)` (None:
    NACK with REASON "bad input"), until `n` jobs or `seconds`."""

    def __init__(self, port, q, answer, n=1, seconds=20, count=1):
        super().__init__(daemon=True)
        self.c = redis.Redis(host="127.0.0.1", port=port, socket_timeout=30,
                             single_connection_client=True)
        self.q, self.answer, self.n, self.seconds, self.count = q, answer, n, seconds, count
        self.done, self.errors = 0, []

    def run(self):
        end = time.time() + self.seconds
        try:
            while self.done < self.n and time.time() < end:
                jobs = self.c.execute_command("CONSUME", self.q, "TIMEOUT", 1, "COUNT",
                                              self.count)
                if not jobs:
                    continue
                p = self.c.pipeline(transaction=False)
                for job in jobs:
                    result = self.answer(job[2])
                    if result is None:
                        p.execute_command("NACK", self.q, job[1], "REASON", "bad input")
                    else:
                        p.execute_command("ACK", self.q, job[1], "RESULT", result)
                p.execute()
                self.done += len(jobs)
        except Exception as e:  # reported by the test
            self.errors.append(e)
        finally:
            self.c.close()

    def finish(self):
        self.join(40)
        return self.errors


def caller(port):
    return redis.Redis(host="127.0.0.1", port=port, socket_timeout=30,
                       single_connection_client=True)


class CallTests(TwoInstancesCase):
    second_config, second_name = SECOND_CONFIG, "deferq-calls"

    def worker(self, q, answer, **kw):
        w = Worker(self.dq_b.port, q, answer, **kw)
        w.start()
        return w

    def blocked(self, client=None):
        return (client or self.c).info("clients")["blocked_clients"]

    def test_call_answered_by_a_worker_on_the_other_instance(self):
        q = self.q
        w = self.worker(q, lambda p: b"result of " + p)
        t0 = time.time()
        self.assertEqual(self.cmd("CALL", q, b"job\x00one", "TIMEOUT", 10),
                         b"result of job\x00one")
        took = time.time() - t0
        self.assertEqual(w.finish(), [])
        self.assertLess(took, 3.0)
        # The outcome is kept (60 s by default for CALL); JOB shows it on both instances.
        ids = [k for k in self.r.keys("dq:{default/%s}:f:*" % q)]
        self.assertEqual(len(ids), 1)
        self.assertQstat(q, published_total=1, consumed_total=1, acked_total=1)
        jid = self.r.keys("dq:{default/%s}:f:*" % q)[0].split(b":f:", 1)[1]
        self.assertEqual(len(jid), 16)

    def test_job_and_waitjob_show_a_kept_result(self):
        q = self.q
        jid = self.pub(q, b"p", "RETAIN", 30)
        job = self.consume(q, client=self.b)
        self.assertEqual(self.cmd("ACK", q, job[1], "RESULT", b"42", client=self.b), 1)
        info = self.job(q, jid)
        self.assertEqual((info[b"state"], info[b"result"], info[b"payload"], info[b"attempt"]),
                         (b"finished", b"42", None, 1))
        self.assertGreater(info[b"finished_ms"], 0)
        self.assertEqual(self.cmd("WAITJOB", q, jid), b"42")
        self.assertEqual(self.cmd("WAITJOB", q, jid, "TIMEOUT", 1, client=self.b), b"42")
        self.assertTrue(20000 < self.r.pttl(b"dq:{default/%s}:f:" % q.encode() +
                                            self.r.keys("dq:{default/%s}:f:*" % q)[0]
                                            .split(b":f:", 1)[1]) <= 30000)
        # A job without RETAIN keeps nothing: WAITJOB and JOB find no such job.
        other = self.pub(q, b"p2")
        job = self.consume(q)
        self.assertEqual(self.cmd("ACK", q, job[1], "RESULT", b"dropped"), 1)
        self.assertIsNone(self.cmd("WAITJOB", q, other))
        self.assertIsNone(self.job(q, other))

    def test_waitjob_on_a_job_published_before_and_on_another_instance(self):
        q = self.q
        jid = self.pub(q, b"later", "DELAY", 1, "RETAIN", 5)
        got = {}

        def wait():
            got["r"] = caller(self.port).execute_command("WAITJOB", q, jid, "TIMEOUT", 10)

        t = threading.Thread(target=wait, daemon=True)
        t.start()
        w = self.worker(q, lambda p: p.upper())
        t.join(15)
        self.assertEqual(w.finish(), [])
        self.assertEqual(got.get("r"), b"LATER")

    def test_failures_name_why(self):
        q = self.q
        w = self.worker(q, lambda p: None, n=1)  # NACK: tries 1, so it dies
        err = self.cmd_error("CALL", q, b"x", "TIMEOUT", 10)
        self.assertEqual(w.finish(), [])
        self.assertRegex(err, r"^DEAD job [0-9A-Za-z]+ died after attempt 1: bad input$")
        # Expired: nobody consumes it before its ttl passes.
        err = self.cmd_error("CALL", q + ".x", b"x", "TTL", 1, "TIMEOUT", 10)
        self.assertRegex(err, r"^EXPIRED job \S+: its ttl passed before it finished$")
        # Cancelled while the requester waits.
        got = {}

        def call():
            try:
                caller(self.port).execute_command("CALL", q + ".c", b"x", "ID", "c-1", "TIMEOUT",
                                                  10)
            except redis.ResponseError as e:
                got["e"] = str(e)

        t = threading.Thread(target=call, daemon=True)
        t.start()
        self.wait_until(lambda: self.qstat(q + ".c")["ready"] == 1)
        self.assertEqual(self.cmd("CANCEL", q + ".c", "c-1", client=self.b), 1)
        t.join(10)
        self.assertEqual(got.get("e"), "CANCELLED job c-1 was cancelled")
        # A timeout leaves the job as it is; WAITJOB waits for it again.
        err = self.cmd_error("CALL", q + ".t", b"slow", "ID", "t-1", "TIMEOUT", 0.3)
        self.assertEqual(err, "TIMEOUT job t-1 has not finished; it stays as it is (WAITJOB "
                              "%s.t t-1 waits for it again)" % q)
        self.assertQstat(q + ".t", ready=1, published_total=1)
        w = self.worker(q + ".t", lambda p: b"late " + p)
        self.assertEqual(self.cmd("WAITJOB", q + ".t", "t-1", "TIMEOUT", 10), b"late slow")
        self.assertEqual(w.finish(), [])
        self.assertEqual(self.blocked(), 0)
        self.assertEqual(self.blocked(self.b), 0)

    def test_call_with_an_id_is_idempotent_and_recurring_jobs_are_refused(self):
        q = self.q
        w = self.worker(q, lambda p: b"done " + p)
        self.assertEqual(self.cmd("CALL", q, b"a", "ID", "order-7", "TIMEOUT", 10), b"done a")
        self.assertEqual(w.finish(), [])
        # Its kept outcome holds the id: the same CALL answers it again without a new job.
        self.assertEqual(self.cmd("CALL", q, b"a", "ID", "order-7", "TIMEOUT", 1,
                                  client=self.b), b"done a")
        self.assertQstat(q, published_total=1, consumed_total=1, acked_total=1)
        for args in (("CALL", q, "x", "EVERY", 60), ("PUBLISH", q, "x", "EVERY", 60, "RETAIN", 5),
                     ("CALL", q, "x", "CRON", "* * * * *")):
            self.assertIn("recurring job never finishes", self.cmd_error(*args))
        jid = self.pub(q, b"r", "EVERY", 60)
        self.assertIn("recurring job never finishes", self.cmd_error("WAITJOB", q, jid))
        for args in (("CALL", q, "x", "TIMEOUT", -1), ("CALL", q, "x", "RETAIN", "x"),
                     ("WAITJOB", q, jid, "TIMEOUT"), ("WAITJOB", q, jid, "FOO", 1),
                     ("CALL", q, "x", "TIMEOUT", 1, "TIMEOUT", 2)):
            self.cmd_error(*args)
        self.assertIsNone(self.cmd("WAITJOB", q, "no-such-job"))
        # Not inside MULTI: nothing blocks there.
        self.assertEqual(self.raw.call("MULTI"), b"OK")
        self.assertEqual(self.raw.call("CALL", q, "x"),
                         "ERR Command not allowed inside a transaction")
        self.raw.call("DISCARD")

    def test_a_requester_that_leaves_leaves_nothing_blocked(self):
        q = self.q
        s = socket.create_connection(("127.0.0.1", self.port))
        s.sendall(b"*5\r\n$4\r\nCALL\r\n$%d\r\n%s\r\n$1\r\nx\r\n$6\r\nRETAIN\r\n$1\r\n1\r\n"
                  % (len(q), q.encode()))
        self.wait_until(lambda: self.blocked() == 1)
        s.close()
        self.wait_until(lambda: self.blocked() == 0)
        w = self.worker(q, lambda p: b"nobody hears")
        self.assertEqual(w.finish(), [])
        self.assertQstat(q, published_total=1, consumed_total=1, acked_total=1)
        # Its outcome goes with its retention (1 s).
        self.wait_until(lambda: not self.r.keys("dq:{default/%s}:f:*" % q), seconds=5)

    def test_10000_calls_leave_redis_as_it_was(self):
        q = self.q
        port = self.dq_b.port
        before = set(self.r.keys("*"))
        n, callers = 10000, 40
        w = Worker(port, q, lambda p: p, n=n, seconds=120, count=100)
        w.start()
        errors, answered = [], [0]
        lock = threading.Lock()

        def requester(k):
            c = caller(port if k % 2 else self.port)
            try:
                for i in range(n // callers):
                    payload = b"%d-%d" % (k, i)
                    got = c.execute_command("CALL", q, payload, "RETAIN", 1, "TIMEOUT", 30)
                    if got != payload:
                        raise AssertionError("%r answered %r" % (payload, got))
                    with lock:
                        answered[0] += 1
            except Exception as e:
                errors.append(e)
            finally:
                c.close()

        threads = [threading.Thread(target=requester, args=(k,), daemon=True)
                   for k in range(callers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(150)
        self.assertEqual(errors, [])
        self.assertEqual(w.finish(), [])
        self.assertEqual(answered[0], n)
        # Retention: the outcomes after 1 s, the queue's counters 1 s after it emptied (the
        # second instance's retain_seconds). The pool's own keys stay: the active-queue index and
        # the pump lease (renewed while an instance runs).
        def left():
            return set(self.r.keys("*")) - before - {b"dq:active", b"dq:own"}
        self.wait_until(lambda: not left(), seconds=15, what=left)
        self.assertEqual(self.blocked(), 0)
        self.assertEqual(self.blocked(self.b), 0)

    # ---- helpers

    def cmd_error(self, *args):
        try:
            got = self.cmd(*args)
        except redis.ResponseError as e:
            return str(e)
        self.fail("%r answered %r, not an error" % (args, got))

    def wait_until(self, cond, seconds=10, what=None):
        end = time.time() + seconds
        while time.time() < end:
            if cond():
                return
            time.sleep(0.05)
        self.fail("condition not met within %s s%s" % (seconds, ": %r" % what() if what else ""))


if __name__ == "__main__":
    main(__name__)
