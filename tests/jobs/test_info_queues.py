#!/usr/bin/python3
"""INFO queues (docs/metrics.md; issue 7 item 5): one key per queue, like `db0:` in Redis's
# Keyspace, so client libraries' info() parsers keep every queue, and a queue name with ':' does
not break the line. The key is "queue_" + namespace + "/" + queue with ':' written "%3A"
(docs/commands.md). Checked through redis-py's own info('queues').

A part of the job suite: see jobcase.py (run every part with test_jobs.py)."""

import sys
import time

from jobcase import JobTestCase, main

FIELDS = {"lateness_count", "lateness_p50_ms", "lateness_p90_ms", "lateness_p99_ms",
          "lateness_max_ms"}
# Backlog and counters read from Redis every 2 s (docs/metrics.md): on the line once read.
JOB_FIELDS = {"ready", "delayed", "leased", "dead", "published", "consumed", "acked", "nacked",
              "cancelled", "expired", "dead_total", "respawned", "paused", "undelivered",
              "schedules"}


def info_key(ns, queue):
    return "queue_" + ("%s/%s" % (ns, queue)).replace(":", "%3A")


class InfoQueuesTests(JobTestCase):

    def deliver_delayed(self, queues, client=None):
        """One delayed job per queue, taken by a consumer blocked on it before it falls due: the
        pump moves it at its due ms and records its lateness (a job nobody waits for may be
        moved by a read instead, which records none: docs/metrics.md)."""
        for q in queues:
            jid = self.pub(q, b"d", "PDELAY", 300, client=client)
            job = self.consume(q, "TIMEOUT", 5, client=client)
            self.assertIsNotNone(job, "the delayed job never became ready")
            self.assertEqual(job[1], jid)

    def test_redis_py_info_keeps_two_queues_one_with_a_colon_in_its_name(self):
        plain, colon = self.q, self.q + ":eu:1"
        self.deliver_delayed([plain, colon])
        info = self.c.info("queues")
        for q in (plain, colon):
            key = info_key("default", q)
            self.assertIn(key, info, "INFO queues as redis-py parses it: %r" % info)
            figures = info[key]
            self.assertIsInstance(figures, dict, "%s: %r" % (key, figures))
            self.assertTrue(FIELDS <= set(figures) <= FIELDS | JOB_FIELDS, figures)
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

    def test_sections_parse_with_redis_py_and_carry_what_redis_writes_plus_the_job_figures(self):
        q = self.q
        for _ in range(3):
            self.pub(q, b"x")
        job = self.consume(q)
        self.assertEqual(self.c.execute_command("ACK", q, job[1]), 1)
        # The job figures are read every 2 s: wait until this queue's line has them. A read may
        # fall between the third publish and the consume (CI saw published=3, consumed=0), so
        # wait for the whole expected set, not for the first figure to show.
        deadline = time.time() + 6
        key = info_key("default", q)
        want = dict(ready=2, leased=0, published=3, consumed=1, acked=1)
        figures, got = {}, {}
        while time.time() < deadline:
            figures = self.c.info("queues").get(key, {})
            got = {k: figures.get(k) for k in want}
            if got == want:
                break
            time.sleep(0.1)
        self.assertEqual(got, want, figures)
        server = self.c.info("server")
        for field in ("redis_version", "redis_mode", "os", "arch_bits", "multiplexing_api",
                      "process_id", "run_id", "tcp_port", "server_time_usec",
                      "uptime_in_seconds", "uptime_in_days", "hz", "executable", "gcc_version"):
            self.assertIn(field, server, server)
        self.assertIsInstance(server["process_id"], int)
        self.assertIsInstance(server["tcp_port"], int)
        clients = self.c.info("clients")
        self.assertGreaterEqual(clients["connected_clients"], 1)
        self.assertIn("blocked_clients", clients)
        stats = self.c.info("stats")
        for field in ("total_connections_received", "total_commands_processed",
                      "total_net_input_bytes", "total_net_output_bytes", "rejected_connections",
                      "client_output_buffer_limit_disconnections", "total_jobs_published",
                      "total_jobs_acked", "total_jobs_dead", "job_stats_age_ms", "pump_owner"):
            self.assertIsInstance(stats[field], int, field)
        self.assertGreaterEqual(stats["total_jobs_published"], 3)
        self.assertEqual(stats["pump_owner"], 1)  # the only instance on this pool
        self.assertEqual(stats["pump_shards"], 0)  # no sharded queue in this config
        pools = self.c.info("pools")
        self.assertEqual(pools["pool_default"]["state"], "up", pools)
        # "all", "everything" and "default" name every section; so does INFO alone.
        for args in ((), ("all",), ("everything",), ("default",)):
            info = self.c.info(*args)
            for field in ("redis_version", "connected_clients", "total_commands_processed",
                          "pool_default", key):
                self.assertIn(field, info, args)


if __name__ == "__main__":
    sys.exit(main(__name__))
