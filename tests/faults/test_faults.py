#!/usr/bin/python3
"""Upstream faults (docs/operations.md), against the real deferq binary and real redis-server processes.

    /usr/bin/python3 tests/faults/test_faults.py /path/to/deferq [-v] [-k NAME]

Each test starts its own redis-server and deferq on free loopback ports and stops them at the
end, whatever happens. Every test pins one defect of issue 7 (items 7, 8, 9) or issue 8:

test_late_pool_with_allkeys_lru_is_refused_then_healed
    deferq starts while its Redis is down; Redis then comes up with allkeys-lru. Commands answer
    -TRYAGAIN with the reason and nothing is written to that Redis (DBSIZE 0, no library loaded);
    after CONFIG SET maxmemory-policy noeviction deferq serves without a restart.
test_restarted_pool_with_another_policy_is_refused
    a Redis that deferq used is restarted with volatile-lru: refused the same way, then healed.
test_large_flowing_reply_never_fails_other_clients
    one client pipelines 300 JOB/PEEK reads of a 1 MB job and reads nothing for 3 s, on the same
    (single) upstream connection as everyone else; the other clients' commands all succeed.
test_frozen_redis_timeout_for_sent_tryagain_for_unsent
    Redis frozen with SIGSTOP: commands already sent answer -TIMEOUT ... may have been applied,
    commands issued while the connection is down answer -TRYAGAIN; after SIGCONT everything
    works, the TIMEOUT publishes were in fact applied and the TRYAGAIN ones were not.
test_fresh_redis_under_load_at_start
    a fresh redis-server with 1,600 requests in flight at deferq's start, 10 times: no TRYAGAIN,
    and no script was ever sent with its whole body (no EVAL in Redis's commandstats).

Processes, ports and the raw RESP client come from the shared harness (tests/lib/dqtest). Prints
"N passed, M failed" and exits non-zero on any failure. Needs redis-py (Debian's python3-redis),
hence /usr/bin/python3.
"""

import os
import signal
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))

from dqtest import procs, runner  # noqa: E402
from dqtest.probe import info_pool, qstat, read_log, wait_for  # noqa: E402
from dqtest.resp import Err, Raw, encode  # noqa: E402

DEFERQ = None  # path of the deferq binary, from argv[1]

TRYAGAIN = "TRYAGAIN pool 'default' unavailable"
TIMEOUT = "TIMEOUT pool 'default' did not answer: the command may have been applied"
LRU_REASON = "maxmemory-policy is allkeys-lru, deferq needs noeviction"


def pool_config(redis_port, connections):
    """Config text for the pool "default"; the upstream timeout is the default one, 1 s, as when
    the defects were measured."""
    return ('[pools.default]\naddr = "redis://127.0.0.1:%d"\nconnections_per_thread = %d\n'
            "timeout_ms = 1000\n" % (redis_port, connections))


def command_calls(client):
    """Redis's commandstats as {command: calls}."""
    return {name[len("cmdstat_"):]: fields["calls"]
            for name, fields in client.info("commandstats").items()}


# --------------------------------------------------------------------------------------------


class FaultTestCase(unittest.TestCase):
    """Each test's processes live in its own directory and are stopped whatever happens."""

    def setUp(self):
        self.tmp = procs.make_tmpdir("faults")
        self.servers = []

    def tearDown(self):
        for server in self.servers:
            if server.proc is not None:
                server.proc.send_signal(signal.SIGCONT)  # a frozen Redis cannot act on SIGTERM
            server.stop()
        procs.remove_tmpdir(self.tmp)

    def redis(self, *extra, port=None):
        server = procs.Redis(self.tmp, extra=extra, port=port)
        self.servers.append(server)
        return server.start()

    def deferq(self, redis_port, threads=2, connections=2, wait_pool=True):
        server = procs.Deferq(DEFERQ, self.tmp, redis_port, pool_config(redis_port, connections),
                              threads=threads, wait_pool=wait_pool)
        self.servers.append(server)
        return server.start()


