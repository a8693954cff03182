#!/usr/bin/python3
"""Every command's reply in RESP2 and RESP3, checked against each other through the real server
(docs/commands.md; issue 7 item 3): the same command sequence runs on a RESP2 and on a RESP3
connection over the same Redis state, and each pair of replies must correspond — a RESP3 map is
the RESP2 flat array of its pairs, `_` a RESP2 null, a double a bulk string, a boolean 1 or 0;
everything else, jobs included, is the same value. The unit test reply_shapes_test.cc checks the
same rules on the reply writers alone.

A part of the job suite: see jobcase.py (run every part with test_jobs.py)."""

import sys

from jobcase import Err, JobTestCase, main, RMap
from dqtest.resp import NULL3, Status

Q = "parity"
# (command, values compared too): False where a value changes between two runs (ids of
# connections, times, elapsed_ms, uptime); the shape is compared always.
SEQUENCE = [
    (("PING",), True),
    (("PING", "m"), True),
    (("ECHO", "e"), True),
    (("SELECT", 0), True),
    (("TIME",), False),
    (("CLIENT", "SETNAME", "parity"), True),
    (("CLIENT", "GETNAME"), True),
    (("CLIENT", "ID"), False),
    (("CLIENT", "INFO"), False),
    (("CLIENT", "HELP"), True),
    (("COMMAND", "COUNT"), True),
    (("COMMAND", "INFO", "publish", "nosuch", "exec"), True),
    (("COMMAND", "DOCS", "consume"), True),
    (("INFO", "clients"), False),
    (("PUBLISH", Q, "a", "ID", "ja", "TRIES", 2), True),
    (("PUBLISH", Q, "b", "ID", "jb", "TTL", 0), True),
    (("PUBLISH", Q, "c", "ID", "jc", "DELAY", 600), True),
    (("PEEK", Q, "COUNT", 5), False),
    (("QSTAT", Q), True),
    (("QUEUES",), True),
    (("JOB", Q, "ja"), False),
    (("JOB", Q, "nosuch"), True),
    (("CONSUME", Q), False),
    (("CONSUME", Q, "COUNT", 5, "TTR", 30), False),
    (("CONSUME", Q), True),
    (("CONSUME", Q, "COUNT", 2), True),
    (("TOUCH", Q, "ja", "TTR", 30), True),
    (("NACK", Q, "jb"), True),
    (("ACK", Q, "ja", "nosuch"), True),
    (("CANCEL", Q, "jc"), True),
    (("DEADLETTER", "SIZE", Q), True),
    (("DEADLETTER", "PEEK", Q), False),
    (("DEADLETTER", "RESPAWN", Q, "COUNT", 5), True),
    (("DEADLETTER", "DELETE", Q, "COUNT", 5), True),
    (("DEADLETTER", "HELP"), True),
    (("MULTI",), True),
    (("PUBLISH", Q, "t", "ID", "jt"), True),
    (("QSTAT", Q), True),
    (("CONSUME", Q, "TIMEOUT", 1), True),
    (("JOB", Q, "nosuch"), True),
    (("EXEC",), False),
    (("WATCH", "k"), True),
    (("PURGE", Q), True),
    (("PUBLISH", Q, "x", "TTL", 1, "TTL", 2), True),
    (("NOSUCH",), True),
]


def rename(reply, old, new):
    """The reply with every bytes value equal to `old` replaced by `new` (types kept)."""
    if isinstance(reply, RMap):
        return RMap((rename(k, old, new), rename(v, old, new)) for k, v in reply)
    if isinstance(reply, list):
        return [rename(x, old, new) for x in reply]
    if isinstance(reply, bytes) and not isinstance(reply, Status) and reply == old:
        return new
    return reply


def corresponds(r2, r3, stable, at):
    """None when the RESP3 reply r3 is what the RESP2 reply r2 is, else why not."""
    if isinstance(r3, RMap):
        flat = [x for pair in r3 for x in pair]
        if not isinstance(r2, list) or len(r2) != len(flat):
            return "%s: a RESP3 map of %d pairs must be a flat RESP2 array: %r" % (at, len(r3), r2)
        r3 = flat
    if r3 is NULL3:
        return None if r2 is None else "%s: RESP3 null vs RESP2 %r" % (at, r2)
    if isinstance(r3, bool):
        return None if r2 == int(r3) else "%s: boolean %r vs %r" % (at, r3, r2)
    if isinstance(r3, float):
        return None if isinstance(r2, bytes) and float(r2) == r3 else "%s: %r vs %r" % (at, r3, r2)
    if isinstance(r3, list):
        if not isinstance(r2, list) or len(r2) != len(r3):
            return "%s: arrays differ: %r vs %r" % (at, r2, r3)
        for i, (a, b) in enumerate(zip(r2, r3)):
            why = corresponds(a, b, stable, "%s[%d]" % (at, i))
            if why:
                return why
        return None
    if type(r2) is not type(r3):
        return "%s: RESP2 %r (%s) vs RESP3 %r (%s)" % (at, r2, type(r2).__name__, r3,
                                                      type(r3).__name__)
    if stable and r2 != r3:
        return "%s: %r vs %r" % (at, r2, r3)
    return None


class RespParityTests(JobTestCase):

    def run_sequence(self, resp):
        """SEQUENCE on a fresh connection speaking `resp`, on a queue of its own (same length
        for both runs) so the runs start from the same state; replies name it as Q."""
        q = "%s%d" % (Q[:-1], resp)
        conn = self.raw_client()
        if resp == 3:
            self.assertIsInstance(conn.call("HELLO", 3), RMap)
        replies = [conn.call(*(q if a == Q else a for a in args)) for args, _ in SEQUENCE]
        self.assertEqual(conn.call("PURGE", q), 0, "the sequence ends with nothing left")
        return rename(replies, q.encode(), Q.encode())

    def test_every_command_answers_the_same_reply_in_resp2_and_resp3(self):
        r2 = self.run_sequence(2)
        r3 = self.run_sequence(3)
        bad = []
        for (args, stable), a, b in zip(SEQUENCE, r2, r3):
            why = corresponds(a, b, stable, " ".join(map(str, args)))
            if why:
                bad.append(why)
        self.assertEqual(bad, [], "\n".join(bad))
        # The sequence did what it says (so the comparison covered real replies).
        replies = {}  # the first reply of each command line
        for (args, _), r in zip(SEQUENCE, r3):
            replies.setdefault(" ".join(map(str, args)), r)
        self.assertEqual(len(replies["CONSUME parity"]), 7)
        self.assertIsInstance(replies["QSTAT parity"], RMap)
        self.assertIsInstance(replies["JOB parity ja"], RMap)
        self.assertEqual(replies["CONSUME parity COUNT 2"], NULL3)
        self.assertEqual(replies["CONSUME parity TIMEOUT 1"], b"QUEUED")
        self.assertEqual(replies["DEADLETTER SIZE parity"], 1)
        self.assertIsInstance(replies["EXEC"], list)
        self.assertEqual(replies["EXEC"][0], b"jt")
        self.assertIsInstance(replies["NOSUCH"], Err)
        self.assertIsInstance(replies["PING"], Status)


if __name__ == "__main__":
    sys.exit(main(__name__))
