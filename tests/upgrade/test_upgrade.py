"""docs/upgrade.md's rolling upgrade, done as the page says, with jobs in flight.

The previous version (PREVIOUS below: a commit of this repository whose storage functions differ
from today's) is built from the repository's history into the test's directory (deferq only, -O0:
about 45 s on 2 cores). Two instances of it serve one pool while producers publish delayed and
ready jobs through both and consumers lease and ACK through both; then the instances are replaced
one at a time by this build (SIGTERM, start the new binary on the same port), so for a while the
two versions serve the pool together, each with its own Functions library. Every job published
before, during and after is delivered and ACKed, none is left in the queue or the dead letter, and
both libraries were loaded side by side.

usage: test_upgrade.py DEFERQ_BINARY
"""

import os
import subprocess
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from dqtest import probe, procs, runner  # noqa: E402

import redis  # noqa: E402  (Debian's python3-redis)

DEFERQ = None
ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
# The version upgraded from: pump.lua and the common code differ from today's, so the two
# versions load two libraries. Move it forward when the storage changes in a way an upgrade must
# survive.
PREVIOUS = "0eb16d4"
QUEUES = ["orders", "emails", "reports"]


def build_previous(tmpdir):
    src = os.path.join(tmpdir, "previous")
    os.makedirs(src)
    archive = subprocess.run(["git", "-C", ROOT, "archive", PREVIOUS], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
    if archive.returncode != 0:
        raise RuntimeError("cannot read commit %s from the repository's history (a shallow "
                           "clone?): %s" % (PREVIOUS, archive.stderr.decode()))
    subprocess.run(["tar", "-x", "-C", src], input=archive.stdout, check=True)
    build = os.path.join(src, "build")
    subprocess.run(["meson", "setup", build, "-Dtests=false", "-Doptimization=0", "-Ddebug=false"],
                   cwd=src, check=True, stdout=subprocess.DEVNULL)
    log = os.path.join(tmpdir, "previous-build.log")
    with open(log, "w") as out:
        if subprocess.run(["ninja", "-C", build, "src/deferq"], stdout=out,
                          stderr=subprocess.STDOUT).returncode != 0:
            raise RuntimeError("building %s failed:\n%s" % (PREVIOUS, procs.file_tail(log, 40)))
    return os.path.join(build, "src", "deferq")


class Fleet:
    """Two instance slots on fixed ports; each slot runs one binary at a time."""

    def __init__(self, tmpdir, redis_port, binary):
        self.tmpdir = tmpdir
        self.redis_port = redis_port
        self.instances = [procs.Deferq(binary, tmpdir, redis_port, name="deferq-%d-v0" % i).start()
                          for i in range(2)]
        self.ports = [d.port for d in self.instances]

    def replace(self, i, binary, name):
        self.instances[i].stop()
        self.instances[i] = procs.Deferq(binary, self.tmpdir, self.redis_port, name=name,
                                         port=self.ports[i]).start()

    def stop(self):
        for d in self.instances:
            d.stop()


class Upgrade(unittest.TestCase):
    def setUp(self):
        self.tmpdir = procs.make_tmpdir("upgrade")
        self.redis = None
        self.fleet = None

    def tearDown(self):
        if self.fleet is not None:
            self.fleet.stop()
        if self.redis is not None:
            self.redis.stop()
        procs.remove_tmpdir(self.tmpdir)

    def test_rolling_upgrade_with_jobs_in_flight_loses_nothing(self):
        previous = build_previous(self.tmpdir)
        self.redis = procs.Redis(self.tmpdir).start()
        self.fleet = Fleet(self.tmpdir, self.redis.port, previous)
        ports = self.fleet.ports

        published, acked = set(), set()
        deliveries = [0]
        lock = threading.Lock()
        stop = threading.Event()
        errors = []

        def client(i):
            return redis.Redis(host="127.0.0.1", port=ports[i], socket_timeout=5)

        def produce(i):
            c, n = client(i), 0
            while not stop.is_set():
                try:
                    q = QUEUES[n % len(QUEUES)]
                    jid = c.execute_command("PUBLISH", q, "job-%d-%d" % (i, n), "PDELAY",
                                            (n * 37) % 1500, "TRIES", 3)
                    with lock:
                        published.add((q, jid))
                    n += 1
                except (redis.ConnectionError, redis.TimeoutError, redis.ResponseError):
                    time.sleep(0.05)  # the instance is being replaced: publish again there
                    c = client(i)
                time.sleep(0.01)

        def consume(i):
            c = client(i)
            while not stop.is_set() or len(acked) < len(published):
                try:
                    job = c.execute_command("CONSUME", *QUEUES, "TTR", 2, "TIMEOUT", 0.5)
                    if job is None:
                        if stop.is_set() and time.time() > drain_deadline[0]:
                            return
                        continue
                    with lock:
                        deliveries[0] += 1
                    if c.execute_command("ACK", job[0], job[1]) == 1:
                        with lock:
                            acked.add((job[0].decode(), job[1]))
                except (redis.ConnectionError, redis.TimeoutError, redis.ResponseError) as e:
                    # A lease held by a connection that went with its instance comes back after
                    # its TTR, through the other instance or the new one.
                    if isinstance(e, redis.ResponseError) and "TRYAGAIN" not in str(e):
                        errors.append(str(e))
                    time.sleep(0.05)
                    c = client(i)

        drain_deadline = [float("inf")]
        threads = [threading.Thread(target=f, args=(i,)) for f in (produce, consume)
                   for i in (0, 1)]
        for t in threads:
            t.start()
        try:
            time.sleep(1.5)  # both instances on the previous version
            self.fleet.replace(1, DEFERQ, "deferq-1-v1")
            time.sleep(2.0)  # two versions on one pool
            self.fleet.replace(0, DEFERQ, "deferq-0-v1")
            time.sleep(1.5)  # both on this version
        finally:
            stop.set()
            drain_deadline[0] = time.time() + 10
            for t in threads:
                t.join(30)
        print("published %d jobs, %d deliveries (a lease lost with its instance comes back)"
              % (len(published), deliveries[0]))
        self.assertEqual(errors, [])
        self.assertGreater(len(published), 100)
        missing = published - acked
        self.assertEqual(missing, set(), "%d of %d jobs never acked" % (len(missing), len(published)))

        c = client(0)
        for q in QUEUES:
            flat = c.execute_command("QSTAT", q)
            s = {k.decode(): v for k, v in zip(flat[0::2], flat[1::2])}
            self.assertEqual((s["ready"], s["delayed"], s["leased"], s["dead"]), (0, 0, 0, 0),
                             "%s: %s" % (q, s))
        libraries = redis.Redis(port=self.redis.port).execute_command("FUNCTION", "LIST")
        names = sorted(entry[1].decode() for entry in libraries)
        self.assertEqual(len([n for n in names if n.startswith("deferq_")]), 2, names)


if __name__ == "__main__":
    DEFERQ = os.path.abspath(sys.argv[1])
    result = runner.text_runner().run(unittest.defaultTestLoader.loadTestsFromTestCase(Upgrade))
    sys.exit(runner.report(result))
