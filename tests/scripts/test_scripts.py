#!/usr/bin/python3
"""Tests for deferq's Redis Lua scripts (src/persist/scripts/*.lua).

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

Needs redis-py (Debian's python3-redis), hence /usr/bin/python3.
"""

import argparse
import importlib.util
import os
import random
import signal
import struct
import sys
import time
import unittest

import redis

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))

from dqtest import procs, runner  # noqa: E402

COMMON_BEGIN = '-- BEGIN common.lua'
COMMON_END = '-- END common.lua'

READY, LEASED, DEAD, DELAYED = 0, 1, 2, 3
STATE_NAMES = {READY: b'ready', LEASED: b'leased', DEAD: b'dead', DELAYED: b'delayed'}
F_T, F_E, F_B, F_D, F_R, F_O = 4, 8, 16, 32, 64, 128
DERIVABLE_BIT = 0x8000

REGISTRY, DUE = b'dq:queues', b'dq:due'
T = 1_700_000_000_000  # a whole second, so T + x lands at offset x of bucket T // 1000 (x < 1000)
SEC = T // 1000

SCRIPTS_DIR = None


# --------------------------------------------------------------------------------------------
# The storage format, mirrored from docs/storage.md.

def gen_key(ts_ms, rand=None):
    """A generated canonical key: big-endian u48 first-due ms .. 10 random bytes."""
    if rand is None:
        rand = os.urandom(10)
    return ts_ms.to_bytes(6, 'big') + rand


def custom_key(job_id):
    return b'#' + job_id


def is_generated(k):
    return len(k) == 16 and k[0] != ord('#')


def key_ts(k):
    return int.from_bytes(k[:6], 'big')


