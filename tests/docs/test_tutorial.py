"""The workers of docs/tutorial.md run as the page shows them.

The page's Python worker (its first ```python block) and Node worker (its first ```js block, with
ioredis 5 and ioredis 6, the npm packages tests/clients installs) are written to files unchanged
and started against a real deferq (DEFERQ_URL). Then, as the page's "Try the workers" says: an
order published with a delay is cancelled by the worker at its due time, an email is sent, and an
email that always fails is NACKed on each try and ends in the dead letter. Each worker is stopped
afterwards. The page's CALL program (section 9) runs as shown and prints its worker's result.

usage: test_tutorial.py DEFERQ_BINARY
"""

import os
import re
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from dqtest import probe, procs, runner  # noqa: E402

DEFERQ = None
ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
PAGE = os.path.join(ROOT, "docs", "tutorial.md")
CLIENTS = os.path.join(ROOT, "tests", "clients")


def code_block(lang, after=None):
    """The first ```lang block of the page, or the first after the heading `after`."""
    text = open(PAGE).read()
    if after is not None:
        text = text[text.index(after):]
    m = re.search(r"^```%s\n(.*?)^```" % lang, text, flags=re.M | re.S)
    assert m, "no ```%s block in %s" % (lang, PAGE)
    return m.group(1)


def install_npm_packages():
    """The npm packages of tests/clients (as run_clients.sh installs them), once."""
    lock = os.path.join(CLIENTS, "package-lock.json")
    stamp = os.path.join(CLIENTS, "node_modules", ".deferq-installed-lock.json")
    if os.path.exists(stamp) and open(stamp, "rb").read() == open(lock, "rb").read():
        return
    subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--prefix", CLIENTS], check=True,
                   stdout=sys.stderr)
    with open(stamp, "wb") as f:
        f.write(open(lock, "rb").read())


class Env:
    tmpdir = None
    redis = None


def setUpModule():
    Env.tmpdir = procs.make_tmpdir("tutorial")
    Env.redis = procs.Redis(Env.tmpdir).start()


def tearDownModule():
    if Env.redis is not None:
        Env.redis.stop()
    procs.remove_tmpdir(Env.tmpdir)


class Workers(unittest.TestCase):
    def setUp(self):
        subprocess.run(["redis-cli", "-p", str(Env.redis.port), "FLUSHALL"], check=True,
                       stdout=subprocess.DEVNULL)
        self.deferq = procs.Deferq(DEFERQ, Env.tmpdir, Env.redis.port).start()
        self.worker = None

    def tearDown(self):
        if self.worker is not None:
            procs.stop_process(self.worker)
            self.out.close()
        self.deferq.stop()

    def start_worker(self, argv, env_extra=None):
        self.log = os.path.join(Env.tmpdir, "worker-%s.log" % self.id().split(".")[-1])
        self.out = open(self.log, "w")
        env = dict(os.environ, DEFERQ_URL="redis://127.0.0.1:%d" % self.deferq.port,
                   **(env_extra or {}))
        self.worker = subprocess.Popen(argv, stdout=self.out, stderr=subprocess.STDOUT, env=env,
                                       cwd=Env.tmpdir)

    def printed(self):
        return open(self.log).read()

    def try_the_workers(self):
        raw = self.deferq.client()
        raw.execute_command("PUBLISH", "orders", "order-789", "DELAY", 1, "ID", "order-789")
        raw.execute_command("PUBLISH", "emails", "hello")
        raw.execute_command("PUBLISH", "emails", "fail-once", "TRIES", 2, "BACKOFF", 1)
        published = time.time()
        probe.wait_for("the worker cancels the order, sends the email, fails twice",
                       lambda: all(s in self.printed() for s in (
                           "cancelling unpaid order order-789", "sending email hello",
                           "failed: smtp down tries left: 1", "failed: smtp down tries left: 0")),
                       timeout=20)
        probe.wait_for("the failing email is in the dead letter",
                       lambda: raw.execute_command("DEADLETTER", "SIZE", "emails") == 1)
        # With why it failed, as the worker's NACK REASON said.
        dead = raw.execute_command("DEADLETTER", "PEEK", "emails", "WITHERRORS")
        self.assertEqual((dead[0][2], dead[0][7], dead[0][8]), (b"fail-once", b"smtp down", 2))
        # The order was due 1 s after its publish, not before.
        self.assertGreaterEqual(time.time() - published, 1.0)
        stats = dict(zip(*[iter(raw.execute_command("QSTAT", "orders"))] * 2))
        self.assertEqual(stats[b"acked_total"], 1)
        stats = dict(zip(*[iter(raw.execute_command("QSTAT", "emails"))] * 2))
        self.assertEqual(stats[b"acked_total"], 1)
        self.assertEqual(stats[b"ready"] + stats[b"delayed"] + stats[b"leased"], 0)

    def test_python_worker(self):
        path = os.path.join(Env.tmpdir, "worker.py")
        with open(path, "w") as f:
            f.write(code_block("python"))
        self.start_worker(["/usr/bin/python3", path])
        self.try_the_workers()

    def test_python_call(self):
        # "Ask and wait for the answer: CALL": the program starts its worker, CALLs, and prints
        # the worker's result.
        path = os.path.join(Env.tmpdir, "call.py")
        with open(path, "w") as f:
            f.write(code_block("python", after="## 9. Ask and wait for the answer: CALL"))
        env = dict(os.environ, DEFERQ_URL="redis://127.0.0.1:%d" % self.deferq.port)
        out = subprocess.run(["/usr/bin/python3", path], capture_output=True, text=True,
                             timeout=30, env=env)
        self.assertEqual(out.stdout.strip(), "b'resized image-42'", out.stderr)

    def node_worker(self, package):
        install_npm_packages()
        # The page says require('ioredis'): resolve it to one of the installed versions.
        modules = os.path.join(Env.tmpdir, "node-%s" % package, "node_modules")
        os.makedirs(modules, exist_ok=True)
        link = os.path.join(modules, "ioredis")
        if not os.path.lexists(link):
            os.symlink(os.path.join(CLIENTS, "node_modules", package), link)
        path = os.path.join(Env.tmpdir, "node-%s" % package, "worker.js")
        with open(path, "w") as f:
            f.write(code_block("js"))
        self.start_worker(["node", path],
                          {"NODE_PATH": os.path.join(CLIENTS, "node_modules")})
        self.try_the_workers()

    def test_node_worker_ioredis5(self):
        self.node_worker("ioredis5")

    def test_node_worker_ioredis6(self):
        self.node_worker("ioredis6")


if __name__ == "__main__":
    DEFERQ = os.path.abspath(sys.argv[1])
    result = runner.text_runner().run(unittest.defaultTestLoader.loadTestsFromTestCase(Workers))
    sys.exit(runner.report(result))
