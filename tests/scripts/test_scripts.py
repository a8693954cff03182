#!/usr/bin/python3
"""Tests for deferq's Redis Lua scripts (src/persist/scripts/*.lua): runs every script test file.

    /usr/bin/python3 tests/scripts/test_scripts.py <scripts-dir> [-v] [-k NAME]
    /usr/bin/python3 tests/scripts/test_scripts.py <scripts-dir> --memory N

Starts its own redis-server on a free loopback port, loads every script and drives each state
transition with a controlled now_ms. After every script call the queue's keys are checked against
the storage invariants (check_invariants), so the counters in P.."s" are verified exact after every
operation. Ends with "N passed, M failed"; exits non-zero on any failure.

--memory N publishes N default delayed jobs (64-byte payload, generated derivable K, due times
spread over the next hour) through publish.lua and prints Redis used_memory per job, then the same
for alternative layouts. The scripts are loaded as the build makes them: one Redis Functions
library (src/persist/embed_scripts.py), called with FCALL.

The tests live by topic in test_publish_consume.py, test_pump.py and test_invariants.py, their
shared part in scriptlib.py; this runner loads them all into one run (one redis-server), and
last checks that every script listed in src/persist/scripts/list.txt was called by a test
(ScriptCoverageCheck).

Needs redis-py (Debian's python3-redis), hence /usr/bin/python3.
"""

import argparse
import os
import random
import signal
import sys
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from dqtest import runner  # noqa: E402

import scriptlib  # noqa: E402
from scriptlib import (  # noqa: E402
    CALLED, DUE, REGISTRY, T, RedisServer, ScriptTest, all_functions, gen_key, load_scripts,
    record)
import test_batch  # noqa: E402
import test_invariants  # noqa: E402
import test_publish_consume  # noqa: E402
import test_pump  # noqa: E402

TEST_MODULES = [test_publish_consume, test_pump, test_invariants, test_batch]


class ScriptCoverageCheck(unittest.TestCase):
    """Run after every other test (main adds it last): each listed script was called directly."""

    def test_every_listed_script_was_called_by_a_test(self):
        self.assertEqual(sorted(set(all_functions()) - CALLED), [])


# --------------------------------------------------------------------------------------------
# Memory measurement.

def used_memory(c):
    return c.info('memory')['used_memory']


def measure(c, n, fill, label, rng):
    c.flushall()
    time.sleep(0.2)
    before = used_memory(c)
    pipe = c.pipeline(transaction=False)
    for i in range(n):
        fill(pipe, i)
        if i % 10000 == 9999:
            pipe.execute()
    pipe.execute()
    after = used_memory(c)
    per_job = (after - before) / n
    print('%-64s %8.1f bytes/job' % (label, per_job))
    return per_job


def memory_mode(n):
    server = RedisServer()
    try:
        c = server.client
        shas = load_scripts(c)
        P = b'dq:{default/mem}:'
        now = T
        rng = random.Random(7)
        dues = [now + rng.randint(1, 3600 * 1000) for _ in range(n)]
        keys = [gen_key(d, rng.randbytes(10)) for d in dues]
        payload = bytes(rng.randrange(256) for _ in range(64))
        rec = record(now, payload=payload)
        assert len(rec) == 75
        print('%d delayed jobs, 64-byte payloads, due over the next hour, redis-server %s' %
              (n, c.info('server')['redis_version']))

        def deferq(pipe, i):
            pipe.fcall(shas['publish'], 3, P, REGISTRY, DUE, now, keys[i], rec, dues[i], '', '1')
        main = measure(c, n, deferq, 'deferq: publish.lua (1-s bucket hashes, 12-byte fields)',
                       rng)
        st = c.hmget(P + b's', 'delayed', 'pd')  # the gauge is delayed + pd (storage.md)
        assert sum(int(v or 0) for v in st) == n, st
        print('  (%d bucket keys)' % c.zcard(P + b'b'))

        def custom(pipe, i):
            pipe.fcall(shas['publish'], 3, P, REGISTRY, DUE, now, b'#order-%08d' % i, rec, dues[i], 'id', '0')
        measure(c, n, custom, 'deferq: custom ids ("#order-NNNNNNNN", bucket + index part entry)',
                rng)

        def string_zset(pipe, i):
            pipe.set(P + b'job:' + keys[i], rec)
            pipe.zadd(P + b'timer', {keys[i]: dues[i]})
        measure(c, n, string_zset, 'alternative: one string key per job + timer ZSET', rng)

        def hash_zset(pipe, i):
            pipe.hset(P + b'j', keys[i], rec)
            pipe.zadd(P + b'timer', {keys[i]: dues[i]})
        measure(c, n, hash_zset, 'alternative: one HASH of records + timer ZSET', rng)

        def zset_only(pipe, i):
            pipe.zadd(P + b'timer', {keys[i] + rec: dues[i]})
        measure(c, n, zset_only, 'alternative: record inside the timer ZSET member (no lookup)',
                rng)
        return main
    finally:
        server.stop()


# --------------------------------------------------------------------------------------------

def iter_tests(suite):
    for t in suite:
        if isinstance(t, unittest.TestSuite):
            yield from iter_tests(t)
        else:
            yield t


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('scripts_dir')
    ap.add_argument('--memory', type=int, metavar='N')
    ap.add_argument('-v', '--verbose', action='store_true')
    ap.add_argument('-k', dest='pattern', help='run only tests whose name contains this')
    args = ap.parse_args()
    scriptlib.SCRIPTS_DIR = args.scripts_dir
    # SIGTERM unwinds like Ctrl-C, so the finally blocks stop our redis-servers.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.memory:
        memory_mode(args.memory)
        return 0

    loader = unittest.TestLoader()
    if args.pattern:
        loader.testNamePatterns = ['*%s*' % args.pattern]
    suite = unittest.TestSuite(
        t for m in TEST_MODULES for t in iter_tests(loader.loadTestsFromModule(m)))
    if not args.pattern:
        suite.addTest(ScriptCoverageCheck('test_every_listed_script_was_called_by_a_test'))
    try:
        return runner.run_suite(suite, verbosity=2 if args.verbose else 1)
    finally:
        if ScriptTest.server is not None:
            ScriptTest.server.stop()


if __name__ == '__main__':
    sys.exit(main())
