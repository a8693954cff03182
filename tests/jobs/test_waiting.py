#!/usr/bin/python3
"""Consumers waiting on many queues (issue 21): one CONSUME naming 1,000 queues, priority order
and fairness across waiters, what deferq knows of empty queues (and forgets), a wake-up that
comes while a consume call is in flight.

A part of the job suite: see jobcase.py (run every part with test_jobs.py)."""

import random
import socket
import threading
import time

from jobcase import JobTestCase, main, now_ms, WAKE_MS

WIDE = 1000  # queues one CONSUME names


class RedisMonitor:
    """MONITOR on the Redis under test, from start() to stop(): the FCALLs deferq sent."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.data = b""
        self.sock.sendall(b"MONITOR\r\n")
        while b"+OK\r\n" not in self.data:
            self.data += self.sock.recv(65536)
        self.data = self.data.split(b"+OK\r\n", 1)[1]
        self.done = False
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        self.sock.settimeout(0.05)
        while not self.done:
            try:
                chunk = self.sock.recv(65536)
            except socket.timeout:
                continue
            except OSError:
                return
            if not chunk:
                return
            self.data += chunk

    def stop(self):
        time.sleep(0.1)
        self.done = True
        self.thread.join(2)
        self.sock.close()
        return [line for line in self.data.split(b"\r\n") if line.startswith(b"+")]

    @staticmethod
    def fcalls(lines, suffix):
        """The FCALLs of functions whose name ends with `suffix` (e.g. b"_consume")."""
        out = []
        for line in lines:
            parts = line.split(b'" "')
            if len(parts) > 1 and parts[0].endswith(b'"FCALL') and parts[1].endswith(suffix):
                out.append(line)
        return out


class WideConsumeTests(JobTestCase):

    def wide(self, n=WIDE, prefix=None):
        prefix = prefix or self.q
        return ["%s.%d" % (prefix, i) for i in range(n)]

    def test_one_consume_of_1000_queues_takes_them_in_priority_order(self):
        qs = self.wide()
        for i in (900, 5, 2, 5):
            self.pub(qs[i], b"in %d" % i)
        reply = self.consume(*qs, "COUNT", 10)
        self.assertEqual([(j[0], j[2]) for j in reply],
                         [(qs[2].encode(), b"in 2"), (qs[5].encode(), b"in 5"),
                          (qs[5].encode(), b"in 5"), (qs[900].encode(), b"in 900")])
        # COUNT cuts across queues in the same order.
        for i in (7, 3, 999):
            self.pub(qs[i], b"again %d" % i)
        reply = self.consume(*qs, "COUNT", 2)
        self.assertEqual([j[0] for j in reply], [qs[3].encode(), qs[7].encode()])
        self.assertEqual(self.consume(*qs)[0], qs[999].encode())

    def test_a_consumer_blocked_on_1000_queues_is_woken_by_any_one_and_counts_once(self):
        qs = self.wide()
        t = self.consumer("CONSUME", *qs, "TIMEOUT", 5)
        t.start()
        time.sleep(0.3)
        info = self.c.info("clients")
        self.assertEqual(info["blocked_clients"], 1, "a consumer of 1,000 queues is one client")
        t_pub = now_ms()
        jid = self.pub(qs[737], b"late in the list")
        reply = t.finish()
        self.assertJobReply(reply, qs[737], jid, b"late in the list", 0)
        self.assertLessEqual(t.t_done - t_pub, WAKE_MS, "woken %.1f ms after the PUBLISH"
                             % (t.t_done - t_pub))
        time.sleep(0.05)
        self.assertEqual(self.c.info("clients")["blocked_clients"], 0)

    def test_consumers_of_the_same_queues_are_served_first_come_first_served(self):
        qs = self.wide(50)
        ts = []
        for i in range(3):
            t = self.consumer("CONSUME", *qs, "TIMEOUT", 5)
            t.start()
            ts.append(t)
            time.sleep(0.1)
        # A consumer naming the queues in another order (another set) comes last of all.
        other = self.consumer("CONSUME", *reversed(qs), "TIMEOUT", 5)
        other.start()
        time.sleep(0.1)
        for i, q in enumerate((qs[40], qs[1], qs[20])):
            jid = self.pub(q, b"job%d" % i)
            self.assertJobReply(ts[i].finish(), q, jid, b"job%d" % i, 0,
                                what="consumer %d (blocked %d-th)" % (i, i + 1))
            for later in ts[i + 1:] + [other]:
                self.assertTrue(later.is_alive(), "a later consumer got served too")
        jid = self.pub(qs[0], b"last")
        self.assertJobReply(other.finish(), qs[0], jid, b"last", 0)

    def subscribed(self):
        """Waits until deferq listens on the pool's wake-up channel (a (re)subscription forgets
        what is known of empty queues: deferq just started may still be on its way there)."""
        deadline = time.monotonic() + 5
        while self.r.pubsub_numsub("dq:ready")[0][1] < 1:
            self.assertLess(time.monotonic(), deadline, "deferq never subscribed to dq:ready")
            time.sleep(0.05)
        time.sleep(0.25)  # the threads' next tick has seen it

    def consume_calls(self, *args):
        """Runs CONSUME *args; returns its reply and the consume calls deferq sent meanwhile."""
        mon = RedisMonitor(self.r.connection_pool.connection_kwargs["port"])
        try:
            reply = self.consume(*args)
        finally:
            lines = mon.stop()
        return reply, (RedisMonitor.fcalls(lines, b"_consume") +
                       RedisMonitor.fcalls(lines, b"_consumes"))

    def test_a_consumer_back_on_queues_known_empty_costs_redis_no_consume_call(self):
        qs = self.wide()
        self.subscribed()
        # Blocking once sets the wait markers and finds every queue empty.
        self.assertIsNone(self.consume(*qs, "TIMEOUT", 0.3))
        time.sleep(0.1)
        reply, calls = self.consume_calls(*qs, "TIMEOUT", 0.2)
        self.assertIsNone(reply)
        self.assertEqual(len(calls), 0, "consume calls for queues known to hold nothing: %d, "
                         "the first %r" % (len(calls), [c[:300] for c in calls[:1]]))
        # A CONSUME that does not block answers what is there now: it reads them all, once, 250
        # queues per call (waiters.cc kConsumesMax: no call holds Redis long), one after the other.
        reply, calls = self.consume_calls(*qs)
        self.assertIsNone(reply)
        self.assertEqual(len(calls), 4)
        for i, call in enumerate(calls):
            self.assertIn(qs[250 * i].encode() + b"}", call)
            self.assertIn(qs[250 * i + 249].encode() + b"}", call)
        # News of one queue makes that one queue worth a call, and only it.
        self.pub(qs[321], b"news")
        reply, calls = self.consume_calls(*qs, "TIMEOUT", 1)
        self.assertEqual(reply[0], qs[321].encode())
        self.assertEqual(len(calls), 1, [c[:300] for c in calls])
        self.assertIn(qs[321].encode() + b"}", calls[0])
        self.assertNotIn(qs[320].encode() + b"}", calls[0])

    def test_what_is_known_empty_is_read_again_within_four_seconds(self):
        # A pool that lost the wait markers unannounced (here FLUSHALL) announces nothing: a job
        # published then is found when a consumer comes back after the trust window (2 s plus
        # up to 2 s, spread over the queues: WaiterOrder::kKnownEmptyMs).
        qs = self.wide(100)
        self.subscribed()
        self.assertIsNone(self.consume(*qs, "TIMEOUT", 0.3))
        time.sleep(0.1)
        self.r.flushall()
        jid = self.pub(qs[50], b"unannounced")
        t0 = time.monotonic()
        reply = None
        while reply is None and time.monotonic() - t0 < 7:
            reply = self.consume(*qs, "TIMEOUT", 0.5)
        self.assertIsNotNone(reply, "the job stayed hidden")
        self.assertEqual(reply[1], jid)
        self.assertLess(time.monotonic() - t0, 5.5)

    def test_a_job_published_while_the_first_consume_call_is_in_flight_is_not_missed(self):
        # A fresh list of 1,000 queues: the first call reads all of them (milliseconds in
        # Redis); the job lands before, during or after it, and must be delivered every time.
        rng = random.Random(7)
        for round_ in range(15):
            qs = self.wide(prefix="%s.r%d" % (self.q, round_))
            t = self.consumer("CONSUME", *qs, "TIMEOUT", 5)
            target = qs[rng.randrange(len(qs))]
            t.start()
            time.sleep(rng.random() * 0.006)
            jid = self.pub(target, b"r%d" % round_)
            reply = t.finish()
            self.assertIsNotNone(reply, "round %d: the job on %s was missed" % (round_, target))
            self.assertEqual((reply[0], reply[1]), (target.encode(), jid), "round %d" % round_)
            self.assertLessEqual(t.t_done - t.t_sent, 1000, "round %d" % round_)

    def test_a_delayed_job_falling_due_on_a_known_empty_queue_wakes_its_consumer(self):
        qs = self.wide()
        self.assertIsNone(self.consume(*qs, "TIMEOUT", 0.2))
        jid = self.pub(qs[500], b"due", "PDELAY", 400)
        t0 = now_ms()
        reply = self.consume(*qs, "TIMEOUT", 3)
        self.assertIsNotNone(reply)
        self.assertEqual((reply[0], reply[1]), (qs[500].encode(), jid))
        self.assertGreaterEqual(now_ms() - t0, 350)

    def test_a_delayed_job_on_a_queue_of_its_own_costs_one_pump_call(self):
        # 60 queues, one job each, due at distinct ms, a consumer waiting on all of them: the
        # pump call at each job's due ms moves it. A wheel timer fires in the wall ms before
        # its due ms about half the time (the monotonic clock's ms begin at another instant):
        # that would be a call that moves nothing and another one a ms later (pump.h
        # QueuePump::due_wall_ms).
        qs = self.wide(60)
        self.subscribed()
        self.assertIsNone(self.consume(*qs, "TIMEOUT", 0.2))
        mon = RedisMonitor(self.r.connection_pool.connection_kwargs["port"])
        try:
            base = int(now_ms()) + 600
            jids = {self.pub(q, b"x", "PAT", base + 13 * i) for i, q in enumerate(qs)}
            got = set()
            deadline = time.monotonic() + 10
            while len(got) < len(jids) and time.monotonic() < deadline:
                reply = self.consume(*qs, "TIMEOUT", 1, "COUNT", 100)
                for job in reply or []:
                    got.add(job[1])
                    self.cmd("ACK", job[0], job[1])
        finally:
            lines = mon.stop()
        self.assertEqual(got, jids)
        pumps = RedisMonitor.fcalls(lines, b"_pump")
        self.assertLessEqual(len(pumps), 66, "%d pump calls for 60 jobs" % len(pumps))


if __name__ == "__main__":
    main(__name__)