class PoolCheckTests(FaultTestCase):
    """Issue 7 item 7: the pool checks run on every connection before it carries traffic."""

    def assert_refused_and_untouched(self, dq, rc, reason):
        """Every kind of command answers TRYAGAIN with `reason`; Redis stays empty."""
        want = TRYAGAIN + ": " + reason
        # The first handshake may still be on its way: wait for the refusal, then hold to it.
        wait_for("the refusal", lambda: dq.call("PUBLISH", "q", "probe") == want)
        for args in [("PUBLISH", "q", "job-%d" % i) for i in range(20)] + [
                ("CONSUME", "q"), ("QSTAT", "q"), ("PEEK", "q"),
                ("JOB", "q", "01M84FF3G75GMMC2V0WKWRXYG1")]:
            self.assertEqual(dq.call(*args), want, args)
        self.assertEqual(info_pool(dq)["state"], "refused")
        self.assertEqual(rc.dbsize(), 0, "a refused pool was written to")
        calls = command_calls(rc)
        for written in ("evalsha", "eval", "script|load", "fcall", "function|load"):
            self.assertNotIn(written, calls)

    def assert_heals(self, dq, rc, server):
        """After CONFIG SET noeviction, deferq serves on that Redis without a restart."""
        rc.config_set("maxmemory-policy", "noeviction")

        def publish():
            r = dq.call("PUBLISH", "healed", "payload")
            return r if isinstance(r, bytes) else None

        jid = wait_for("deferq to serve again", publish)
        self.assertEqual(dq.call("CONSUME", "healed")[:3], [b"healed", jid, b"payload"])
        self.assertGreater(rc.dbsize(), 0)
        # The handshake loaded the function library first; no script ever went out as EVAL.
        calls = command_calls(rc)
        self.assertIn("function|load", calls)
        self.assertNotIn("eval", calls)
        text = read_log(server)
        self.assertEqual(text.count(" refused: "), 1, "one log line per transition:\n" + text)
        self.assertEqual(text.count("passes its checks now"), 1, text)
        self.assertEqual(info_pool(dq)["state"], "up")

    def test_late_pool_with_allkeys_lru_is_refused_then_healed(self):
        redis_port = procs.free_port()
        server = self.deferq(redis_port, wait_pool=False)  # Redis is not there yet
        dq = Raw(server.port)
        self.assertEqual(dq.call("PUBLISH", "q", "early"), TRYAGAIN)
        rd = self.redis("--maxmemory", "100mb", "--maxmemory-policy", "allkeys-lru",
                        port=redis_port)
        self.assert_refused_and_untouched(dq, rd.client(), LRU_REASON)
        self.assert_heals(dq, rd.client(), server)
        dq.close()

    def test_restarted_pool_with_another_policy_is_refused(self):
        rd = self.redis()
        server = self.deferq(rd.port)
        dq = Raw(server.port)
        self.assertIsInstance(dq.call("PUBLISH", "q", "before"), bytes)
        rd.stop()  # the same port, a new Redis: a restart, or a failover to another config
        rd.extra = ["--maxmemory", "100mb", "--maxmemory-policy", "volatile-lru"]
        rd.start()
        self.assert_refused_and_untouched(
            dq, rd.client(), "maxmemory-policy is volatile-lru, deferq needs noeviction")
        self.assert_heals(dq, rd.client(), server)
        dq.close()


