#!/usr/bin/python3
"""Argument validation of docs/operations.md (issue 7 item 10): a repeated option is a syntax error,
"-0" (and any integer Redis would not read) is not a number, an invalid job id is refused by
every command that takes one, and DEADLETTER HELP answers instead of pointing at itself. Each
refusal changes nothing in Redis.

A part of the job suite: see jobcase.py (run every part with test_jobs.py)."""

import sys

from jobcase import Err, JobTestCase, main

NOT_INTEGER = "ERR value is not an integer or out of range"
SYNTAX = "ERR syntax error"
INVALID_ID = "ERR invalid job id"


class ValidationTests(JobTestCase):

    def test_a_repeated_option_is_a_syntax_error_and_publishes_nothing(self):
        q = self.q
        self.expect_errors([
            (("PUBLISH", q, "x", "TTL", 1, "TTL", 2), SYNTAX),
            (("PUBLISH", q, "x", "TRIES", 2, "TRIES", 3), SYNTAX),
            (("PUBLISH", q, "x", "EVERY", 60, "EVERY", 60), SYNTAX),
            (("PUBLISH", q, "x", "BACKOFF", 1, "BACKOFF", 2), SYNTAX),
            (("PUBLISH", q, "x", "ID", "a", "ID", "b"), SYNTAX),
            (("PUBLISH", q, "x", "ID", "a", "REPLACE", "REPLACE"), SYNTAX),
            (("PUBLISH", q, "x", "DELAY", 1, "DELAY", 1), SYNTAX),
            (("PUBLISH", q, "x", "ttl", 1, "TTL", 1), SYNTAX),
        ])
        self.assertQstat(q, "no repeated-option PUBLISH may create a job")

    def test_a_repeated_option_of_consume_and_deadletter_respawn_is_a_syntax_error(self):
        q = self.q
        self.pub(q, b"x")
        self.expect_errors([
            (("CONSUME", q, "TTR", 5, "TTR", 6), SYNTAX),
            (("CONSUME", q, "COUNT", 1, "COUNT", 2), SYNTAX),
            (("CONSUME", q, "TIMEOUT", 0, "TIMEOUT", 0), SYNTAX),
            (("CONSUME", q, "TTR", 5, "COUNT", 1, "ttr", 5), SYNTAX),
            (("DEADLETTER", "RESPAWN", q, "COUNT", 1, "COUNT", 2), SYNTAX),
            (("DEADLETTER", "RESPAWN", q, "TTL", 1, "TTL", 2), SYNTAX),
        ])
        self.assertQstat(q, "a refused CONSUME leases nothing", ready=1, published_total=1)

    def test_minus_zero_and_other_integers_redis_would_not_read_are_refused(self):
        q = self.q
        jid = self.pub(q, b"x", "TRIES", 5)
        self.assertEqual(self.consume(q)[1], jid)
        cases = []
        for bad in ("-0", "007", "+1", "1.0", " 1"):
            cases += [
                (("PUBLISH", q, "x", "DELAY", bad), NOT_INTEGER),
                (("PUBLISH", q, "x", "PDELAY", bad), NOT_INTEGER),
                (("PUBLISH", q, "x", "AT", bad), NOT_INTEGER),
                (("PUBLISH", q, "x", "PAT", bad), NOT_INTEGER),
                (("PUBLISH", q, "x", "TTL", bad), NOT_INTEGER),
                (("PUBLISH", q, "x", "TRIES", bad), NOT_INTEGER),
                (("PUBLISH", q, "x", "EVERY", bad), NOT_INTEGER),
                (("PUBLISH", q, "x", "BACKOFF", bad), NOT_INTEGER),
                (("CONSUME", q, "TTR", bad), NOT_INTEGER),
                (("CONSUME", q, "COUNT", bad), NOT_INTEGER),
                (("NACK", q, jid, "DELAY", bad), NOT_INTEGER),
                (("TOUCH", q, jid, "TTR", bad), NOT_INTEGER),
                (("PEEK", q, "COUNT", bad), NOT_INTEGER),
                (("DEADLETTER", "PEEK", q, "COUNT", bad), NOT_INTEGER),
                (("DEADLETTER", "RESPAWN", q, "TTL", bad), NOT_INTEGER),
                (("SELECT", bad), NOT_INTEGER),
            ]
        cases.append((("CONSUME", q, "TIMEOUT", "-0"), "ERR timeout is negative"))
        self.expect_errors(cases)
        self.assertQstat(q, "refused commands change nothing", leased=1, published_total=1,
                         consumed_total=1)
        self.assertEqual(self.raw.call("SELECT", "0"), b"OK", "0 itself is a number")
        self.assertEqual(len(self.raw.call("PUBLISH", q, "y", "DELAY", "0", "TTL", "0")), 26)

    def test_an_invalid_job_id_is_refused_by_every_command_that_takes_one(self):
        q = self.q
        jid = self.pub(q, b"x", "TRIES", 3)
        self.assertEqual(self.consume(q)[1], jid)
        long_id = "i" * 201
        cases = []
        for bad in ("bad id", "bad/id", "", long_id, "caf\xe9"):
            cases += [
                (("ACK", q, bad), INVALID_ID),
                (("ACK", q, jid, bad), INVALID_ID),  # the valid one is not acked either
                (("NACK", q, bad), INVALID_ID),
                (("NACK", q, bad, "DELAY", 1), INVALID_ID),
                (("TOUCH", q, bad), INVALID_ID),
                (("TOUCH", q, bad, "TTR", 5), INVALID_ID),
                (("CANCEL", q, bad), INVALID_ID),
                (("CANCEL", q, jid, bad), INVALID_ID),
                (("JOB", q, bad), INVALID_ID),
                (("DEADLETTER", "DELETE", q, "ID", bad), INVALID_ID),
                (("PUBLISH", q, "x", "ID", bad), INVALID_ID),
            ]
        self.expect_errors(cases)
        self.assertEqual(self.job(q, jid)[b"state"], b"leased", "nothing happened to the job")
        self.assertQstat(q, leased=1, published_total=1, consumed_total=1)
        # Valid but unknown ids are not errors: they count 0 / answer null.
        self.assertEqual(self.cmd("ACK", q, "no-such-job"), 0)
        self.assertIsNone(self.cmd("JOB", q, "no-such-job"))
        self.assertEqual(self.cmd("ACK", q, jid), 1)

    def test_deadletter_help_answers_and_the_unknown_subcommand_hint_leads_to_it(self):
        q = self.q
        hint = self.raw.call("DEADLETTER", "NOSUCH", q)
        self.assertEqual(hint, "ERR unknown subcommand 'NOSUCH'. Try DEADLETTER HELP.")
        help_ = self.raw.call("DEADLETTER", "HELP")
        self.assertIsInstance(help_, list, help_)
        self.assertTrue(help_[0].startswith(b"DEADLETTER <subcommand>"), help_)
        text = b"\n".join(help_)
        for sub in (b"SIZE <queue>", b"PEEK <queue>", b"RESPAWN <queue>", b"DELETE <queue>",
                    b"HELP"):
            self.assertIn(sub, text)
        self.assertNotIn(b"Try DEADLETTER HELP", text)
        self.assertEqual(self.raw.call("deadletter", "help"), help_, "case-insensitive")
        self.assertEqual(self.raw.call("DEADLETTER", "HELP", "x"),
                         Err("ERR wrong number of arguments for 'deadletter|help' command"))


if __name__ == "__main__":
    sys.exit(main(__name__))
