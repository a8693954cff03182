#!/usr/bin/python3
"""INFO queues (SPEC §5, §8; issue 7 item 5): one key per queue, like `db0:` in Redis's
# Keyspace, so client libraries' info() parsers keep every queue, and a queue name with ':' does
not break the line. The key is "queue_" + namespace + "/" + queue with ':' written "%3A"
(docs/commands.md). Checked through redis-py's own info('queues').

A part of the job suite: see jobcase.py (run every part with test_jobs.py)."""

import sys
import time

from jobcase import JobTestCase, main

FIELDS = {"lateness_count", "lateness_p50_ms", "lateness_p90_ms", "lateness_p99_ms",
          "lateness_max_ms"}


def info_key(ns, queue):
    return "queue_" + ("%s/%s" % (ns, queue)).replace(":", "%3A")


class InfoQueuesTests(JobTestCase):

    def deliver_delayed(self, queues, client=None):
        """One delayed job per queue, consumed once due: the pump records its lateness."""
        for q in queues:
            self.pub(q, b"d", "PDELAY", 20, client=client)
        deadline = time.time() + 5
        left = list(queues)
        while left and time.time() < deadline:
            left = [q for q in left if self.consume(q, client=client) is None]
            time.sleep(0.02)
        self.assertEqual(left, [], "delayed jobs never became ready")

    def test_redis_py_info_keeps_two_queues_one_with_a_colon_in_its_name(self):
        plain, colon = self.q, self.q + ":eu:1"
        self.deliver_delayed([plain, colon])
        info = self.c.info("queues")
        for q in (plain, colon):
            key = info_key("default", q)
            self.assertIn(key, info, "INFO queues as redis-py parses it: %r" % info)
            figures = info[key]
            self.assertIsInstance(figures, dict, "%s: %r" % (key, figures))
            self.assertEqual(set(figures), FIELDS, figures)
            self.assertEqual(figures["lateness_count"], 1, figures)
            self.assertTrue(all(isinstance(v, int) for v in figures.values()), figures)
        raw = self.raw.call("INFO", "queues").decode()
        # The section is server-wide (earlier tests' queues are listed too): this test's lines.
        lines = [l for l in raw.split("\r\n") if l.startswith("queue_default/" + plain)]
        self.assertEqual(len(lines), 2, raw)
        for line in lines:
            key, value = line.split(":", 1)
            self.assertNotIn(":", key, line)
            self.assertNotIn(":", value, line)

    def test_keys_are_unique_per_namespace_and_queue_and_decode_back_to_the_names(self):
        q = self.q + ":x"
        other = self.client()
        self.assertTrue(other.execute_command("AUTH", "team:b", "anything"))
        self.deliver_delayed([q])
        self.deliver_delayed([q], client=other)
        info = self.c.info("queues")
        keys = sorted(k for k in info if k.startswith("queue_") and k.endswith(self.q + "%3Ax"))
        self.assertEqual(keys, sorted([info_key("default", q), info_key("team:b", q)]), info)
        decoded = sorted(k[len("queue_"):].replace("%3A", ":") for k in keys)
        self.assertEqual(decoded, sorted(["default/" + q, "team:b/" + q]))


if __name__ == "__main__":
    sys.exit(main(__name__))