def hint(k):
    """derivable_sec argument for ack/cancel/job."""
    return str(key_ts(k) // 1000) if is_generated(k) else ''


def record(created, ttl=86400, payload=b'', tries=None, every=0, backoff=0, at=None, ttr=None,
           state=0):
    flags, body = state, b''
    if tries is not None and tuple(tries) != (1, 0, 1):
        flags |= F_T
        body += struct.pack('<HHH', *tries)
    if every:
        flags |= F_E
        body += struct.pack('<I', every)
    if backoff:
        flags |= F_B
        body += struct.pack('<I', backoff)
    if at is not None:
        flags |= F_D
        body += at.to_bytes(6, 'little')
    if ttr is not None:
        flags |= F_R
        body += struct.pack('<I', ttr)
    return bytes([flags]) + created.to_bytes(6, 'little') + struct.pack('<I', ttl) + body + payload


def decode_record(b):
    flags = b[0]
    d = {'state': flags & 3, 'created': int.from_bytes(b[1:7], 'little'),
         'ttl': struct.unpack('<I', b[7:11])[0], 'tries': (1, 0, 1), 'every': 0, 'backoff': 0,
         'at': None, 'ttr': None, 'occ': None}
    pos = 11
    if flags & F_T:
        d['tries'] = struct.unpack('<HHH', b[pos:pos + 6])
        pos += 6
    if flags & F_E:
        d['every'] = struct.unpack('<I', b[pos:pos + 4])[0]
        pos += 4
    if flags & F_B:
        d['backoff'] = struct.unpack('<I', b[pos:pos + 4])[0]
        pos += 4
    if flags & F_D:
        d['at'] = int.from_bytes(b[pos:pos + 6], 'little')
        pos += 6
    if flags & F_R:
        d['ttr'] = struct.unpack('<I', b[pos:pos + 4])[0]
        pos += 4
    if flags & F_O:
        d['occ'] = int.from_bytes(b[pos:pos + 6], 'little')
        pos += 6
    d['payload'] = b[pos:]
    if d['every'] and d['occ'] is None:
        d['occ'] = d['at'] if d['at'] is not None else d['created']
    return d


def stored_state(k, d, staged):
    """The state of record d of K in P.."j": staged records (bits DELAYED) are delayed while K
    is in P.."w" and ready once the pump took K out of it."""
    if d['state'] == DELAYED:
        return DELAYED if k in staged else READY
    return d['state']


def staged_entry(k, due):
    """The P.."w" member of a staged job, which the pump moves to the ready list as it is."""
    return b'\xff' + due.to_bytes(6, 'big') + k


def staged_due(k, d):
    """A staged record's due time: its D block, or the timestamp of its generated K."""
    return d['at'] if d['at'] is not None else key_ts(k)


def bucket_field_to_key(sec, f):
    word = struct.unpack('>H', f[:2])[0]
    due = sec * 1000 + (word & 0x7FFF)
    if word & DERIVABLE_BIT:
        return due.to_bytes(6, 'big') + f[2:], due, True
    return f[2:], due, False


# --------------------------------------------------------------------------------------------
# A redis-server of our own (the shared harness: tests/lib/dqtest).

class RedisServer:
    """redis-server in its own directory, SIGTERMed if this process dies; .client talks to it."""

    def __init__(self, *extra, cluster=False):
        self.dir = procs.make_tmpdir('scripts')
        self.server = procs.Redis(self.dir, extra, cluster=cluster, pdeathsig=True).start()
        self.port = self.server.port
        self.client = self.server.client()

    def stop(self):
        self.server.stop(bound=10)
        procs.remove_tmpdir(self.dir)


def read_source(name):
    with open(os.path.join(SCRIPTS_DIR, name + '.lua')) as f:
        return f.read()


def read_script(name):
    """A script's source, as the library gets it (its common.lua placeholder is empty)."""
    return read_source(name)


def embedder():
    """src/persist/embed_scripts.py, which the build uses to make the library."""
    spec = importlib.util.spec_from_file_location(
        'embed_scripts', os.path.join(SCRIPTS_DIR, '..', 'embed_scripts.py'))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def script_list():
    """[(name, standalone)] from src/persist/scripts/list.txt, the one list of the scripts."""
    return embedder().script_list(os.path.join(SCRIPTS_DIR, 'list.txt'))


def all_scripts():
    return [name for name, _ in script_list()]


def queue_scripts():
    """The scripts that share common.lua (all but the standalone ones, such as own.lua)."""
    return [name for name, standalone in script_list() if not standalone]


# Every script a test called (Queue.call, OwnTest.own): the run fails when a listed script has
# no direct test (ScriptCoverageCheck, run last).
CALLED = set()


def load_scripts(client):
    """Loads the library as deferq does (FUNCTION LOAD REPLACE); returns name -> function."""
    version, body = embedder().library_of_dir(SCRIPTS_DIR)
    client.function_load(body, replace=True)
    return {name: 'dq_%s_%s' % (version, name) for name in all_scripts()}


# --------------------------------------------------------------------------------------------
# One queue, driven through the scripts with the argument shapes documented in their headers.

class Queue:
    def __init__(self, client, shas, ns='ns', name='q', checker=None, pool_keys=True):
        self.r = client
        self.shas = shas
        self.P = ('dq:{%s/%s}:' % (ns, name)).encode()
        self.tag = ('%s/%s' % (ns, name)).encode()
        self.checker = checker  # called after every script call
        # KEYS[2..3]: the pool's registry and due index, as deferq passes them (not on Cluster).
        self.keys = [self.P] + ([REGISTRY, DUE] if pool_keys else [])

    def call(self, script, *args):
        CALLED.add(script)
        try:
            return self.r.fcall(self.shas[script], len(self.keys), *self.keys, *args)
        finally:
            if self.checker:
                self.checker(self)

    # publish.lua
    def publish(self, now, k, rec, due=None, mode='', derivable=None):
        due = now if due is None else due
        if derivable is None:
            derivable = is_generated(k) and key_ts(k) == due
        return self.call('publish', now, k, rec, due, mode, '1' if derivable else '0')

    # consume.lua -> (ready_left, [job dicts])
    def consume(self, now, ttr=30000, count=1):
        reply = self.call('consume', now, ttr, count)
        return reply[0], jobs_of(reply[1:])

    def ack(self, now, *keys):
        args = []
        for k in keys:
            args += [k, hint(k)]
        return self.call('ack', now, *args)

    def cancel(self, now, *keys):
        args = []
        for k in keys:
            args += [k, hint(k)]
        return self.call('cancel', now, *args)

    def nack(self, now, k, delay=''):
        return self.call('nack', now, k, delay)

    def touch(self, now, k, ttr=''):
        return self.call('touch', now, k, ttr)

    def job(self, now, k, use_hint=True):
        reply = self.call('job', now, k, hint(k) if use_hint else '')
        if reply is None:
            return None
        names = ['state', 'payload', 'tries_left', 'attempt', 'created', 'due', 'ttl_left',
                 'every', 'backoff']
        return dict(zip(names, reply))

    def peek(self, now, count=1):
        return jobs_of(self.call('peek', now, count))

    def qstat(self):
        names = ['ready', 'delayed', 'leased', 'dead', 'published_total', 'consumed_total',
                 'acked_total', 'expired_total', 'dead_total', 'nacked_total',
                 'respawned_total', 'cancelled_total', 'paused']
        return dict(zip(names, self.call('qstat')))

    def purge(self):
        return self.call('purge')

    def pump(self, now, limit=1000):
        reply = self.call('pump', now, limit)
        return {'made': reply[0], 'more': reply[1], 'next_due': reply[2], 'lateness': reply[3:]}

    def dl_size(self, now):
        return self.call('deadletter', 'size', now, '', '')

    def dl_peek(self, now, count=1):
        return jobs_of(self.call('deadletter', 'peek', now, count, ''))

    def dl_respawn(self, now, count=1, ttl=86400):
        return self.call('deadletter', 'respawn', now, count, ttl)

    def dl_delete(self, now, count=1):
        return self.call('deadletter', 'delete', now, count, '')

    def dl_delete_id(self, now, k):
        return self.call('deadletter', 'delete_id', now, '', k)

    # Direct views of the keys.
    def key(self, suffix):
        return self.P + suffix

    def bucket(self, sec):
        return self.r.hgetall(self.P + b'd:%d' % sec)

    def stored(self, k):
        raw = self.r.hget(self.key(b'j'), k)
        return None if raw is None else decode_record(raw)

    def all_keys(self):
        return set(self.r.scan_iter(match=self.P + b'*'))


def jobs_of(flat):
    names = ['id', 'payload', 'tries_left', 'ttl_left', 'attempt', 'created']
    return [dict(zip(names, flat[i:i + 6])) for i in range(0, len(flat), 6)]


def check_invariants(tc, q):
    """Every storage invariant of docs/storage.md, checked against the actual keys."""
    r, P = q.r, q.P
    raw_s = r.hgetall(P + b's')
    s = {k.decode(): int(v) for k, v in raw_s.items()}
    # The delayed gauge is `delayed` + `pd` (delayed publishes, also in published_total).
    s['delayed'] = s.get('delayed', 0) + s.get('pd', 0)
    for name in ['ready', 'delayed', 'dead'] + [k for k in s if k.endswith('_total')]:
        tc.assertGreaterEqual(s.get(name, 0), 0, name)
    recs = {k: decode_record(v) for k, v in r.hgetall(P + b'j').items()}
    rlist = r.lrange(P + b'r', 0, -1)
    xlist = r.lrange(P + b'x', 0, -1)
    leases = dict(r.zrange(P + b'l', 0, -1, withscores=True))
    # A record in j with state bits DELAYED is staged: delayed while its member (mark, due, K)
    # is in P.."w", ready once the pump moved that member to the ready list (not the record).
    members = dict(r.zrange(P + b'w', 0, -1, withscores=True))
    staged = {}
    for m, due in members.items():
        tc.assertEqual(m[:1], b'\xff', 'P.."w" member without the mark')
        k, mdue = m[7:], int.from_bytes(m[1:7], 'big')
        tc.assertEqual(mdue, due, 'P.."w" score is not the due time of its member')
        tc.assertNotIn(k, staged, 'job staged twice')
        tc.assertIn(k, recs, 'P.."w" member without a record')
        tc.assertEqual(recs[k]['state'], DELAYED, 'P.."w" member whose record is not staged')
        tc.assertEqual(staged_due(k, recs[k]), due, 'P.."w" member of another due time')
        staged[k] = due
    by_state = {st: [k for k, d in recs.items() if stored_state(k, d, staged) == st]
                for st in range(4)}
    tc.assertEqual(len(by_state[READY]), s.get('ready', 0), 'ready gauge')
    tc.assertEqual(len(by_state[DEAD]), s.get('dead', 0), 'dead gauge')
    for k in by_state[READY]:
        entry = k if recs[k]['state'] == READY else staged_entry(k, staged_due(k, recs[k]))
        tc.assertIn(entry, rlist, 'ready job without a ready-list entry')
    for k in by_state[DEAD]:
        tc.assertIn(k, xlist, 'dead job without a dead-list entry')
    tc.assertEqual(set(by_state[LEASED]), set(leases), 'leased records vs lease zset')
    for k in by_state[LEASED]:
        tc.assertIsNotNone(recs[k]['ttr'], 'leased record without ttr')
    if s.get('ready', 0) == 0:
        tc.assertEqual(rlist, [], 'ready list kept although nothing is ready')
    if s.get('dead', 0) == 0:
        tc.assertEqual(xlist, [], 'dead list kept although nothing is dead')

    # P.."b" lists the buckets not yet staged; the pump has moved every bucket up to stage_sec
    # into P.."j", except stage_sec itself while it is still scanning it (stage_cursor != 0).
    secs = {int(m) for m in r.zrange(P + b'b', 0, -1)}
    stage_sec = int(raw_s.get(b'stage_sec', -1))
    if raw_s.get(b'stage_cursor', b'0') != b'0':
        stage_sec -= 1
        if r.exists(P + b'd:%d' % (stage_sec + 1)):
            tc.assertNotIn(stage_sec + 1, secs, 'the bucket being staged is still in P.."b"')
            secs.add(stage_sec + 1)
    for sec in secs:
        tc.assertGreater(sec, stage_sec, 'a staged second in P.."b"')
    bucket_keys = set(r.scan_iter(match=P + b'd:*'))
    tc.assertEqual(bucket_keys, {P + b'd:%d' % sec for sec in secs}, 'P.."b" vs bucket keys')
    index = r.hgetall(P + b'i')
    delayed = []
    for sec in secs:
        h = r.hgetall(P + b'd:%d' % sec)
        tc.assertTrue(h, 'empty bucket listed')
        for f, v in h.items():
            k, due, derivable = bucket_field_to_key(sec, f)
            if derivable:
                tc.assertEqual(len(f), 12)
                tc.assertNotIn(k, index, 'derivable job with an index entry')
            else:
                tc.assertEqual(index.get(k), b'%d:%d' % (sec, due % 1000), 'index entry')
            tc.assertEqual(v[0] & 3, DELAYED, 'bucket record not in state delayed')
            tc.assertNotIn(k, recs, 'job both delayed and in j')
            tc.assertGreater(sec, stage_sec, 'a staged second still has a bucket')
            delayed.append(k)
    tc.assertEqual(len(delayed), len(set(delayed)), 'job in two buckets')
    tc.assertEqual(len(delayed) + len(by_state[DELAYED]), s.get('delayed', 0), 'delayed gauge')
    tc.assertTrue(set(index) <= set(delayed), 'index entry without a bucket field')

    # The pool's registry holds the queue exactly while it holds a job; its due index entry is
    # at or before the queue's earliest pump work (a bucket's second, a staged field, a lease).
    if len(q.keys) == 3:
        jobs = len(recs) + len(delayed)
        tc.assertEqual(r.sismember(REGISTRY, q.tag), jobs > 0, 'registry vs jobs held')
        # Unstaged buckets (their second), staged fields (their due ms), leases (deadline).
        work = ([sec * 1000 for sec in secs if sec > stage_sec] + list(staged.values()) +
                list(leases.values()))
        due = r.zscore(DUE, q.tag)
        if work:
            tc.assertIsNotNone(due, 'pump work without a due index entry')
            tc.assertLessEqual(due, min(work), 'due index entry later than the work')
        if jobs == 0:
            tc.assertIsNone(due, 'empty queue left in the due index')


# --------------------------------------------------------------------------------------------

class ScriptTest(unittest.TestCase):
    server = None
    shas = None
    check_every_call = True

    @classmethod
    def setUpClass(cls):
        if ScriptTest.server is None:
            ScriptTest.server = RedisServer()
            ScriptTest.shas = load_scripts(ScriptTest.server.client)

    def setUp(self):
        self.r = ScriptTest.server.client
        self.r.flushall()
        checker = (lambda q: check_invariants(self, q)) if self.check_every_call else None
        self.q = Queue(self.r, ScriptTest.shas, checker=checker)

    def tearDown(self):
        check_invariants(self, self.q)

    # helpers
    def pub_ready(self, now=T, payload=b'p', **kw):
        k = gen_key(now)
        self.assertEqual(self.q.publish(now, k, record(now, payload=payload, **kw)), [1])
        return k

    def pub_delayed(self, now, due, payload=b'p', **kw):
        k = gen_key(due)
        self.assertEqual(self.q.publish(now, k, record(now, payload=payload, **kw), due), [1])
        return k

    def stat(self, **expected):
        st = self.q.qstat()
        self.assertEqual({k: st[k] for k in expected}, expected)
        return st

    def lease_one(self, now, k, ttr=30000):
        left, jobs = self.q.consume(now, ttr)
        self.assertEqual([j['id'] for j in jobs], [k])
        return jobs[0]


class PublishTest(ScriptTest):
    def test_publish_without_delay_is_ready_at_once(self):
        k = gen_key(T)
        self.assertEqual(self.q.publish(T, k, record(T, ttl=60, payload=b'hello')), [1])
        self.assertEqual(self.q.r.lrange(self.q.key(b'r'), 0, -1), [k])
        self.assertEqual(self.q.stored(k)['state'], READY)
        self.stat(ready=1, delayed=0, leased=0, dead=0, published_total=1)
        self.assertEqual(self.q.job(T + 5, k), {
            'state': b'ready', 'payload': b'hello', 'tries_left': 1, 'attempt': 0, 'created': T,
            'due': T, 'ttl_left': 60, 'every': 0, 'backoff': 0})

    def test_due_in_the_past_is_ready_at_once(self):
        k = gen_key(T - 5000)
        self.q.publish(T, k, record(T), due=T - 5000)
        self.stat(ready=1, delayed=0)

    def test_delayed_generated_job_uses_derivable_12_byte_field_and_no_index(self):
        due = T + 5500
        k = gen_key(due)
        rec = record(T, payload=bytes(64))
        self.assertEqual(len(rec), 75)
        self.assertEqual(self.q.publish(T, k, rec, due), [1])
        bucket = self.q.bucket(SEC + 5)
        field = struct.pack('>H', 500 | DERIVABLE_BIT) + k[6:]
        self.assertEqual(list(bucket), [field])
        self.assertEqual(len(field), 12)
        self.assertEqual(bucket[field], bytes([DELAYED]) + rec[1:])  # 75 bytes, state bits only
        self.assertEqual(self.q.r.hlen(self.q.key(b'i')), 0)
        self.assertEqual(self.q.r.zrange(self.q.key(b'b'), 0, -1, withscores=True),
                         [(b'%d' % (SEC + 5), float(SEC + 5))])
        self.stat(ready=0, delayed=1, published_total=1)
        j = self.q.job(T, k)
        self.assertEqual((j['state'], j['due'], j['ttl_left']), (b'delayed', due, 86400))

    def test_delayed_custom_id_has_index_entry_and_full_field(self):
        k = custom_key(b'order-123')
        self.q.publish(T, k, record(T, payload=b'x'), T + 2500)
        self.assertEqual(self.q.bucket(SEC + 2), {struct.pack('>H', 500) + k: bytes([DELAYED]) +
                                                  record(T, payload=b'x')[1:]})
        self.assertEqual(self.q.r.hget(self.q.key(b'i'), k), b'%d:500' % (SEC + 2))
        self.assertEqual(self.q.job(T, k)['due'], T + 2500)

    def test_caller_may_store_a_generated_key_non_derivably(self):
        k = gen_key(T + 100)
        self.q.publish(T, k, record(T), T + 100, derivable=False)
        self.assertEqual(self.q.r.hget(self.q.key(b'i'), k), b'%d:100' % SEC)
        self.assertEqual(self.q.job(T, k, use_hint=False)['state'], b'delayed')
        self.assertEqual(self.q.ack(T, k), 1)

    def test_retried_plain_publish_stores_the_job_once(self):
        ready = gen_key(T)
        delayed = gen_key(T + 4000)
        for _ in range(2):
            self.q.publish(T, ready, record(T))
            self.q.publish(T, delayed, record(T), T + 4000)
        self.assertEqual(self.q.publish(T, ready, record(T)), [0])
        self.stat(ready=1, delayed=1, published_total=2)
        self.assertEqual(self.q.r.llen(self.q.key(b'r')), 1)

    def test_claimed_derivable_key_that_is_not_is_an_error_and_writes_nothing(self):
        k = gen_key(T + 1)
        with self.assertRaisesRegex(redis.ResponseError, 'not derivable'):
            self.q.publish(T, k, record(T), T + 2, derivable=True)
        self.assertEqual(self.q.all_keys(), set())

    def test_bad_arguments_are_errors_and_write_nothing(self):
        k = gen_key(T)
        for args in [('x', k, record(T), T, '', '0'), (T, k, b'short', T, '', '0'),
                     (T, k, record(T), -1, '', '0'), (T, k, record(T), T, 'bogus', '0')]:
            with self.assertRaises(redis.ResponseError):
                self.q.call('publish', *args)
        for script, args in [('consume', (T, 'x', 1)), ('consume', (T, 1000, 0)),
                             ('ack', (T, k)), ('nack', (T, k, 'soon')), ('pump', (T, 0)),
                             ('peek', (T, 0)), ('deadletter', ('respawn', T, 1, 'x')),
                             ('deadletter', ('bogus', T, 1, ''))]:
            with self.assertRaises(redis.ResponseError, msg=script):
                self.q.call(script, *args)
        self.assertEqual(self.q.all_keys(), set())

    def test_id_mode_returns_existing_job_unchanged_in_every_state(self):
        k = custom_key(b'order-1')
        again = lambda now: self.q.publish(now, k, record(now, payload=b'new'), now, mode='id')
        # delayed
        self.assertEqual(self.q.publish(T, k, record(T, payload=b'old'), T + 1000, 'id'), [1])
        self.assertEqual(again(T + 1), [0])
        self.assertEqual(self.q.job(T + 1, k)['state'], b'delayed')
        # ready
        self.q.pump(T + 1000)
        self.assertEqual(again(T + 1001), [0])
        self.assertEqual(self.q.job(T + 1001, k)['state'], b'ready')
        # leased
        self.lease_one(T + 1002, k)
        self.assertEqual(again(T + 1003), [0])
        # dead (one try)
        self.assertEqual(self.q.nack(T + 1004, k), 1)
        self.assertEqual(again(T + 1005), [0])
        j = self.q.job(T + 1005, k)
        self.assertEqual((j['state'], j['payload']), (b'dead', b'old'))
        self.stat(ready=0, delayed=0, leased=0, dead=1, published_total=1)

    def test_id_mode_replaces_an_expired_one_off_job(self):
        k = custom_key(b'o')
        self.q.publish(T, k, record(T, ttl=1, payload=b'old'), T, 'id')
        self.assertEqual(self.q.publish(T + 1000, k, record(T + 1000, payload=b'n'), T + 1000,
                                        'id'), [0])  # expires only strictly after created+ttl
        self.assertEqual(self.q.publish(T + 1001, k, record(T + 1001, payload=b'new'), T + 1001,
                                        'id'), [1])
        self.assertEqual(self.q.job(T + 1001, k)['payload'], b'new')
        self.stat(ready=1, expired_total=1, published_total=2)

    def test_replace_in_every_state(self):
        k = custom_key(b'r')
        self.q.publish(T, k, record(T, payload=b'v1'), T + 3000, 'replace')
        # delayed -> ready
        self.assertEqual(self.q.publish(T, k, record(T, payload=b'v2'), T, 'replace'), [2])
        self.assertEqual(self.q.bucket(SEC + 3), {})
        self.assertEqual(self.q.r.hlen(self.q.key(b'i')), 0)
        self.stat(ready=1, delayed=0)
        # ready -> delayed
        self.assertEqual(self.q.publish(T, k, record(T, payload=b'v3'), T + 4000, 'replace'), [2])
        self.stat(ready=0, delayed=1)
        self.assertEqual(self.q.consume(T + 1)[1], [])
        # leased -> ready: the lease is dropped
        self.q.pump(T + 4000)
        self.lease_one(T + 4000, k)
        self.assertEqual(self.q.publish(T + 4001, k, record(T + 4001, payload=b'v4'), T + 4001,
                                        'replace'), [2])
        self.stat(ready=1, leased=0)
        self.assertEqual(self.q.r.zcard(self.q.key(b'l')), 0)
        # dead -> delayed
        self.lease_one(T + 4002, k)
        self.q.nack(T + 4003, k)
        self.stat(dead=1)
        self.assertEqual(self.q.publish(T + 4004, k, record(T + 4004, payload=b'v5'), T + 9000,
                                        'replace'), [2])
        self.stat(ready=0, delayed=1, leased=0, dead=0, published_total=5)
        self.assertEqual(self.q.dl_peek(T + 4004), [])
        j = self.q.job(T + 4004, k)
        self.assertEqual((j['state'], j['payload'], j['due']), (b'delayed', b'v5', T + 9000))

    def test_replace_finds_a_generated_key_in_its_derivable_bucket(self):
        k = self.pub_delayed(T, T + 5000, payload=b'v1')
        self.assertEqual(self.q.publish(T, k, record(T, payload=b'v1b'), T + 5000, 'id'), [0])
        self.assertEqual(self.q.publish(T, k, record(T, payload=b'v2'), T + 8000, 'replace'),
                         [2])
        self.assertEqual(self.q.bucket(SEC + 5), {})
        j = self.q.job(T, k)
        self.assertEqual((j['payload'], j['due']), (b'v2', T + 8000))
        self.assertEqual(self.q.r.hget(self.q.key(b'i'), k), b'%d:0' % (SEC + 8))
        self.stat(delayed=1, published_total=2)

    def test_ack_after_replace_of_a_leased_job_completes_the_new_job(self):
        k = custom_key(b'r')
        self.q.publish(T, k, record(T, payload=b'v1'), T, 'replace')
        self.lease_one(T, k)
        self.q.publish(T + 1, k, record(T + 1, payload=b'v2'), T + 1, 'replace')
        self.assertEqual(self.q.ack(T + 2, k), 1)
        self.stat(ready=0, leased=0, acked_total=1)
        self.assertEqual(self.q.consume(T + 3)[1], [])

    def test_replaced_ready_job_is_delivered_once(self):
        # Lazy lists: a replaced ready job keeps its old entry. In the middle of the list that
        # entry is live again (the job keeps its place); at the head it is trimmed at once (the job
        # goes to the tail). Either way it is delivered exactly once.
        a, b, c = custom_key(b'a'), custom_key(b'b'), custom_key(b'c')
        for k in (a, b, c):
            self.q.publish(T, k, record(T, payload=k + b'1'), T, 'replace')
        self.q.publish(T, b, record(T, payload=b'#b2'), T, 'replace')
        self.assertEqual([(j['id'], j['payload']) for j in self.q.peek(T, 10)],
                         [(a, b'#a1'), (b, b'#b2'), (c, b'#c1')])
        self.q.publish(T, a, record(T, payload=b'#a2'), T, 'replace')
        self.assertEqual([j['id'] for j in self.q.peek(T, 10)], [b, c, a])
        left, jobs = self.q.consume(T, count=10)
        self.assertEqual(([(j['id'], j['payload']) for j in jobs], left),
                         ([(b, b'#b2'), (c, b'#c1'), (a, b'#a2')], 0))
        self.stat(ready=0, leased=3, published_total=5)

    def test_caller_supplied_at_ms_is_dropped_from_a_delayed_record(self):
        k = custom_key(b'with-at')
        self.q.publish(T, k, record(T, payload=b'x', at=T + 2500), T + 2500, 'id')
        (raw,) = self.q.bucket(SEC + 2).values()
        self.assertEqual(raw, bytes([DELAYED]) + record(T, payload=b'x')[1:])
        self.assertEqual(self.q.job(T, k)['due'], T + 2500)

    def test_recurring_publish_records_its_first_occurrence(self):
        k = gen_key(T + 10000)
        self.q.publish(T, k, record(T, every=60), T + 10000)
        j = self.q.job(T, k)
        self.assertEqual((j['state'], j['due'], j['every']), (b'delayed', T + 10000, 60))


class ConsumeTest(ScriptTest):
    def test_consume_leases_decrements_tries_and_arms_the_ttr(self):
        k = self.pub_ready(tries=(3, 0, 3), ttl=100)
        self.assertEqual(self.q.peek(T)[0]['tries_left'], 3)
        left, jobs = self.q.consume(T + 10, ttr=5000)
        self.assertEqual((left, jobs), (0, [{'id': k, 'payload': b'p', 'tries_left': 2,
                                              'ttl_left': 100, 'attempt': 1, 'created': T}]))
        self.assertEqual(self.q.r.zscore(self.q.key(b'l'), k), T + 10 + 5000)
        d = self.q.stored(k)
        self.assertEqual((d['state'], d['tries'], d['ttr']), (LEASED, (2, 1, 3), 5000))
        j = self.q.job(T + 20, k)
        self.assertEqual((j['state'], j['due'], j['tries_left'], j['attempt']),
                         (b'leased', T + 5010, 2, 1))
        self.stat(ready=0, leased=1, consumed_total=1)

    def test_consume_writes_the_bytes_the_record_codec_would_write(self):
        # consume leases one-off records in place; the result must be the canonical record.
        cases = [dict(), dict(tries=(3, 1, 3)), dict(backoff=5), dict(ttl=0),
                 dict(tries=(2, 0, 2), backoff=9, payload=b'\x00\xff' * 40)]
        expected = []
        for i, kw in enumerate(cases):
            kw = dict(kw)
            payload = kw.pop('payload', b'job %d' % i)
            k = self.pub_ready(T, payload=payload, **kw)
            tl, att, tt = kw.pop('tries', (1, 0, 1))
            expected.append((k, record(T, payload=payload, tries=(max(tl - 1, 0), att + 1, tt),
                                       ttr=30000, state=LEASED, **kw)))
        # One more made ready by the pump (which leaves the record as published: no at_ms).
        k = self.pub_delayed(T, T + 5, payload=b'pumped', tries=(2, 0, 2))
        self.q.pump(T + 5)
        expected.append((k, record(T, payload=b'pumped', tries=(1, 1, 2), ttr=30000,
                                   state=LEASED)))
        left, jobs = self.q.consume(T + 10, count=10)
        self.assertEqual([j['id'] for j in jobs], [k for k, _ in expected])
        for k, rec in expected:
            self.assertEqual(self.r.hget(self.q.key(b'j'), k), rec)
        self.assertEqual([j['ttl_left'] for j in jobs], [86400, 86400, 86400, -1, 86400, 86400])

    def test_consume_is_fifo_and_count_limited(self):
        keys = [self.pub_ready(payload=b'%d' % i) for i in range(5)]
        left, jobs = self.q.consume(T, count=3)
        self.assertEqual(([j['id'] for j in jobs], left), (keys[:3], 2))
        left, jobs = self.q.consume(T, count=3)
        self.assertEqual(([j['id'] for j in jobs], left), (keys[3:], 0))
        self.assertEqual(self.q.consume(T, count=3), (0, []))
        self.assertFalse(self.q.r.exists(self.q.key(b'r')))

    def test_never_expiring_job_reports_ttl_minus_one(self):
        self.pub_ready(ttl=0)
        self.assertEqual(self.q.consume(T + 10 ** 9)[1][0]['ttl_left'], -1)

    def test_consume_skips_stale_entries_of_acked_and_cancelled_ready_jobs(self):
        k1, k2, k3 = (self.pub_ready() for _ in range(3))
        self.assertEqual(self.q.ack(T, k2), 1)
        self.assertEqual(self.q.cancel(T, k3), 1)
        self.assertEqual(self.q.r.llen(self.q.key(b'r')), 3)  # deletion is lazy
        left, jobs = self.q.consume(T, count=3)
        self.assertEqual(([j['id'] for j in jobs], left), ([k1], 0))
        self.stat(ready=0, leased=1, acked_total=1, cancelled_total=1)

    def test_removing_jobs_in_fifo_order_leaves_no_stale_entries(self):
        keys = [self.pub_ready() for _ in range(6)]
        for k in keys[:5]:
            self.q.cancel(T, k)
        self.assertEqual(self.q.r.lrange(self.q.key(b'r'), 0, -1), keys[5:])

    def test_pop_bound_returns_no_job_with_ready_left_then_a_retry_delivers(self):
        self.q.checker = None
        pipe = self.r.pipeline(transaction=False)
        keys = [gen_key(T) for _ in range(2400)]
        for k in keys:
            pipe.fcall(self.shas['publish'], 3, *self.q.keys, T, k, record(T), T, '', '0')
        pipe.execute()
        for k in reversed(keys[:1100]):  # newest first: the stale entries pile up at the head
            self.q.cancel(T, k)
        # 1300 live jobs keep the list under its compaction bound (2 * 1300 + 64).
        stale = self.r.llen(self.q.key(b'r')) - 1300
        self.assertGreater(stale, 1001)
        self.assertEqual(self.q.consume(T), (1300, []))
        left, jobs = self.q.consume(T)  # deferq calls again while ready_left > 0
        self.assertEqual(([j['id'] for j in jobs], left), ([keys[1100]], 1299))
        check_invariants(self, self.q)

    def test_job_past_its_ttl_is_never_delivered_and_is_removed(self):
        k = self.pub_ready(ttl=10)
        self.assertEqual(self.q.peek(T + 10001), [])
        self.assertEqual(self.q.consume(T + 10001), (0, []))
        self.assertIsNone(self.q.job(T + 10001, k))
        self.stat(ready=0, expired_total=1, consumed_total=0)

    def test_job_at_exactly_its_ttl_is_still_delivered(self):
        k = self.pub_ready(ttl=10)
        self.assertEqual(self.q.consume(T + 10000)[1][0]['ttl_left'], 0)

    def test_binary_payload_with_every_byte_value_and_crlf(self):
        payload = bytes(range(256)) + b'\r\n$5\r\n*1\r\n\x00\r\n'
        k1 = self.pub_ready(payload=payload)
        k2 = self.pub_delayed(T, T + 500, payload=payload)
        k3 = custom_key(b'bin')
        self.q.publish(T, k3, record(T, payload=payload, tries=(1, 0, 1)), T + 700, 'id')
        for k in (k1, k2, k3):
            self.assertEqual(self.q.job(T, k)['payload'], payload)
        self.assertEqual(self.q.peek(T)[0]['payload'], payload)
        self.q.pump(T + 700)
        left, jobs = self.q.consume(T + 700, count=3)
        self.assertEqual([(j['id'], j['payload']) for j in jobs],
                         [(k1, payload), (k2, payload), (k3, payload)])
        for k in (k1, k2, k3):
            self.q.nack(T + 701, k)
        self.assertEqual([j['payload'] for j in self.q.dl_peek(T + 701, 3)], [payload] * 3)


class AckCancelTest(ScriptTest):
    def _jobs_in_all_states(self):
        delayed = self.pub_delayed(T, T + 7000)
        delayed_custom = custom_key(b'c1')
        self.q.publish(T, delayed_custom, record(T), T + 8000, 'id')
        ready = self.pub_ready()
        leased = self.pub_ready()
        dead = self.pub_ready()
        self.q.consume(T, count=3)
        self.q.ack(T, ready)  # leased one of them: re-create a ready job below
        ready = self.pub_ready()
        self.q.nack(T, dead)
        self.stat(ready=1, delayed=2, leased=1, dead=1)
        return [delayed, delayed_custom, ready, leased, dead]

    def test_ack_finishes_one_off_jobs_in_every_state(self):
        keys = self._jobs_in_all_states()
        self.assertEqual(self.q.ack(T + 1, *keys, custom_key(b'unknown'), gen_key(T)), 5)
        self.stat(ready=0, delayed=0, leased=0, dead=0, acked_total=6)
        self.assertEqual(self.q.ack(T + 2, *keys), 0)
        self.assertFalse(self.q.r.exists(self.q.key(b'r'), self.q.key(b'x'), self.q.key(b'j'),
                                         self.q.key(b'i'), self.q.key(b'b')))

    def test_an_id_given_twice_counts_once(self):
        rec = self.pub_ready(every=60, at=T)
        self.lease_one(T, rec)
        one = self.pub_ready()
        self.assertEqual(self.q.ack(T + 1, rec, rec, one, one), 2)
        self.assertEqual(self.q.job(T + 1, rec)['due'], T + 60000)
        self.assertEqual(self.q.cancel(T + 2, rec, rec), 1)
        self.stat(ready=0, delayed=0, acked_total=2, cancelled_total=1)

    def test_cancel_removes_jobs_in_every_state(self):
        keys = self._jobs_in_all_states()
        for k in keys:
            self.assertEqual(self.q.cancel(T + 1, k), 1)
        self.assertEqual(self.q.cancel(T + 1, *keys), 0)
        self.stat(ready=0, delayed=0, leased=0, dead=0, cancelled_total=5)

    def test_generated_delayed_job_is_found_only_with_its_derivable_second(self):
        k = self.pub_delayed(T, T + 3000)
        self.assertEqual(self.q.call('ack', T, k, ''), 0)
        self.assertIsNone(self.q.job(T, k, use_hint=False))
        self.assertEqual(self.q.ack(T, k), 1)

    def test_derivable_second_that_does_not_match_k_is_an_error(self):
        k = self.pub_delayed(T, T + 3000)
        with self.assertRaisesRegex(redis.ResponseError, 'does not match'):
            self.q.call('ack', T, k, str(SEC))
        with self.assertRaisesRegex(redis.ResponseError, 'does not match'):
            self.q.call('cancel', T, custom_key(b'x'), str(SEC))
        self.stat(delayed=1)

    def test_cancel_removes_ids_of_dead_jobs_from_the_dead_letter(self):
        keys = [self.pub_ready() for _ in range(3)]
        self.q.consume(T, count=3)
        for k in keys:
            self.q.nack(T, k)
        self.q.cancel(T, keys[1])
        self.assertEqual([j['id'] for j in self.q.dl_peek(T, 5)], [keys[0], keys[2]])
        self.q.cancel(T, keys[0])
        self.assertEqual(self.q.r.lrange(self.q.key(b'x'), 0, -1), [keys[2]])


class NackTouchTest(ScriptTest):
    def test_nack_with_tries_left_makes_the_job_ready_again(self):
        k = self.pub_ready(tries=(2, 0, 2))
        self.lease_one(T, k)
        self.assertEqual(self.q.nack(T + 5, k), 1)
        self.stat(ready=1, leased=0, nacked_total=1)
        d = self.q.stored(k)
        self.assertEqual((d['state'], d['tries'], d['at'], d['ttr']), (READY, (1, 1, 2), T + 5, None))
        self.assertEqual(self.q.job(T + 6, k)['due'], T + 5)
        job = self.lease_one(T + 6, k)
        self.assertEqual((job['tries_left'], job['attempt']), (0, 2))

    def test_nack_without_tries_left_kills_the_job(self):
        k = self.pub_ready()
        self.lease_one(T, k)
        self.assertEqual(self.q.nack(T + 5, k), 1)
        self.stat(ready=0, leased=0, dead=1, dead_total=1, nacked_total=1)
        j = self.q.job(T + 6, k)
        self.assertEqual((j['state'], j['due']), (b'dead', T + 5))

    def test_nack_delay_delays_the_job_to_the_ms(self):
        k = self.pub_ready(tries=(3, 0, 3))
        self.lease_one(T, k)
        self.assertEqual(self.q.nack(T + 200, k, 1500), 1)
        self.assertEqual(self.q.r.hget(self.q.key(b'i'), k), b'%d:700' % (SEC + 1))
        j = self.q.job(T + 200, k)
        self.assertEqual((j['state'], j['due']), (b'delayed', T + 1700))
        self.assertEqual(self.q.pump(T + 1699)['made'], 0)
        self.assertEqual(self.q.pump(T + 1700)['made'], 1)
        self.assertEqual(self.q.stored(k)['tries'], (2, 1, 3))

    def test_nack_delay_zero_overrides_backoff(self):
        k = self.pub_ready(tries=(3, 0, 3), backoff=10)
        self.lease_one(T, k)
        self.q.nack(T + 1, k, 0)
        self.stat(ready=1, delayed=0)

    def test_nack_of_a_job_that_is_not_leased_is_0(self):
        ready = self.pub_ready()
        delayed = self.pub_delayed(T, T + 5000)
        for k in (ready, delayed, gen_key(T), custom_key(b'x')):
            self.assertEqual(self.q.nack(T, k), 0)
        self.stat(ready=1, delayed=1, nacked_total=0)

    def test_nack_of_a_leased_job_past_its_ttl_removes_it(self):
        k = self.pub_ready(ttl=1, tries=(3, 0, 3))
        self.lease_one(T, k)
        self.assertEqual(self.q.nack(T + 1001, k), 1)
        self.stat(ready=0, leased=0, expired_total=1)

    def test_touch_extends_the_lease_with_the_leased_ttr_or_a_new_one(self):
        k = self.pub_ready()
        self.lease_one(T, k, ttr=1000)
        self.assertEqual(self.q.touch(T + 800, k), 1)
        self.assertEqual(self.q.r.zscore(self.q.key(b'l'), k), T + 1800)
        self.assertEqual(self.q.pump(T + 1000)['made'], 0)
        self.assertEqual(self.q.touch(T + 900, k, 5000), 1)
        self.assertEqual(self.q.r.zscore(self.q.key(b'l'), k), T + 5900)
        self.assertEqual(self.q.stored(k)['ttr'], 5000)
        self.assertEqual(self.q.touch(T + 1000, k), 1)
        self.assertEqual(self.q.r.zscore(self.q.key(b'l'), k), T + 6000)

    def test_nack_undo_gives_an_undelivered_lease_back_uncounted_at_the_head(self):
        k1 = self.pub_ready(T, tries=(2, 0, 2))
        k2 = self.pub_ready(T)
        self.lease_one(T + 1, k1)
        self.stat(consumed_total=1)
        self.assertEqual(self.q.call('nack', T + 2, k1, '', 'undo'), 1)
        # Not a delivery: tries, attempt and consumed_total are as before the consume, no nack.
        self.stat(ready=2, leased=0, consumed_total=0, nacked_total=0)
        left, jobs = self.q.consume(T + 3, count=2)
        self.assertEqual([(j['id'], j['tries_left'], j['attempt']) for j in jobs],
                         [(k1, 1, 1), (k2, 0, 1)])
        self.stat(consumed_total=2)

    def test_touch_of_a_job_that_is_not_leased_is_0(self):
        k = self.pub_ready()
        self.assertEqual(self.q.touch(T, k), 0)
        self.assertEqual(self.q.touch(T, custom_key(b'nope'), 100), 0)
        self.stat(ready=1, leased=0)


class PumpTest(ScriptTest):
    def test_a_stale_entry_never_delivers_a_job_replaced_into_a_staged_second_early(self):
        # A ready job leaves a lazy entry K in the ready list when it is REPLACEd; replaced into
        # a second the pump has staged, its record sits in P.."j" with state bits DELAYED. That
        # entry must not deliver it before it is due; the pump's own entry does, once.
        first = self.pub_ready(T)  # keeps the ready list (and k's stale entry) alive
        k = custom_key(b'again')
        self.assertEqual(self.q.publish(T, k, record(T, payload=b'old'), T, 'id'), [1])
        self.pub_delayed(T, T + 900)  # a bucket for second SEC, which the pump stages
        self.q.pump(T + 1)
        self.assertEqual(self.q.publish(T + 2, k, record(T + 2, payload=b'new'), T + 800,
                                        'replace'), [2])
        self.assertEqual(self.q.r.lrange(self.q.key(b'r'), 0, -1), [first, k])  # k: stale
        self.assertEqual(self.q.stored(k)['state'], DELAYED)
        left, jobs = self.q.consume(T + 700, count=5)
        self.assertEqual(([j['id'] for j in jobs], left), ([first], 0))
        self.stat(ready=0, delayed=2, leased=1)
        self.assertEqual(self.q.job(T + 700, k)['state'], b'delayed')
        self.assertEqual(self.q.pump(T + 800)['made'], 1)
        left, jobs = self.q.consume(T + 800, count=5)
        self.assertEqual([(j['id'], j['payload']) for j in jobs], [(k, b'new')])
        self.stat(ready=0, delayed=1, leased=2)

    def test_job_due_at_now_moves_and_one_due_at_now_plus_1_does_not(self):
        a = self.pub_delayed(T, T + 1500)
        b = self.pub_delayed(T, T + 1501)
        p = self.q.pump(T + 1500)
        self.assertEqual(p, {'made': 1, 'more': 0, 'next_due': T + 1501, 'lateness': [0]})
        self.assertEqual(self.q.peek(T + 1500, 5)[0]['id'], a)
        self.assertEqual(self.q.job(T + 1500, b)['state'], b'delayed')
        self.assertEqual(self.q.pump(T + 1501)['made'], 1)
        self.stat(ready=2, delayed=0)
        # Nothing delayed or leased; the ready list's head expires after its ttl (created T).
        self.assertEqual(self.q.pump(T + 1502)['next_due'], T + 86400 * 1000 + 1)

    def test_second_boundaries(self):
        a = self.pub_delayed(T, T + 999)
        b = self.pub_delayed(T, T + 1000)
        self.assertEqual(self.q.pump(T + 998)['next_due'], T + 999)
        self.assertEqual(self.q.pump(T + 999)['made'], 1)
        p = self.q.pump(T + 999)
        self.assertEqual((p['made'], p['next_due']), (0, T + 1000))
        self.assertEqual(self.q.pump(T + 1000)['made'], 1)
        self.assertEqual([j['id'] for j in self.q.peek(T + 1000, 5)], [a, b])

    def test_next_due_before_a_bucket_is_staged_is_the_start_of_its_second(self):
        self.pub_delayed(T, T + 3456)
        self.assertEqual(self.q.pump(T)['next_due'], T + 3000)
        self.assertEqual(self.q.pump(T + 3000)['next_due'], T + 3456)

    def test_jobs_added_to_a_staged_second_move_on_time(self):
        late = self.pub_delayed(T, T + 900)
        self.assertEqual(self.q.pump(T + 100)['next_due'], T + 900)  # stages second SEC
        self.assertEqual(self.q.r.hget(self.q.key(b's'), b'stage_sec'), b'%d' % SEC)
        early = custom_key(b'early')
        self.q.publish(T + 200, early, record(T + 200), T + 500, 'id')
        gen = self.pub_delayed(T + 200, T + 600)
        self.assertEqual(self.q.pump(T + 499), {'made': 0, 'more': 0, 'next_due': T + 500,
                                                'lateness': []})
        self.assertEqual(self.q.pump(T + 600)['made'], 2)
        self.assertEqual(self.q.pump(T + 900)['made'], 1)
        self.assertEqual([j['id'] for j in self.q.peek(T + 900, 5)], [early, gen, late])

    def test_cancelled_staged_job_leaves_no_index_entry(self):
        keep = self.pub_delayed(T, T + 5000)
        k = self.pub_delayed(T, T + 900)
        self.q.pump(T + 1)
        self.assertEqual(self.q.r.zcard(self.q.key(b'w')), 1)
        self.q.cancel(T + 2, k)
        self.assertEqual(self.q.r.zcard(self.q.key(b'w')), 0)
        self.assertEqual(self.q.pump(T + 900), {'made': 0, 'more': 0, 'next_due': T + 5000,
                                                'lateness': []})
        self.assertEqual(self.q.r.zcard(self.q.key(b'w')), 0)
        self.assertEqual(self.q.cancel(T + 3, keep), 1)

    def test_cancelling_the_last_job_of_a_queue_drops_its_staged_entries(self):
        k = self.pub_delayed(T, T + 900)
        self.q.pump(T + 1)
        self.assertEqual(self.q.r.zcard(self.q.key(b'w')), 1)
        self.q.cancel(T + 2, k)
        self.assertEqual(self.q.r.zcard(self.q.key(b'w')), 0)
        self.assertEqual(self.q.pump(T + 900), {'made': 0, 'more': 0, 'next_due': -1,
                                                'lateness': []})
        self.assertEqual(self.q.r.zcard(self.q.key(b'w')), 0)

    def test_pump_leaves_records_as_published_and_consume_leases_them_canonically(self):
        # The pump moves keys, not records: a pumped record keeps the bytes it was published
        # with (state bits DELAYED, no at_ms); consume leases it in place, and the result must be
        # the canonical leased record.
        cases = [dict(), dict(tries=(3, 1, 3)), dict(backoff=5), dict(tries=(2, 0, 2), backoff=9),
                 dict(ttl=0), dict(payload=b'\x00\xff' * 40)]
        keys = []
        for i, kw in enumerate(cases):
            kw = dict(kw)
            payload = kw.pop('payload', b'job %d' % i)
            keys.append((self.pub_delayed(T, T + 100 + i, payload=payload, **kw), kw, payload))
        self.assertEqual(self.q.pump(T + 200)['made'], len(cases))
        for k, kw, payload in keys:
            self.assertEqual(self.r.hget(self.q.key(b'j'), k),
                             record(T, payload=payload, state=DELAYED, **kw))
        left, jobs = self.q.consume(T + 300, ttr=5000, count=len(cases))
        self.assertEqual([j['id'] for j in jobs], [k for k, _, _ in keys])
        for k, kw, payload in keys:
            tl, att, tt = kw.pop('tries', (1, 0, 1))
            self.assertEqual(self.r.hget(self.q.key(b'j'), k),
                             record(T, payload=payload, state=LEASED, tries=(tl - 1, att + 1, tt),
                                    ttr=5000, **kw))

    def test_ready_jobs_past_their_ttl_are_removed_from_the_head_without_a_consumer(self):
        for i in range(5):
            self.pub_ready(T + i, ttl=2)
        later = self.pub_ready(T + 10, ttl=60)
        self.assertEqual(self.r.zscore(DUE, self.q.tag), T + 2000 + 1)  # the first one's expiry
        p = self.q.pump(T + 2001)
        self.assertEqual((p['made'], p['next_due']), (0, T + 2002))  # the second one's
        self.stat(ready=5, expired_total=1)
        p = self.q.pump(T + 2010)
        self.assertEqual(p['next_due'], T + 10 + 60000 + 1)
        self.stat(ready=1, expired_total=5)
        self.assertEqual([j['id'] for j in self.q.peek(T + 2010, 10)], [later])
        self.assertEqual(self.q.pump(T + 70011)['next_due'], -1)
        self.stat(ready=0, expired_total=6)
        self.assertFalse(self.r.sismember(REGISTRY, self.q.tag))
        self.assertIsNone(self.r.zscore(DUE, self.q.tag))

    def test_ready_expiry_is_bounded_per_call_and_more_says_call_again(self):
        pipe = self.r.pipeline(transaction=False)
        for i in range(1200):
            pipe.fcall(self.shas['publish'], 3, *self.q.keys, T, gen_key(T), record(T, ttl=2), T,
                       '', '0')
        pipe.execute()
        p = self.q.pump(T + 3000, limit=1000)
        self.assertEqual((p['more'], p['next_due']), (1, T + 3000))
        self.stat(ready=200, expired_total=1000)
        p = self.q.pump(T + 3000, limit=1000)
        self.assertEqual((p['more'], p['next_due']), (0, -1))
        self.stat(ready=0, expired_total=1200)

    def test_late_pump_reports_lateness_and_moves_due_order(self):
        a = self.pub_delayed(T, T + 2700)
        b = self.pub_delayed(T, T + 1200)
        p = self.q.pump(T + 5000)
        self.assertEqual((p['made'], p['lateness']), (2, [3800, 2300]))
        self.assertEqual([j['id'] for j in self.q.peek(T + 5000, 5)], [b, a])
        self.assertEqual(self.q.job(T + 5000, a)['due'], T + 2700)  # became ready when due

    def test_delayed_job_with_ttl_equal_to_delay_is_delivered_when_pumped_on_time(self):
        a = self.pub_delayed(T, T + 5000, ttl=5)
        self.assertEqual(self.q.pump(T + 5000)['made'], 1)
        self.assertEqual(self.q.consume(T + 5000)[1][0]['id'], a)

    def test_delayed_job_found_past_its_ttl_is_dropped(self):
        self.pub_delayed(T, T + 5000, ttl=5)
        self.assertEqual(self.q.pump(T + 5001)['made'], 0)
        self.stat(ready=0, delayed=0, expired_total=1)

    def test_custom_id_of_nine_chars_is_not_mistaken_for_a_derivable_field(self):
        k = custom_key(b'abcdefghi')
        self.assertEqual(len(k), 10)
        self.q.publish(T, k, record(T, payload=b'nine'), T + 1234, 'id')
        (field,) = self.q.bucket(SEC + 1)
        self.assertEqual(len(field), 12)
        self.assertEqual(self.q.pump(T + 1234)['made'], 1)
        self.assertEqual(self.q.consume(T + 1234)[1][0]['id'], k)

    def test_expired_lease_redelivers_while_tries_remain_then_kills(self):
        k = self.pub_ready(tries=(2, 0, 2))
        self.lease_one(T, k, ttr=1000)
        self.assertEqual(self.q.pump(T + 999), {'made': 0, 'more': 0, 'next_due': T + 1000,
                                                'lateness': []})
        self.assertEqual(self.q.pump(T + 1000)['made'], 1)
        self.stat(ready=1, leased=0)
        job = self.lease_one(T + 1001, k, ttr=1000)
        self.assertEqual((job['tries_left'], job['attempt']), (0, 2))
        self.assertEqual(self.q.pump(T + 2001)['made'], 0)
        self.stat(ready=0, leased=0, dead=1, dead_total=1)
        self.assertEqual(self.q.job(T + 2001, k)['due'], T + 2001)

    def test_expired_lease_of_a_job_past_its_ttl_removes_it(self):
        k = self.pub_ready(ttl=1, tries=(5, 0, 5))
        self.lease_one(T, k, ttr=2000)
        self.q.pump(T + 2000)
        self.assertIsNone(self.q.job(T + 2000, k))
        self.stat(ready=0, leased=0, expired_total=1)

    def test_backoff_waits_doubling_delays_capped_at_a_day(self):
        k = self.pub_ready(tries=(4, 0, 4), backoff=10)
        self.lease_one(T, k, ttr=1000)
        self.q.pump(T + 1000)  # attempt 1 -> 10 s
        self.assertEqual(self.q.job(T + 1000, k)['due'], T + 11000)
        self.assertEqual(self.q.pump(T + 10999)['made'], 0)
        self.assertEqual(self.q.pump(T + 11000)['made'], 1)
        self.lease_one(T + 11000, k)
        self.q.nack(T + 11500, k)  # attempt 2 -> 20 s
        self.assertEqual(self.q.job(T + 11500, k)['due'], T + 31500)
        self.q.pump(T + 31500)
        self.lease_one(T + 31500, k)
        self.q.nack(T + 32000, k)  # attempt 3 -> 40 s
        self.assertEqual(self.q.job(T + 32000, k)['due'], T + 72000)
        self.q.pump(T + 72000)
        self.lease_one(T + 72000, k)
        self.q.nack(T + 72000, k)  # out of tries: dead, no backoff
        self.stat(dead=1, delayed=0, nacked_total=3)

    def test_backoff_is_capped_at_one_day(self):
        k = self.pub_ready(tries=(3, 0, 3), backoff=50000, ttl=0)
        self.lease_one(T, k)
        self.q.nack(T, k)  # attempt 1: 50000 s
        t1 = T + 50000 * 1000
        self.assertEqual(self.q.job(T, k)['due'], t1)
        self.q.pump(t1)
        self.lease_one(t1, k)
        self.q.nack(t1, k)  # attempt 2: 100000 s, capped at 86400 s
        self.assertEqual(self.q.job(t1, k)['due'], t1 + 86400 * 1000)

    def test_work_per_call_is_bounded_and_more_says_when_to_call_again(self):
        self.q.checker = None
        pipe = self.r.pipeline(transaction=False)
        for i in range(2500):
            due = T + 1000 + i  # seconds SEC+1 .. SEC+3
            pipe.fcall(self.shas['publish'], 3, *self.q.keys, T, gen_key(due), record(T), due, '',
                         '1')
        pipe.execute()
        leased = [self.pub_ready(ttl=0, tries=(2, 0, 2)) for _ in range(10)]
        self.q.consume(T, ttr=100, count=10)
        p = self.q.pump(T + 10000, limit=1000)
        self.assertEqual(p['more'], 1)
        self.assertLessEqual(p['made'], 1000)
        st = self.q.qstat()
        self.assertEqual(st['leased'], 0)  # due leases get their share first
        made, calls = p['made'], 1
        while p['more'] and calls < 10:
            p = self.q.pump(T + 10000, limit=1000)
            self.assertLessEqual(p['made'], 1000)
            made, calls = made + p['made'], calls + 1
        self.assertEqual((made, p['more'], p['next_due']), (2510, 0, T + 86400 * 1000 + 1))
        self.assertLessEqual(calls, 6)
        self.stat(ready=2510, delayed=0, leased=0)
        self.assertEqual(self.q.r.zcard(self.q.key(b'w')), 0)
        check_invariants(self, self.q)
        self.assertTrue(set(leased) <= set(j['id'] for j in self.q.peek(T + 10000, 1000)))

    def test_large_current_second_is_staged_in_chunks(self):
        self.q.checker = None
        pipe = self.r.pipeline(transaction=False)
        for i in range(3000):
            due = T + 1 + i % 999
            pipe.fcall(self.shas['publish'], 3, *self.q.keys, T, custom_key(b'j%d' % i), record(T),
                         due, 'id', '0')
        pipe.execute()
        p = self.q.pump(T + 500, limit=500)
        self.assertEqual(p['more'], 1)  # staging not finished
        total, calls = p['made'], 1
        while p['more'] and calls < 20:
            p = self.q.pump(T + 500, limit=500)
            total, calls = total + p['made'], calls + 1
        self.assertEqual(p['more'], 0)
        self.assertEqual(total, sum(1 for i in range(3000) if 1 + i % 999 <= 500))
        self.assertEqual(p['next_due'], T + 501)
        check_invariants(self, self.q)
        p = self.q.pump(T + 999, limit=5000)
        self.assertEqual((p['more'], p['next_due']), (0, T + 86400 * 1000 + 1))  # head's expiry
        self.stat(ready=3000, delayed=0)

    def test_next_due_includes_lease_deadlines(self):
        k = self.pub_ready()
        self.lease_one(T, k, ttr=700)
        self.pub_delayed(T, T + 5000)
        self.assertEqual(self.q.pump(T)['next_due'], T + 700)


class RecurringTest(ScriptTest):
    def test_ack_schedules_the_next_occurrence_on_the_grid_with_full_tries(self):
        k = self.pub_delayed(T, T + 10000, every=60, tries=(3, 0, 3), ttl=30)
        self.assertEqual(self.q.pump(T + 10000)['made'], 1)
        job = self.lease_one(T + 10005, k)
        self.assertEqual(job['tries_left'], 2)
        self.assertEqual(self.q.ack(T + 10010, k), 1)
        self.stat(ready=0, leased=0, delayed=1, acked_total=1)
        j = self.q.job(T + 10010, k)
        self.assertEqual((j['state'], j['due'], j['tries_left'], j['attempt'], j['every']),
                         (b'delayed', T + 70000, 3, 0, 60))
        self.assertEqual(self.q.r.hget(self.q.key(b'i'), k), b'%d:0' % (SEC + 70))
        self.assertEqual(j['ttl_left'], 90)  # ttl counts from the occurrence's due time
        self.q.pump(T + 70000)
        self.lease_one(T + 70000, k)
        self.q.ack(T + 200000, k)  # missed occurrences are skipped, never drifting
        self.assertEqual(self.q.job(T + 200000, k)['due'], T + 250000)

    def test_cancel_stops_a_recurring_job_in_any_state(self):
        k = self.pub_delayed(T, T + 1000, every=60)
        self.assertEqual(self.q.cancel(T, k), 1)
        self.stat(delayed=0)
        k = self.pub_ready(every=60, at=T)
        self.lease_one(T, k)
        self.assertEqual(self.q.cancel(T + 1, k), 1)
        self.assertEqual(self.q.all_keys(), {self.q.key(b's')})

    def test_occurrence_out_of_tries_pauses_and_respawn_plus_ack_resume_it(self):
        k = self.pub_delayed(T, T + 10000, every=60, tries=(2, 0, 2), ttl=0)
        self.q.pump(T + 10000)
        self.lease_one(T + 10000, k, ttr=1000)
        self.q.pump(T + 11000)
        self.lease_one(T + 11000, k, ttr=1000)
        self.q.pump(T + 12000)
        self.stat(dead=1, delayed=0, ready=0)
        self.assertEqual(self.q.pump(T + 400000)['next_due'], -1)  # paused
        self.assertEqual(self.q.dl_respawn(T + 500000, 1, 100), 1)
        job = self.lease_one(T + 500000, k)
        self.assertEqual((job['tries_left'], job['ttl_left'], job['created']), (0, 100, T + 500000))
        self.q.ack(T + 500100, k)
        j = self.q.job(T + 500100, k)
        self.assertEqual((j['state'], j['due'], j['tries_left']), (b'delayed', T + 550000, 2))
        self.stat(dead=0, delayed=1, respawned_total=1)

    def test_ack_of_a_dead_recurring_job_resumes_it(self):
        k = self.pub_ready(every=60, at=T)
        self.lease_one(T, k)
        self.q.nack(T + 1, k)
        self.stat(dead=1)
        self.assertEqual(self.q.ack(T + 61000, k), 1)
        self.assertEqual(self.q.job(T + 61000, k)['due'], T + 120000)
        self.stat(dead=0, delayed=1)

    def test_ack_of_a_recurring_job_waiting_for_a_future_occurrence_changes_nothing(self):
        k = self.pub_delayed(T, T + 10000, every=60)
        self.assertEqual(self.q.ack(T + 1, k), 1)
        self.assertEqual(self.q.job(T + 1, k)['due'], T + 10000)
        self.stat(delayed=1)

    def test_ack_during_a_backoff_wait_moves_to_the_next_occurrence(self):
        k = self.pub_delayed(T, T + 10000, every=60, tries=(3, 0, 3), backoff=5)
        self.q.pump(T + 10000)
        self.lease_one(T + 10000, k)
        self.q.nack(T + 10001, k)
        self.assertEqual(self.q.job(T + 10001, k)['due'], T + 15001)
        self.assertEqual(self.q.ack(T + 10002, k), 1)
        j = self.q.job(T + 10002, k)
        self.assertEqual((j['due'], j['tries_left'], j['attempt']), (T + 70000, 3, 0))

    def test_expired_occurrence_moves_on_to_the_next_one(self):
        k = self.pub_delayed(T, T + 10000, every=60, ttl=5)
        self.assertEqual(self.q.pump(T + 15001)['made'], 0)
        self.stat(expired_total=1, delayed=1)
        self.assertEqual(self.q.job(T + 15001, k)['due'], T + 70000)
        self.q.pump(T + 70000)
        self.lease_one(T + 70000, k, ttr=10000)
        self.q.pump(T + 80000)  # lease ends after the occurrence's ttl: next occurrence
        self.assertEqual(self.q.job(T + 80000, k)['due'], T + 130000)
        self.stat(expired_total=2, delayed=1, ready=0, leased=0)

    def test_recurring_job_keeps_its_occurrence_through_a_nack(self):
        k = self.pub_delayed(T, T + 10000, every=60, tries=(3, 0, 3))
        self.q.pump(T + 10000)
        self.lease_one(T + 10000, k)
        self.q.nack(T + 20000, k)
        d = self.q.stored(k)
        self.assertEqual((d['at'], d['occ']), (T + 20000, T + 10000))
        self.lease_one(T + 20000, k)
        self.q.ack(T + 20001, k)
        self.assertEqual(self.q.job(T + 20001, k)['due'], T + 70000)


class ReadOnlyTest(ScriptTest):
    def test_peek_shows_the_next_jobs_without_leasing_them(self):
        k1, k2, k3 = (self.pub_ready(tries=(3, 0, 3), payload=b'%d' % i) for i in range(3))
        self.q.ack(T, k2)
        before = self.q.r.lrange(self.q.key(b'r'), 0, -1)
        jobs = self.q.peek(T + 1, 5)
        self.assertEqual([(j['id'], j['tries_left'], j['attempt']) for j in jobs],
                         [(k1, 3, 0), (k3, 3, 0)])
        self.assertEqual(self.q.peek(T + 1, 1)[0]['id'], k1)
        self.assertEqual(self.q.r.lrange(self.q.key(b'r'), 0, -1), before)
        self.stat(ready=2, leased=0, consumed_total=0)

    def test_peek_skips_expired_jobs_without_removing_them(self):
        self.pub_ready(ttl=1)
        k2 = self.pub_ready(ttl=100)
        self.assertEqual([j['id'] for j in self.q.peek(T + 5000, 5)], [k2])
        self.stat(ready=2, expired_total=0)

    def test_peek_of_an_unknown_queue_is_empty_and_qstat_zero(self):
        self.assertEqual(self.q.peek(T, 10), [])
        self.assertEqual(set(self.q.qstat().values()), {0})
        self.assertEqual(self.q.dl_size(T), 0)
        self.assertEqual(self.q.all_keys(), set())

    def test_job_reports_every_state(self):
        d = self.pub_delayed(T, T + 3000, backoff=7, tries=(2, 0, 2))
        self.assertEqual(self.q.job(T, d), {'state': b'delayed', 'payload': b'p',
                                            'tries_left': 2, 'attempt': 0, 'created': T,
                                            'due': T + 3000, 'ttl_left': 86400, 'every': 0,
                                            'backoff': 7})
        self.q.pump(T + 3010)
        self.assertEqual(self.q.job(T + 3010, d)['state'], b'ready')
        self.assertEqual(self.q.job(T + 3010, d)['due'], T + 3000)  # became ready when due
        self.lease_one(T + 3020, d, ttr=4000)
        j = self.q.job(T + 4020, d)
        self.assertEqual((j['state'], j['due'], j['tries_left'], j['attempt'], j['ttl_left']),
                         (b'leased', T + 7020, 1, 1, 86400 - 4))
        self.assertIsNone(self.q.job(T, gen_key(T)))
        self.assertIsNone(self.q.job(T, custom_key(b'nope')))

    def test_purge_deletes_every_key_and_counts_the_jobs(self):
        self.pub_delayed(T, T + 3000)
        self.q.publish(T, custom_key(b'c'), record(T), T + 400000, 'id')
        self.pub_ready()
        self.pub_ready()
        self.pub_ready()
        self.q.consume(T, count=2)
        self.q.pump(T + 3000)
        self.q.pump(T + 40000)  # lease of the first two expired: dead
        self.pub_ready()
        st = self.q.qstat()
        self.assertEqual(self.q.purge(), st['ready'] + st['delayed'] + st['leased'] + st['dead'])
        self.assertEqual(self.q.all_keys(), set())
        self.assertEqual(set(self.q.qstat().values()), {0})


class DeadLetterTest(ScriptTest):
    def _kill(self, n):
        """n jobs that died in order, each after two deliveries."""
        keys = []
        for i in range(n):
            k = self.pub_ready(payload=b'%d' % i, tries=(2, 0, 2))
            self.lease_one(T, k)
            self.q.nack(T, k, 0)
            self.lease_one(T, k)
            self.q.nack(T + 10 + i, k)
            keys.append(k)
        return keys

    def test_dead_letter_is_in_order_of_death(self):
        keys = self._kill(4)
        self.assertEqual(self.q.dl_size(T + 100), 4)
        jobs = self.q.dl_peek(T + 100, 3)
        self.assertEqual([(j['id'], j['tries_left'], j['attempt']) for j in jobs],
                         [(k, 0, 2) for k in keys[:3]])
        self.assertEqual(self.q.job(T + 100, keys[2])['due'], T + 12)
        self.stat(dead=4, dead_total=4)

    def test_respawn_moves_the_oldest_to_ready_with_one_try_and_a_fresh_ttl(self):
        keys = self._kill(3)
        self.assertEqual(self.q.dl_respawn(T + 1000, 2, 50), 2)
        self.stat(dead=1, ready=2, respawned_total=2)
        jobs = self.q.peek(T + 1000, 5)
        self.assertEqual([(j['id'], j['tries_left'], j['attempt'], j['ttl_left'], j['created'])
                          for j in jobs], [(k, 1, 0, 50, T + 1000) for k in keys[:2]])
        self.assertEqual(self.q.stored(keys[0])['tries'], (1, 0, 1))
        self.assertEqual(self.q.dl_respawn(T + 1000, 5, 0), 1)
        self.assertEqual(self.q.dl_respawn(T + 1000, 5, 0), 0)
        self.assertFalse(self.q.r.exists(self.q.key(b'x')))
        job = self.lease_one(T + 2000, keys[0])
        self.assertEqual(job['tries_left'], 0)
        self.q.nack(T + 2001, keys[0])
        self.stat(dead=1, dead_total=4)

    def test_delete_oldest_and_delete_by_id(self):
        keys = self._kill(4)
        self.assertEqual(self.q.dl_delete(T + 100, 1), 1)
        self.assertEqual(self.q.dl_delete_id(T + 100, keys[2]), 1)
        self.assertEqual(self.q.dl_delete_id(T + 100, keys[2]), 0)
        self.assertEqual(self.q.dl_delete_id(T + 100, custom_key(b'x')), 0)
        self.assertEqual([j['id'] for j in self.q.dl_peek(T + 100, 9)], [keys[1], keys[3]])
        self.assertEqual(self.q.dl_delete(T + 100, 9), 2)
        self.stat(dead=0)
        self.assertFalse(self.q.r.exists(self.q.key(b'x')))

    def test_delete_id_of_a_job_that_is_not_dead_is_0(self):
        k = self.pub_ready()
        self.assertEqual(self.q.dl_delete_id(T, k), 0)
        self.stat(ready=1)


class RandomOperationsTest(ScriptTest):
    """Random operations on a moving clock. After every call the invariants hold, and for one-off
    jobs nothing is lost: live jobs = published - acked - cancelled - expired - replaced - deleted
    from the dead letter."""

    def _run(self, seed, steps, recurring):
        rng = random.Random(seed)
        now = T
        keys = []
        deleted = replaced = 0
        for step in range(steps):
            now += rng.choice([0, 1, 7, 50, 400, 999, 1000, 3000])
            op = rng.random()
            k = rng.choice(keys) if keys else gen_key(now)
            if op < 0.25:
                delay = rng.choice([0, 0, 1, 500, 1000, 1500, 4000, 20000])
                kw = {'tries': (t := rng.choice([1, 2, 3]), 0, t),
                      'ttl': rng.choice([0, 5, 30, 3600]),
                      'backoff': rng.choice([0, 0, 1, 3])}
                if kw['ttl'] and kw['ttl'] * 1000 < delay:
                    kw['ttl'] = 0
                if recurring and rng.random() < 0.3:
                    kw['every'] = rng.choice([1, 5, 60])
                if rng.random() < 0.4:
                    k = custom_key(b'c%d' % rng.randrange(20))
                    mode = rng.choice(['id', 'replace'])
                else:
                    k, mode = gen_key(now + delay), ''
                res = self.q.publish(now, k, record(now, payload=os.urandom(rng.randrange(80)),
                                                    **kw), now + delay, mode)
                replaced += res == [2]
                keys.append(k)
            elif op < 0.45:
                self.q.consume(now, ttr=rng.choice([500, 2000, 10000]), count=rng.choice([1, 3]))
            elif op < 0.55:
                self.q.ack(now, *rng.sample(keys, min(len(keys), rng.choice([1, 2]))))
            elif op < 0.62:
                self.q.nack(now, k, rng.choice(['', '', '0', '700', '2500']))
            elif op < 0.66:
                self.q.touch(now, k, rng.choice(['', '3000']))
            elif op < 0.71:
                self.q.cancel(now, k)
            elif op < 0.86:
                self.q.pump(now, limit=rng.choice([1, 2, 5, 100]))
            elif op < 0.90:
                self.q.dl_respawn(now, rng.choice([1, 2]), rng.choice([0, 10]))
            elif op < 0.93:
                deleted += self.q.dl_delete(now, 1)
            elif op < 0.95:
                deleted += self.q.dl_delete_id(now, k)
            elif op < 0.97:
                self.q.peek(now, 5)
                self.q.dl_peek(now, 5)
            else:
                self.q.job(now, k)
            if not recurring:
                st = self.q.qstat()
                live = st['ready'] + st['delayed'] + st['leased'] + st['dead']
                self.assertEqual(live, st['published_total'] - st['acked_total'] -
                                 st['cancelled_total'] - st['expired_total'] - replaced - deleted,
                                 'step %d' % step)
        # Drain: everything pending eventually moves.
        for _ in range(200):
            now += 5000
            for _ in range(100):
                if not self.q.pump(now, 50)['more']:
                    break
            self.q.consume(now, count=50)
            if self.q.qstat()['leased'] == 0 and self.q.qstat()['delayed'] == 0:
                break
        if not recurring:
            self.stat(leased=0, delayed=0)

    def test_random_one_off_jobs_are_never_lost(self):
        for seed in range(4):
            self.r.flushall()
            self._run(seed, 600, recurring=False)

    def test_random_operations_with_recurring_jobs_keep_the_invariants(self):
        for seed in range(4):
            self.r.flushall()
            self._run(100 + seed, 600, recurring=True)


class StaleEntriesTest(ScriptTest):
    """Lazy lists stay bounded, and reads are never short while jobs are ready (issue 8)."""
    check_every_call = False  # thousands of calls; tearDown still checks every invariant

    def test_newest_first_cancels_keep_the_list_bounded_and_consume_finds_the_job(self):
        oldest = self.pub_ready(T, payload=b'oldest')
        longest = 0
        for i in range(5000):
            k = gen_key(T + i + 1)
            self.q.publish(T + i, k, record(T + i))
            self.assertEqual(self.q.cancel(T + i, k), 1)
            longest = max(longest, self.r.llen(self.q.key(b'r')))
        # One live job: the list never holds more than 2 * 1 + 64 entries (+1 just published).
        self.assertLessEqual(longest, 2 * 1 + 64 + 1)
        self.assertEqual([j['id'] for j in self.q.peek(T + 6000)], [oldest])
        self.assertEqual(self.lease_one(T + 6000, oldest)['payload'], b'oldest')
        self.stat(ready=0, leased=1, cancelled_total=5000)

    def test_many_stale_entries_ahead_of_ready_jobs_do_not_make_reads_short(self):
        # 3000 jobs, the 1500 after the first cancelled: the list is rebuilt on the way, so
        # neither PEEK nor a non-blocking CONSUME comes up short.
        keys = []
        pipe = self.r.pipeline(transaction=False)
        for i in range(3000):
            k = gen_key(T + i)
            keys.append(k)
            pipe.fcall(self.shas_publish, 3, *self.q.keys, T, k, record(T), T, '', '0')
        pipe.execute()
        for k in reversed(keys[1:1501]):
            self.assertEqual(self.q.cancel(T, k), 1)
        self.assertLessEqual(self.r.llen(self.q.key(b'r')), 2 * 1500 + 64)
        peeked = self.q.peek(T, count=1000)
        self.assertEqual([j['id'] for j in peeked], [keys[0]] + keys[1501:2500])
        # A consume call pops at most count + 1000 entries; it says how many are still ready,
        # and deferq calls again (worker.cc ConsumeRun), which gets the rest.
        left, jobs = self.q.consume(T, count=1000)
        self.assertEqual((len(jobs), left), (500, 1000))
        left, jobs = self.q.consume(T, count=1000)
        self.assertEqual((len(jobs), left), (1000, 0))
        self.assertEqual([j['id'] for j in jobs], keys[2000:3000])

    def test_dead_letter_is_compacted_too(self):
        ks = []
        for i in range(200):
            k = self.pub_ready(T, payload=b'%d' % i)
            self.lease_one(T, k)
            self.assertEqual(self.q.nack(T, k), 1)  # one try: dead
            ks.append(k)
        for k in reversed(ks[1:]):
            self.assertEqual(self.q.cancel(T, k), 1)
        self.assertLessEqual(self.r.llen(self.q.key(b'x')), 2 * 1 + 64)
        self.assertEqual([j['id'] for j in self.q.dl_peek(T, 10)], [ks[0]])

    @property
    def shas_publish(self):
        return ScriptTest.shas['publish']


class RegistryAndDueIndexTest(ScriptTest):
    """The pool-wide registry dq:queues and due index dq:due (KEYS[2..3])."""

    def test_a_queue_is_registered_exactly_while_it_holds_a_job(self):
        self.assertFalse(self.r.sismember(REGISTRY, self.q.tag))
        k = self.pub_ready(T)
        self.assertTrue(self.r.sismember(REGISTRY, self.q.tag))
        self.lease_one(T, k)
        self.assertTrue(self.r.sismember(REGISTRY, self.q.tag))
        self.assertEqual(self.r.zscore(DUE, self.q.tag), T + 30000)  # the lease's end
        self.assertEqual(self.q.ack(T + 1, k), 1)
        self.assertFalse(self.r.sismember(REGISTRY, self.q.tag))
        self.assertIsNone(self.r.zscore(DUE, self.q.tag))
        # A request/reply round: publish, consume, ack, again and again: nothing is left behind.
        for i in range(3):
            k = self.pub_ready(T + 10 + i)
            self.lease_one(T + 10 + i, k)
            self.q.ack(T + 10 + i, k)
        self.assertEqual(self.r.smembers(REGISTRY), set())
        self.assertEqual(self.r.zcard(DUE), 0)
        self.stat(published_total=4, consumed_total=4, acked_total=4)

    def test_due_index_is_a_bucket_start_minus_the_look_ahead_then_what_the_pump_says(self):
        self.pub_delayed(T, T + 7500)
        self.assertEqual(self.r.zscore(DUE, self.q.tag), T + 7000 - 2000)
        self.pub_delayed(T, T + 3200)  # a new, earlier bucket lowers it
        self.assertEqual(self.r.zscore(DUE, self.q.tag), T + 3000 - 2000)
        self.pub_delayed(T, T + 9100)  # a later one does not
        self.assertEqual(self.r.zscore(DUE, self.q.tag), T + 1000)
        self.assertEqual(self.q.pump(T + 3200)['made'], 1)
        self.assertEqual(self.r.zscore(DUE, self.q.tag), T + 7000)  # the pump's next_due
        self.assertEqual(self.q.pump(T + 9100)['made'], 2)
        # Only ready jobs left: the pump comes back when the head's ttl has passed.
        self.assertEqual(self.r.zscore(DUE, self.q.tag), T + 86400 * 1000 + 1)
        self.assertTrue(self.r.sismember(REGISTRY, self.q.tag))  # 3 ready jobs
        self.assertEqual(self.q.purge(), 3)
        self.assertFalse(self.r.sismember(REGISTRY, self.q.tag))

    def test_expired_ready_jobs_consumed_away_leave_the_registry(self):
        self.pub_ready(T, ttl=1)
        self.assertEqual(self.q.consume(T + 1500), (0, []))
        self.stat(ready=0, expired_total=1)
        self.assertFalse(self.r.sismember(REGISTRY, self.q.tag))


class OwnTest(ScriptTest):
    """own.lua: the pump lease, held by one instance at a time, with a PX expiry."""

    def own(self, who, lease_ms=2000):
        CALLED.add('own')
        return self.r.fcall(ScriptTest.shas['own'], 1, self.q.P, who, lease_ms)

    def test_free_lease_is_taken_and_kept_by_its_holder_only(self):
        self.assertEqual(self.own('a'), 1)
        self.assertEqual(self.r.get(self.q.P + b'own'), b'a')
        self.assertEqual(self.own('b'), 0)
        self.assertEqual(self.r.get(self.q.P + b'own'), b'a')
        self.assertEqual(self.own('a', 5000), 1)
        self.assertGreater(self.r.pttl(self.q.P + b'own'), 2000)

    def test_expired_lease_goes_to_the_next_instance(self):
        self.assertEqual(self.own('a', 50), 1)
        time.sleep(0.15)
        self.assertEqual(self.own('b'), 1)
        self.assertEqual(self.r.get(self.q.P + b'own'), b'b')

    def test_bad_arguments_are_errors_and_write_nothing(self):
        for who, lease in (('', 100), ('a', 0), ('a', 'x')):
            with self.assertRaisesRegex(redis.ResponseError, 'deferq own: bad arguments'):
                self.own(who, lease)
        self.assertIsNone(self.r.get(self.q.P + b'own'))


class NamespaceScriptTest(ScriptTest):
    """namespace.lua: namespace and token metadata under dq:{auth}: (docs/storage.md)."""

    A = b'dq:{auth}:'

    def ns(self, *argv):
        CALLED.add('namespace')
        return self.r.fcall(ScriptTest.shas['namespace'], 1, self.A, *argv)

    def test_create_lookup_and_duplicate(self):
        self.assertEqual(self.ns('create', 'shop', 'eu', 'the shop', T), b'OK')
        with self.assertRaisesRegex(redis.ResponseError, 'namespace already exists'):
            self.ns('create', 'shop', 'default', '', T)
        self.assertEqual(self.r.hgetall(self.A + b'namespaces'), {b'shop': b'eu'})
        self.assertEqual(self.r.hgetall(self.A + b'ns:shop'),
                         {b'pool': b'eu', b'description': b'the shop', b'created_ms': b'%d' % T})
        self.assertEqual(self.ns('lookup', 'shop'), [b'eu'])
        self.assertEqual(self.ns('lookup', 'nope'), [None])
        self.assertEqual(self.ns('info', 'shop'), [b'eu', b'the shop', b'%d' % T, 0])
        self.assertIsNone(self.ns('info', 'nope'))
        self.assertEqual(self.ns('list', ''), [b'shop', b'eu'])

    def test_tokens_add_list_revoke_by_digest_or_id(self):
        d1, d2 = 'a' * 64, 'b' * 16 + 'c' * 48
        with self.assertRaisesRegex(redis.ResponseError, 'no such namespace'):
            self.ns('token_add', 'shop', d1, 'x', T)
        self.ns('create', 'shop', 'default', '', T)
        self.assertEqual(self.ns('token_add', 'shop', d1, 'ci token', T), 1)
        self.assertEqual(self.ns('token_add', 'shop', d2, '', T + 1), 1)
        self.assertEqual(sorted(self.ns('lookup', 'shop')[1:]), [d1.encode(), d2.encode()])
        listed = self.ns('token_list', 'shop')
        self.assertEqual(sorted(zip(*[iter(listed)] * 3)),
                         [(b'a' * 16, b'%d' % T, b'ci token'), (b'b' * 16, b'%d' % (T + 1), b'')])
        self.assertEqual(self.ns('token_revoke', 'shop', 'b' * 16), 1)  # by id
        self.assertEqual(self.ns('token_revoke', 'shop', d1), 1)        # by digest
        self.assertEqual(self.ns('token_revoke', 'shop', d1), 0)
        self.assertEqual(self.ns('token_revoke', 'shop', 'short'), 0)
        self.assertEqual(self.ns('lookup', 'shop'), [b'default'])

    def test_delete_removes_metadata_and_tokens_and_a_recreate_starts_without_tokens(self):
        self.ns('create', 'shop', 'default', '', T)
        self.ns('token_add', 'shop', 'a' * 64, '', T)
        self.assertEqual(self.ns('delete', 'shop'), 1)
        self.assertEqual(self.ns('delete', 'shop'), 0)
        self.assertEqual(self.r.keys(b'dq:{auth}:*'), [])
        self.r.hset(self.A + b'tokens:shop', 'f' * 64, 'left over')
        self.ns('create', 'shop', 'eu', '', T)
        self.assertEqual(self.ns('lookup', 'shop'), [b'eu'])


class StructureTest(unittest.TestCase):
    def test_list_names_every_script_file_and_which_share_no_common_code(self):
        files = sorted(f[:-len('.lua')] for f in os.listdir(SCRIPTS_DIR)
                       if f.endswith('.lua') and f != 'common.lua')
        self.assertEqual(sorted(all_scripts()), files)
        for name, standalone in script_list():
            self.assertEqual(COMMON_BEGIN in read_source(name), not standalone, name)

    def test_every_script_has_one_empty_common_placeholder(self):
        # The shared code lives in common.lua only; the build fills each placeholder in.
        for name in queue_scripts():
            text = read_source(name)
            self.assertEqual(text.count(COMMON_BEGIN), 1, name)
            self.assertIn(COMMON_BEGIN + '\n' + COMMON_END + '\n', text, name)

    def test_every_script_header_lists_keys_argv_state_change_and_return(self):
        for name in all_scripts():
            header = read_script(name).split(COMMON_BEGIN)[0]
            for word in ('KEYS[1]', 'ARGV', 'State change', 'Returns'):
                self.assertIn(word, header, name)

    def test_scripts_never_read_the_clock(self):
        for name in all_scripts():
            self.assertNotRegex(read_script(name), r"call\('TIME'", name)


class ScriptCoverageCheck(unittest.TestCase):
    """Run after every other test (main adds it last): each listed script was called directly."""

    def test_every_listed_script_was_called_by_a_test(self):
        self.assertEqual(sorted(set(all_scripts()) - CALLED), [])


class ClusterTest(unittest.TestCase):
    """Scripts build key names from KEYS[1]; Redis Cluster must accept that (same slot)."""

    def test_scripts_run_on_a_cluster_node(self):
        server = RedisServer(cluster=True)
        try:
            c = server.client
            c.execute_command('CLUSTER', 'ADDSLOTSRANGE', 0, 16383)
            deadline = time.time() + 10
            while b'cluster_state:ok' not in c.execute_command('CLUSTER', 'INFO'):
                self.assertLess(time.time(), deadline, 'cluster did not become ok')
                time.sleep(0.05)
            q = Queue(c, load_scripts(c), ns='team', name='orders', pool_keys=False)
            k = gen_key(T + 2000)
            self.assertEqual(q.publish(T, k, record(T, payload=b'c'), T + 2000), [1])
            self.assertEqual(q.pump(T + 2000)['made'], 1)
            self.assertEqual(q.consume(T + 2000)[1][0]['id'], k)
            self.assertEqual(q.ack(T + 2001, k), 1)
            self.assertEqual(q.purge(), 0)
            with self.assertRaisesRegex(redis.ResponseError, 'same slot|cross slot|CROSSSLOT'):
                c.fcall(q.shas['qstat'], 2, q.P, b'dq:{other/q}:')
        finally:
            server.stop()


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
        st = c.hmget(P + b's', 'delayed')
        assert int(st[0]) == n, st
        print('  (%d bucket keys)' % c.zcard(P + b'b'))

        def custom(pipe, i):
            pipe.fcall(shas['publish'], 3, P, REGISTRY, DUE, now, b'#order-%08d' % i, rec, dues[i], 'id', '0')
        measure(c, n, custom, 'deferq: custom ids ("#order-NNNNNNNN", bucket + P.."i" entry)',
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
    global SCRIPTS_DIR
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('scripts_dir')
    ap.add_argument('--memory', type=int, metavar='N')
    ap.add_argument('-v', '--verbose', action='store_true')
    ap.add_argument('-k', dest='pattern', help='run only tests whose name contains this')
    args = ap.parse_args()
    SCRIPTS_DIR = args.scripts_dir
    # SIGTERM unwinds like Ctrl-C, so the finally blocks stop our redis-servers.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.memory:
        memory_mode(args.memory)
        return 0

    loader = unittest.TestLoader()
    if args.pattern:
        loader.testNamePatterns = ['*%s*' % args.pattern]
    suite = unittest.TestSuite(
        t for t in iter_tests(loader.loadTestsFromModule(sys.modules[__name__]))
        if not isinstance(t, ScriptCoverageCheck))
    if not args.pattern:
        suite.addTest(ScriptCoverageCheck('test_every_listed_script_was_called_by_a_test'))
    try:
        return runner.run_suite(suite, verbosity=2 if args.verbose else 1)
    finally:
        if ScriptTest.server is not None:
            ScriptTest.server.stop()


if __name__ == '__main__':
    sys.exit(main())
