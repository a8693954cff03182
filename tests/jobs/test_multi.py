#!/usr/bin/python3
"""MULTI / EXEC / DISCARD / WATCH (docs/commands.md, issue 7 item 2): commands after MULTI are checked and
queued, an error while queuing aborts EXEC and nothing runs, EXEC answers every reply in order
(also when they wait for Redis), a blocking CONSUME does not block, and nothing else of the
connection runs between EXEC's commands. Through redis-py's transactional pipeline (what
clients do by default) and the raw client (exact texts, RESP3).

A part of the job suite: see jobcase.py (run every part with test_jobs.py)."""

import os
import signal
import sys
import time
import unittest

import redis

from jobcase import ENV, encode, Err, JobTestCase, main, MAIN_CONFIG, RMap, start_deferq
from dqtest import procs
from dqtest.resp import NULL3, Raw


class TransactionTests(JobTestCase):

    def setUp(self):
        super().setUp()
        # Every storage script once, so Redis has them cached: the first EVALSHA of a script
        # after Redis starts meets NOSCRIPT and is re-sent as EVAL, and a request pipelined
        # behind it then runs first (a persist-layer reordering, not EXEC's; see the issue-7
        # report). The tests here pin EXEC's own ordering.
        w = "warm.up"
        jid = self.pub(w, b"w", "TRIES", 2)
        for args in (("CONSUME", w), ("NACK", w, jid), ("TOUCH", w, jid), ("JOB", w, jid),
                     ("PEEK", w), ("QSTAT", w), ("ACK", w, jid), ("CANCEL", w, jid),
                     ("DEADLETTER", "SIZE", w), ("PURGE", w)):
            self.cmd(*args)
        self.r.flushall()  # the cached scripts survive it

    def assertNoJobs(self, q, what=""):
        self.assertQstat(q, what)

    # ---- through a real client: redis-py's pipeline(transaction=True) sends MULTI ... EXEC

    def test_a_transactional_pipeline_of_three_publishes_returns_three_ids_and_three_jobs(self):
        q = self.q
        pipe = self.c.pipeline(transaction=True)
        for p in (b"a", b"b", b"c"):
            pipe.execute_command("PUBLISH", q, p)
        ids = pipe.execute()
        self.assertEqual(len(ids), 3, ids)
        self.assertTrue(all(isinstance(i, bytes) and len(i) == 26 for i in ids), ids)
        self.assertQstat(q, ready=3, published_total=3)
        self.assertEqual([j[1] for j in self.cmd("PEEK", q, "COUNT", 10)], ids)
        self.assertEqual([j[2] for j in self.cmd("PEEK", q, "COUNT", 10)], [b"a", b"b", b"c"])

    def test_a_syntax_error_inside_a_transactional_pipeline_creates_no_job(self):
        q = self.q
        pipe = self.c.pipeline(transaction=True)
        pipe.execute_command("PUBLISH", q, "a")
        pipe.execute_command("PUBLISH", q, "b", "TTL", 1, "TTL", 2)
        pipe.execute_command("PUBLISH", q, "c")
        with self.assertRaisesRegex(redis.ResponseError, "syntax error"):
            pipe.execute()
        self.assertNoJobs(q, "after an aborted transaction")
        self.assertEqual(self.cmd("PING"), True, "the connection stays in step")
        # A plain (non-transactional) pipeline on the same client still works.
        pipe = self.c.pipeline(transaction=False)
        pipe.execute_command("PUBLISH", q, "d")
        pipe.execute_command("QSTAT", q)
        jid, stat = pipe.execute()
        self.assertEqual(len(jid), 26)
        self.assertEqual(dict(zip(stat[0::2], stat[1::2]))[b"ready"], 1, stat)

    # ---- exact replies

    def test_every_error_while_queuing_is_answered_at_once_and_aborts_exec(self):
        q = self.q
        bad = [
            (("PUBLISH", q, "x", "TTL", 1, "TTL", 2), "ERR syntax error"),
            (("PUBLISH", q, "x", "DELAY", "-0"), "ERR value is not an integer or out of range"),
            (("PUBLISH", q), "ERR wrong number of arguments for 'publish' command"),
            (("NOSUCH", "a"), "ERR unknown command 'NOSUCH', with args beginning with: 'a' "),
            (("CONSUME", q, "TIMEOUT", "x"), "ERR timeout is not a float or out of range"),
            (("ACK", q, "bad id"), "ERR invalid job id"),
            (("PUBLISH", "bad/name", "x"), "ERR invalid queue name"),
            (("DEADLETTER", "NOSUCH", q), "ERR unknown subcommand 'NOSUCH'. Try DEADLETTER HELP."),
        ]
        for args, want in bad:
            with self.subTest(args=args):
                self.assertEqual(self.raw.call("MULTI"), b"OK")
                self.assertEqual(self.raw.call("PUBLISH", q, "before"), b"QUEUED")
                got = self.raw.call(*args)
                self.assertIsInstance(got, Err, got)
                self.assertEqual(got, want)
                self.assertEqual(self.raw.call("PUBLISH", q, "after"), b"QUEUED")
                self.assertEqual(self.raw.call("EXEC"),
                                 "EXECABORT Transaction discarded because of previous errors.")
                self.assertNoJobs(q, "after %r inside MULTI" % (args,))
        self.assertEqual(self.raw.call("EXEC"), "ERR EXEC without MULTI", "EXECABORT ends it")

    def test_exec_answers_every_reply_in_order_immediate_and_deferred_mixed(self):
        q = self.q
        jid = self.pub(q, b"old", "TRIES", 2)
        r = self.raw
        self.assertEqual(r.call("MULTI"), b"OK")
        queued = [("PING",), ("PUBLISH", q, "new"), ("QSTAT", q), ("ECHO", "e"),
                  ("CONSUME", q, "TTR", 30), ("JOB", q, jid), ("ACK", q, jid), ("PEEK", q),
                  ("CLIENT", "NOSUCH")]
        for args in queued:
            self.assertEqual(r.call(*args), b"QUEUED", args)
        out = r.call("EXEC")
        self.assertEqual(len(out), len(queued), out)
        ping, new, stat, echo, job, info, acked, peek, client_err = out
        self.assertEqual(ping, b"PONG")
        self.assertEqual(len(new), 26)
        self.assertEqual(dict(zip(stat[0::2], stat[1::2]))[b"ready"], 2, stat)
        self.assertEqual(echo, b"e")
        self.assertJobReply(job, q, jid, b"old", 1, what="CONSUME inside EXEC")
        self.assertEqual(job[5], 1, "attempt")
        info = dict(zip(info[0::2], info[1::2]))
        self.assertEqual((info[b"state"], info[b"attempt"]), (b"leased", 1))
        self.assertEqual(acked, 1)
        self.assertEqual([j[1] for j in peek], [new], "only the new job is left ready")
        # An error while running is one element of the array; the other commands ran (Redis).
        self.assertEqual(client_err, "ERR unknown subcommand 'NOSUCH'. Try CLIENT HELP.")
        self.assertQstat(q, ready=1, published_total=2, consumed_total=1, acked_total=1)

    def test_a_blocking_consume_inside_multi_does_not_block(self):
        q = self.q
        self.assertEqual(self.raw.call("MULTI"), b"OK")
        self.assertEqual(self.raw.call("CONSUME", q, "TIMEOUT", 5), b"QUEUED")
        self.assertEqual(self.raw.call("CONSUME", q, "TIMEOUT", 0, "COUNT", 3), b"QUEUED")
        t0 = time.monotonic()
        self.assertEqual(self.raw.call("EXEC"), [None, None])
        self.assertLess(time.monotonic() - t0, 1.0, "CONSUME TIMEOUT 5 blocked inside EXEC")
        self.assertEqual(self.raw.call_bytes("MULTI") + self.raw.call_bytes("CONSUME", q, "TIMEOUT",
                                                                            5)
                         + self.raw.call_bytes("EXEC"), b"+OK\r\n+QUEUED\r\n*1\r\n*-1\r\n")

    def test_exec_runs_its_commands_in_order(self):
        # A CONSUME of two queues takes two round trips; a PUBLISH queued after it must not
        # overtake its second step, and a CONSUME after the PUBLISH must see the job.
        q, q2 = self.q, self.q + ".2"
        r = self.raw
        r.call("MULTI")
        for args in (("CONSUME", q2, q), ("PUBLISH", q, "x"), ("CONSUME", q2, q),
                     ("PUBLISH", q2, "y"), ("QSTAT", q2)):
            self.assertEqual(r.call(*args), b"QUEUED")
        none, jid, job, jid2, stat = r.call("EXEC")
        self.assertIsNone(none, "the first CONSUME ran before the PUBLISH queued after it")
        self.assertJobReply(job, q, jid, b"x", 0, what="CONSUME after PUBLISH inside EXEC")
        self.assertEqual(len(jid2), 26)
        self.assertEqual(dict(zip(stat[0::2], stat[1::2]))[b"ready"], 1, stat)

    def test_nothing_else_of_the_connection_runs_between_execs_commands(self):
        # MULTI, a multi-round-trip CONSUME, EXEC, then (pipelined in the same write) a PUBLISH
        # and a CONSUME of the other queue: those run after every command of EXEC.
        q, q2 = self.q, self.q + ".2"
        data = (encode(["MULTI"]) + encode(["CONSUME", q2, q]) + encode(["PUBLISH", q, "in"])
                + encode(["EXEC"]) + encode(["PUBLISH", q2, "after"]) + encode(["CONSUME", q2])
                + encode(["PING"]))
        self.raw.send_bytes(data)
        replies = [self.raw.read() for _ in range(7)]
        ok, queued1, queued2, execd, jid_after, job_after, pong = replies
        self.assertEqual((ok, queued1, queued2, pong), (b"OK", b"QUEUED", b"QUEUED", b"PONG"))
        self.assertIsNone(execd[0], "EXEC's CONSUME saw a job published after EXEC: %r" % execd)
        self.assertEqual(len(execd[1]), 26)
        self.assertJobReply(job_after, q2, jid_after, b"after", 0)

    def test_a_command_pipelined_after_exec_waits_for_execs_last_multi_round_trip_consume(self):
        q, q2 = self.q, self.q + ".2"
        data = (encode(["MULTI"]) + encode(["PING"]) + encode(["CONSUME", q, q2]) + encode(["EXEC"])
                + encode(["PUBLISH", q2, "after"]) + encode(["QSTAT", q2]))
        self.raw.send_bytes(data)
        ok, queued1, queued2, execd, jid, stat = [self.raw.read() for _ in range(6)]
        self.assertEqual((ok, queued1, queued2), (b"OK", b"QUEUED", b"QUEUED"))
        self.assertEqual(execd, [b"PONG", None],
                         "EXEC's CONSUME saw a job published after EXEC: %r" % execd)
        self.assertEqual(dict(zip(stat[0::2], stat[1::2]))[b"ready"], 1, stat)
        self.assertEqual(self.consume(q2)[1], jid)

    def test_exec_replies_follow_the_protocol_in_force(self):
        q = self.q
        r3 = self.raw_client()
        self.assertIsInstance(r3.call("HELLO", 3), RMap)
        jid = r3.call("PUBLISH", q, "p")
        r3.call("MULTI")
        for args in (("QSTAT", q), ("CONSUME", q), ("CONSUME", q), ("JOB", q, "nosuch"),
                     ("PEEK", q)):
            self.assertEqual(r3.call(*args), b"QUEUED")
        stat, job, nothing, nojob, peek = r3.call("EXEC")
        self.assertIsInstance(stat, RMap, stat)
        self.assertEqual(stat.as_dict()[b"ready"], 1)
        self.assertNotIsInstance(job, RMap, "a job is an array in RESP3 too")
        self.assertJobReply(job, q, jid, b"p", 0)
        self.assertEqual((nothing, nojob, peek), (NULL3, NULL3, []))
        self.assertEqual(r3.call_bytes("MULTI") + r3.call_bytes("CONSUME", q)
                         + r3.call_bytes("EXEC"), b"+OK\r\n+QUEUED\r\n*1\r\n_\r\n")

    def test_nested_multi_and_exec_or_discard_without_multi_answer_as_redis(self):
        q = self.q
        r = self.raw
        self.assertEqual(r.call("EXEC"), "ERR EXEC without MULTI")
        self.assertEqual(r.call("DISCARD"), "ERR DISCARD without MULTI")
        self.assertEqual(r.call("MULTI"), b"OK")
        self.assertEqual(r.call("PUBLISH", q, "a"), b"QUEUED")
        # As in Redis, a nested MULTI is refused without dooming the open transaction.
        self.assertEqual(r.call("MULTI"), "ERR MULTI calls can not be nested")
        ids = r.call("EXEC")
        self.assertEqual(len(ids), 1, ids)
        self.assertQstat(q, ready=1, published_total=1)

    def test_watch_and_unwatch_answer_that_deferq_does_not_support_them(self):
        r = self.raw
        self.assertEqual(r.call("WATCH", "k"), "ERR WATCH is not supported by deferq")
        self.assertEqual(r.call("UNWATCH"), "ERR WATCH is not supported by deferq")
        self.assertEqual(r.call("MULTI"), b"OK")
        self.assertEqual(r.call("WATCH", "k"), "ERR WATCH is not supported by deferq")
        self.assertEqual(r.call("EXEC"), [])
        with self.assertRaisesRegex(redis.ResponseError, "WATCH is not supported by deferq"):
            self.c.pipeline().watch("k")

    def test_discard_and_reset_drop_the_queued_commands(self):
        q = self.q
        r = self.raw
        self.assertEqual(r.call("MULTI"), b"OK")
        self.assertEqual(r.call("PUBLISH", q, "a"), b"QUEUED")
        self.assertEqual(r.call("DISCARD"), b"OK")
        self.assertEqual(r.call("EXEC"), "ERR EXEC without MULTI")
        self.assertEqual(r.call("MULTI"), b"OK")
        self.assertEqual(r.call("PUBLISH", q, "b"), b"QUEUED")
        self.assertEqual(r.call("RESET"), b"RESET")
        self.assertEqual(r.call("EXEC"), "ERR EXEC without MULTI")
        self.assertNoJobs(q, "after DISCARD and RESET")

    def test_commands_queued_by_a_client_that_leaves_before_exec_never_run(self):
        q = self.q
        gone = self.raw_client()
        self.assertEqual(gone.call("MULTI"), b"OK")
        self.assertEqual(gone.call("PUBLISH", q, "a"), b"QUEUED")
        self.assertEqual(gone.call("CONSUME", q), b"QUEUED")
        gone.close()
        time.sleep(0.2)
        self.assertEqual(self.cmd("PING"), True)
        self.assertNoJobs(q, "after the client left without EXEC")

    def test_exec_of_an_empty_transaction_is_an_empty_array(self):
        self.assertEqual(self.raw.call_bytes("MULTI"), b"+OK\r\n")
        self.assertEqual(self.raw.call_bytes("EXEC"), b"*0\r\n")