class ProgressTimeoutTests(FaultTestCase):
    """Issue 7 item 8: the upstream timeout counts from the last progress on the connection."""

    def test_large_flowing_reply_never_fails_other_clients(self):
        rd = self.redis()
        # One thread, one pool connection: every client's requests share it with the hog's.
        server = self.deferq(rd.port, threads=1, connections=1)
        setup = Raw(server.port, timeout=30)
        big = os.urandom(500000).hex().encode()  # 1,000,000 bytes
        jid = setup.call("PUBLISH", "big", big)
        self.assertIsInstance(jid, bytes)

        hog = Raw(server.port)
        reads = [("JOB", "big", jid) if i % 2 else ("PEEK", "big") for i in range(300)]
        hog.send_bytes(b"".join(encode(r) for r in reads))

        stop = time.monotonic() + 3.0  # the hog reads nothing meanwhile
        errors, done = [], [0] * 4

        def other(n):
            c = Raw(server.port, timeout=30)
            try:
                while time.monotonic() < stop:
                    for args in (("PUBLISH", "small-%d" % n, "x"), ("QSTAT", "small-%d" % n)):
                        r = c.call(*args)
                        if isinstance(r, Err):
                            errors.append((args, r))
                    done[n] += 1
            except OSError as e:
                errors.append(("connection", repr(e)))
            finally:
                c.close()

        threads = [threading.Thread(target=other, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        hog.close()
        self.assertEqual(errors[:5], [], "%d failed commands" % len(errors))
        for n in range(4):
            self.assertGreater(done[n], 0, "client %d got no reply in 3 s" % n)
            self.assertEqual(qstat(setup, "small-%d" % n)[b"published_total"], done[n])
        pool = info_pool(setup)
        self.assertEqual((pool["failures"], pool["timeouts"]), ("0", "0"))
        setup.close()


class SentOrNotTests(FaultTestCase):
    """Issue 7 item 9: TRYAGAIN only when the command never reached Redis."""

    def test_frozen_redis_timeout_for_sent_tryagain_for_unsent(self):
        rd = self.redis()
        # One connection, so "the connection" of the commands below is the one that timed out.
        server = self.deferq(rd.port, threads=1, connections=1)
        dq = Raw(server.port, timeout=30)
        self.assertIsInstance(dq.call("PUBLISH", "warmup", "x"), bytes)

        rd.proc.send_signal(signal.SIGSTOP)
        try:
            # Written to Redis's socket, never answered.
            t0 = time.monotonic()
            dq.send_bytes(b"".join(encode(("PUBLISH", "sent", "job-%d" % i)) for i in range(20)))
            sent = [dq.read() for _ in range(20)]
            took = time.monotonic() - t0
            self.assertEqual(sent, [TIMEOUT] * 20)
            self.assertLess(took, 5.0, "the timeout is 1 s without progress")
            # Issued while the connection is down, backing off, or handshaking with a frozen
            # Redis (held, never written).
            unsent = []
            for i in range(8):
                unsent.append(dq.call("PUBLISH", "unsent", "job-%d" % i))
                time.sleep(0.25)
            self.assertEqual(unsent, [TRYAGAIN] * 8)
        finally:
            rd.proc.send_signal(signal.SIGCONT)

        wait_for("deferq to serve again",
                 lambda: isinstance(dq.call("PUBLISH", "after", "x"), bytes))
        self.assertEqual(dq.call("CONSUME", "after")[2], b"x")
        # What TIMEOUT warned of: Redis read and applied them once it ran again. The TRYAGAIN
        # ones never got there, so retrying them cannot duplicate anything.
        self.assertEqual(qstat(dq, "sent")[b"ready"], 20)
        self.assertEqual(qstat(dq, "unsent")[b"published_total"], 0)
        pool = info_pool(dq)
        self.assertGreaterEqual(int(pool["timeouts"]), 20)
        self.assertGreaterEqual(int(pool["failures"]), 8)
        dq.close()


class StartupTests(FaultTestCase):
    """Issue 8: scripts are loaded before traffic, so a start under load fails nothing."""

    def test_fresh_redis_under_load_at_start(self):
        clients, per_client = 16, 100
        for run in range(10):
            rd = self.redis()
            server = self.deferq(rd.port, wait_pool=False)
            conns = [Raw(server.port, timeout=30) for _ in range(clients)]
            for n, c in enumerate(conns):
                c.send_bytes(b"".join(encode(("PUBLISH", "load-%d" % n, "job-%d" % i))
                                      for i in range(per_client)))
            replies = [c.read() for c in conns for _ in range(per_client)]
            errors = [r for r in replies if not isinstance(r, bytes)]
            self.assertEqual(errors[:5], [], "run %d: %d errors; log:\n%s"
                             % (run, len(errors), read_log(server)))
            self.assertEqual(len(set(replies)), clients * per_client)
            self.assertEqual(qstat(conns[0], "load-0")[b"ready"], per_client)
            calls = command_calls(rd.client())
            self.assertNotIn("eval", calls, "a script went out with its whole body")
            for c in conns:
                c.close()
            server.stop()
            rd.stop()


# --------------------------------------------------------------------------------------------


if __name__ == "__main__":
    DEFERQ = runner.binary_arg(sys.argv, "test_faults.py /path/to/deferq [unittest options]")
    sys.exit(2 if DEFERQ is None else runner.main(__name__, sys.argv))
