"""docs/backup.md, done as the page says: a backup taken with `redis-cli --rdb` while deferq serves,
the Redis lost, a new Redis started from the backup, deferq started against it; every job comes
back in the state it had: ready jobs are consumed, delayed ones fall due, a leased one is
delivered again once its TTR passes, a dead one is still in the dead letter, a recurring one is
still scheduled. Jobs published after the backup are not there (the page says so).

usage: test_backup.py DEFERQ_BINARY
"""

import os
import shutil
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from dqtest import probe, procs, runner  # noqa: E402

DEFERQ = None


def qstat(client, queue):
    flat = client.execute_command("QSTAT", queue)
    return {k.decode(): v for k, v in zip(flat[0::2], flat[1::2])}


class Backup(unittest.TestCase):
    def setUp(self):
        self.tmpdir = procs.make_tmpdir("backup")
        self.servers = []

    def tearDown(self):
        for server in self.servers:
            server.stop()
        procs.remove_tmpdir(self.tmpdir)

    def start(self, server):
        self.servers.append(server.start())
        return server

    def test_restore_from_an_rdb_backup_brings_every_job_back_in_its_state(self):
        redis = self.start(procs.Redis(self.tmpdir, name="redis-old"))
        deferq = self.start(procs.Deferq(DEFERQ, self.tmpdir, redis.port))
        c = deferq.client()
        ready = [c.execute_command("PUBLISH", "orders", "ready-%d" % i) for i in range(3)]
        delayed = [c.execute_command("PUBLISH", "orders", "later-%d" % i, "DELAY", 8)
                   for i in range(2)]
        leased = c.execute_command("PUBLISH", "emails", "leased", "TRIES", 2)
        self.assertEqual(c.execute_command("CONSUME", "emails", "TTR", 2)[1], leased)
        dead = c.execute_command("PUBLISH", "emails", "dead")
        self.assertEqual(c.execute_command("CONSUME", "emails")[1], dead)
        self.assertEqual(c.execute_command("NACK", "emails", dead), 1)
        self.assertEqual(c.execute_command("PUBLISH", "reports", "nightly", "EVERY", 86400,
                                           "AT", 1893456000, "ID", "nightly"), b"nightly")

        # The backup, as the page takes it: a snapshot over the replication protocol.
        backup = os.path.join(self.tmpdir, "deferq-backup.rdb")
        subprocess.run(["redis-cli", "-p", str(redis.port), "--rdb", backup], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        after = c.execute_command("PUBLISH", "orders", "after-the-backup")

        # The Redis and its data are lost.
        deferq.stop()
        redis.stop()
        shutil.rmtree(redis.dir)

        # A new Redis from the backup, then deferq.
        restored = procs.Redis(self.tmpdir, name="redis-restored")
        shutil.copy(backup, os.path.join(restored.dir, "dump.rdb"))
        self.start(restored)
        deferq = self.start(procs.Deferq(DEFERQ, self.tmpdir, restored.port))
        c = deferq.client()

        s = qstat(c, "orders")
        self.assertEqual((s["ready"], s["delayed"]), (3, 2), s)
        self.assertEqual(c.execute_command("DEADLETTER", "SIZE", "emails"), 1)
        self.assertIsNone(c.execute_command("JOB", "orders", after), "published after the backup")
        job = c.execute_command("JOB", "reports", "nightly")
        fields = {k.decode(): v for k, v in zip(job[0::2], job[1::2])}
        self.assertEqual((fields["state"], fields["every_s"]), (b"delayed", 86400), fields)

        got = {}
        deadline = time.time() + 20
        while len(got) < 6 and time.time() < deadline:
            job = c.execute_command("CONSUME", "orders", "emails", "TIMEOUT", 1)
            if job is not None:
                got[job[1]] = job[2]
                self.assertEqual(c.execute_command("ACK", job[0], job[1]), 1)
        self.assertEqual(set(got), set(ready + delayed + [leased]), got)
        self.assertEqual(got[leased], b"leased")
        probe.wait_for("the queues are empty but for the dead letter",
                       lambda: qstat(c, "orders")["ready"] + qstat(c, "emails")["leased"] == 0)


if __name__ == "__main__":
    DEFERQ = os.path.abspath(sys.argv[1])
    result = runner.text_runner().run(unittest.defaultTestLoader.loadTestsFromTestCase(Backup))
    sys.exit(runner.report(result))