class TransactionFaultTests(unittest.TestCase):
    """EXEC meeting a client that leaves while Redis is slow: its own servers (Redis is frozen)."""

    def test_a_client_leaving_during_exec_stops_it_and_the_server_serves_on(self):
        rd = procs.Redis(ENV.tmpdir).start()
        dq = start_deferq(rd.port, MAIN_CONFIG, "deferq-multi-fault")
        raw = Raw(dq.port)
        try:
            warm = Raw(dq.port)
            for args in (("PUBLISH", "w", "x"), ("CONSUME", "w"), ("QSTAT", "w")):
                warm.call(*args)  # scripts cached in Redis before it freezes
            os.kill(rd.proc.pid, signal.SIGSTOP)
            try:
                # CONSUME of two queues takes round trips, so the PUBLISH after it waits for it;
                # the client leaves while the CONSUME waits for the frozen Redis.
                raw.send_bytes(encode(["MULTI"]) + encode(["CONSUME", "fa", "fb"])
                               + encode(["PUBLISH", "fb", "never"]) + encode(["EXEC"]))
                self.assertEqual([raw.read() for _ in range(3)], [b"OK", b"QUEUED", b"QUEUED"])
                time.sleep(0.1)
                raw.close()
                time.sleep(0.1)
            finally:
                os.kill(rd.proc.pid, signal.SIGCONT)
            time.sleep(0.3)
            self.assertTrue(dq.alive(), dq.log_tail())
            self.assertEqual(warm.call("PING"), b"PONG")
            stat = warm.call("QSTAT", "fb")
            self.assertEqual(dict(zip(stat[0::2], stat[1::2]))[b"published_total"], 0,
                             "a command after the CONSUME ran although its client had left")
            self.assertEqual(len(warm.call("PUBLISH", "fb", "later")), 26)
            warm.close()
        finally:
            raw.close()
            dq.stop()
            rd.stop()

    def test_a_transaction_is_bounded_by_max_output_buffer_bytes(self):
        rd = procs.Redis(ENV.tmpdir).start()
        config = MAIN_CONFIG + "max_output_buffer = 100000\n"
        dq = start_deferq(rd.port, config, "deferq-multi-bound")
        raw = Raw(dq.port)
        try:
            self.assertEqual(raw.call("MULTI"), b"OK")
            payload = b"p" * 3000
            queued = 0
            while True:
                got = raw.call("PUBLISH", "big", payload)
                if got != b"QUEUED":
                    break
                queued += 1
                self.assertLess(queued, 100, "no bound on the transaction's size")
            self.assertEqual(got, Err("ERR transaction too large"))
            self.assertGreaterEqual(queued, 30)
            self.assertEqual(raw.call("EXEC"),
                             Err("EXECABORT Transaction discarded because of previous errors."))
            stat = raw.call("QSTAT", "big")
            self.assertEqual(dict(zip(stat[0::2], stat[1::2]))[b"published_total"], 0)
        finally:
            raw.close()
            dq.stop()
            rd.stop()

    def test_exec_while_the_pool_is_down_answers_every_tryagain_in_its_array(self):
        rd = procs.Redis(ENV.tmpdir).start()
        dq = start_deferq(rd.port, MAIN_CONFIG, "deferq-multi-down")
        raw = Raw(dq.port)
        try:
            rd.stop()
            self.assertEqual(raw.call("MULTI"), b"OK")
            for args in (("PUBLISH", "d", "x"), ("CONSUME", "d", "e"), ("PING",), ("QSTAT", "d")):
                self.assertEqual(raw.call(*args), b"QUEUED")
            t0 = time.monotonic()
            out = raw.call("EXEC")
            self.assertLess(time.monotonic() - t0, 1.5, "EXEC on a pool that is down hung")
            self.assertEqual(len(out), 4, out)
            self.assertEqual(out[2], b"PONG")
            for i in (0, 1, 3):  # never reached Redis: TRYAGAIN (its reason may follow)
                self.assertIsInstance(out[i], Err, out)
                self.assertTrue(out[i].startswith("TRYAGAIN pool 'default'"), out)
            self.assertEqual(raw.call("PING"), b"PONG")
            self.assertTrue(dq.alive(), dq.log_tail())
        finally:
            raw.close()
            dq.stop()
            rd.stop()


if __name__ == "__main__":
    sys.exit(main(__name__))
