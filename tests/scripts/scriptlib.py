"""The script tests' shared part: the storage format mirrored from docs/storage.md, a redis-server
with the library loaded as deferq loads it, a Queue driven through the scripts with the argument
shapes their headers document, and the storage invariants checked after every call.

Imported by the script test files (test_publish_consume.py, test_pump.py, test_invariants.py) and
run by test_scripts.py, which sets SCRIPTS_DIR. Needs redis-py (Debian's python3-redis), hence
/usr/bin/python3.
"""

import hashlib
import importlib.util
import os
import struct
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))

from dqtest import procs  # noqa: E402

COMMON_BEGIN = '-- BEGIN common'
COMMON_END = '-- END common'

READY, LEASED, DEAD, DELAYED = 0, 1, 2, 3
STATE_NAMES = {READY: b'ready', LEASED: b'leased', DEAD: b'dead', DELAYED: b'delayed'}
FLAG_TRIES, FLAG_EVERY, FLAG_BACKOFF = 4, 8, 16
FLAG_AT, FLAG_TTR, FLAG_OCCURRENCE = 32, 64, 128
L_NOTIFY, L_RETAIN = 16, 32  # the long T block's flags beside the level (common/record.lua)
DERIVABLE_BIT = 0x8000

REGISTRY, DUE = b'dq:queues', b'dq:due'
SPARSE = 16  # common/staging.lua: a bucket of at most this many jobs is staged at its first due ms
def stage_spread(prefix, ahead_ms=2000):
    """common/keys.lua stage_spread: when in its look-ahead a queue's buckets are staged."""
    half = ahead_ms // 2
    if half < 1:
        return 0
    h = 0
    for b in prefix:
        h = (h * 33 + b) % 65521
    return h % half


T = 1_700_000_000_000  # a whole second, so T + x lands at offset x of bucket T // 1000 (x < 1000)
RETAIN_MS = 600000  # common/keys.lua's retention, as the build embeds it
SEC = T // 1000
FILL_DUE = T + 86_400_000  # ScriptTest.fill_staging's jobs are due from then

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
           state=0, bmax=0, jitter=False, sched=None, level=0, notify=False, retain=0):
    flags, body = state, b''
    lv = level | (L_NOTIFY if notify else 0) | (L_RETAIN if retain else 0)
    if lv:  # the long T block: tries_left, attempt, 0, tries_total, level + flags, [retain_s]
        t = tuple(tries) if tries is not None else (1, 0, 1)
        flags |= FLAG_TRIES
        body += struct.pack('<HHHHB', t[0], t[1], 0, t[2], lv)
        if retain:
            body += struct.pack('<I', retain)
    elif tries is not None and tuple(tries) != (1, 0, 1):
        flags |= FLAG_TRIES
        body += struct.pack('<HHH', *tries)
    if sched is not None:  # the long E block: 0, length, a schedule (sched_block)
        flags |= FLAG_EVERY
        body += struct.pack('<IH', 0, len(sched)) + sched
    elif every:
        flags |= FLAG_EVERY
        body += struct.pack('<I', every)
    if backoff and (bmax or jitter):  # the long B block: 0, backoff, max + 2^31 * jitter
        flags |= FLAG_BACKOFF
        body += struct.pack('<III', 0, backoff, bmax | (2**31 if jitter else 0))
    elif backoff:
        flags |= FLAG_BACKOFF
        body += struct.pack('<I', backoff)
    if at is not None:
        flags |= FLAG_AT
        body += at.to_bytes(6, 'little')
    if ttr is not None:
        flags |= FLAG_TTR
        body += struct.pack('<I', ttr)
    return bytes([flags]) + created.to_bytes(6, 'little') + struct.pack('<I', ttl) + body + payload


# Zone rules for sched_block: standard and daylight offsets (seconds east of UTC), then the
# changes into and out of daylight saving time as (kind, month, week, weekday, day, time_s).
PARIS = (3600, 7200, (0, 3, 5, 0, 0, 7200), (0, 10, 5, 0, 0, 10800))
NEW_YORK = (-18000, -14400, (0, 3, 2, 0, 0, 7200), (0, 11, 1, 0, 0, 7200))
UTC = (0, 0, (0, 0, 0, 0, 0, 0), (0, 0, 0, 0, 0, 0))


def sched_block(minutes, hours, seconds=None, days=None, months=None, weekdays=None, zone=UTC,
                text=b'', zone_name=b'UTC'):
    """A CRON schedule as deferq stores it (src/schedule/cron.cc EncodeSchedule): field value
    lists (None: "*"), the zone's rule, the spec and zone name. test_record_codec.py holds the
    C++ encoder and the Lua search to each other; this mirror serves the script tests."""
    def mask(values, lo, hi):
        m = 0
        for v in (range(lo, hi + 1) if values is None else values):
            m |= 1 << v
        return m
    sec = mask(seconds if seconds is not None else [0], 0, 59)
    mins = mask(minutes, 0, 59)
    flags = (1 if seconds is not None else 0) | (2 if days is None else 0) | \
        (4 if weekdays is None else 0) | (8 if zone[0] != zone[1] else 0)
    out = struct.pack('<BIIIIIIHB', flags, sec & 0xffffffff, sec >> 32, mins & 0xffffffff,
                      mins >> 32, mask(hours, 0, 23), mask(days, 1, 31), mask(months, 1, 12),
                      mask(weekdays, 0, 6))
    out += struct.pack('<ii', zone[0], zone[1])
    for c in zone[2:]:
        out += struct.pack('<BBBBHi', *c)
    return out + bytes([len(text)]) + text + bytes([len(zone_name)]) + zone_name


def decode_record(b):
    flags = b[0]
    d = {'state': flags & 3, 'created': int.from_bytes(b[1:7], 'little'),
         'ttl': struct.unpack('<I', b[7:11])[0], 'tries': (1, 0, 1), 'every': 0, 'backoff': 0,
         'bmax': 0, 'jitter': False, 'at': None, 'ttr': None, 'occ': None, 'sched': None,
         'level': 0, 'notify': False, 'retain': 0}
    pos = 11
    if flags & FLAG_TRIES:
        d['tries'] = struct.unpack('<HHH', b[pos:pos + 6])
        pos += 6
        if d['tries'][2] == 0:  # the long form: the total, the level and flags, [retain_s]
            total, lv = struct.unpack('<HB', b[pos:pos + 3])
            d['tries'] = (d['tries'][0], d['tries'][1], total)
            d['level'], d['notify'] = lv & 15, bool(lv & L_NOTIFY)
            pos += 3
            if lv & L_RETAIN:
                d['retain'] = struct.unpack('<I', b[pos:pos + 4])[0]
                pos += 4
    if flags & FLAG_EVERY:
        d['every'] = struct.unpack('<I', b[pos:pos + 4])[0]
        pos += 4
        if d['every'] == 0:
            n = struct.unpack('<H', b[pos:pos + 2])[0]
            d['sched'] = b[pos + 2:pos + 2 + n]
            pos += 2 + n
    if flags & FLAG_BACKOFF:
        d['backoff'] = struct.unpack('<I', b[pos:pos + 4])[0]
        pos += 4
        if d['backoff'] == 0:
            d['backoff'], m = struct.unpack('<II', b[pos:pos + 8])
            d['bmax'], d['jitter'] = m & (2**31 - 1), m >= 2**31
            pos += 8
    if flags & FLAG_AT:
        d['at'] = int.from_bytes(b[pos:pos + 6], 'little')
        pos += 6
    if flags & FLAG_TTR:
        d['ttr'] = struct.unpack('<I', b[pos:pos + 4])[0]
        pos += 4
    if flags & FLAG_OCCURRENCE:
        d['occ'] = int.from_bytes(b[pos:pos + 6], 'little')
        pos += 6
    d['payload'] = b[pos:]
    if (d['every'] or d['sched'] is not None) and d['occ'] is None:
        d['occ'] = d['at'] if d['at'] is not None else d['created']
    return d


def stored_state(k, d, staged):
    """The state of record d of K in P.."j": staged records (bits DELAYED) are delayed while K
    is in P.."w" and ready once the pump took K out of it."""
    if d['state'] == DELAYED:
        return DELAYED if k in staged else READY
    return d['state']


def staged_entry(k, due, level=0):
    """The P.."w" member of a staged job, which the pump moves to the ready list as it is: its
    mark is 255 - the job's priority level."""
    return bytes([255 - level]) + due.to_bytes(6, 'big') + k


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
    """A script's source, as the library gets it (its common placeholder is empty)."""
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


def all_functions():
    """Every function the library registers: the scripts, and the same code under other flags
    (list.txt `body=`), e.g. namespace_read."""
    return embedder().script_names(os.path.join(SCRIPTS_DIR, 'list.txt'))


def function_flags():
    """name -> the function's Redis flags (a tuple), from list.txt."""
    entries = embedder().script_entries(os.path.join(SCRIPTS_DIR, 'list.txt'))
    return {name: flags for name, _, flags, _ in entries}


def queue_scripts():
    """The scripts that share the common code (all but the standalone ones, such as own.lua)."""
    return [name for name, standalone in script_list() if not standalone]


# Every script a test called (Queue.call, OwnTest.own): the run fails when a listed script has
# no direct test (ScriptCoverageCheck, run last).
CALLED = set()


def load_scripts(client):
    """Loads the library as deferq does (FUNCTION LOAD REPLACE); returns name -> function."""
    version, body = embedder().library_of_dir(SCRIPTS_DIR)
    client.function_load(body, replace=True)
    return {name: 'dq_%s_%s' % (version, name) for name in all_functions()}


# --------------------------------------------------------------------------------------------
# One queue, driven through the scripts with the argument shapes documented in their headers.

def index_key(P, k):
    return P + b'i:' + hashlib.sha1(k).hexdigest()[:3].encode()


def index_entries(r, P):
    """Every index entry of queue P (K -> due ms), checking each sits in its own part."""
    out = {}
    for part in r.scan_iter(match=P + b'i:*'):
        for k, v in r.hgetall(part).items():
            assert part == index_key(P, k), (part, k)
            out[k] = v
    return out


class Queue:
    def __init__(self, client, shas, ns='ns', name='q', checker=None, pool_keys=True):
        self.r = client
        self.shas = shas
        self.P = ('dq:{%s/%s}:' % (ns, name)).encode()
        self.tag = ('%s/%s' % (ns, name)).encode()
        self.checker = checker  # called after every script call
        self.totals = {}  # the counters (`*_total` of P.."s") after the last call: never lower
        self.lazy, self.last_pump = 0, 0  # the last pump call's lazy_ms and now_ms
        # KEYS[2..3]: the pool's registry and due index, as deferq passes them (not on Cluster).
        self.keys = [self.P] + ([REGISTRY, DUE] if pool_keys else [])

    def call(self, script, *args):
        CALLED.add(script)
        if script == 'purge':
            self.totals = {}  # PURGE deletes the queue's keys, its counters included
        try:
            return self.r.fcall(self.shas[script], len(self.keys), *self.keys, *args)
        finally:
            if script == 'pump' and not self.r.exists(self.P + b's'):
                self.totals = {}  # the end of an empty queue's retention deletes its counters
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

    def nack(self, now, k, delay='', reason=None, mode=''):
        if reason is None and mode == '':
            return self.call('nack', now, k, delay)
        return self.call('nack', now, k, delay, mode, reason or '')

    def touch(self, now, k, ttr=''):
        return self.call('touch', now, k, ttr)

    def job(self, now, k, use_hint=True):
        reply = self.call('job', now, k, hint(k) if use_hint else '')
        if reply is None:
            return None
        names = ['state', 'payload', 'tries_left', 'attempt', 'created', 'due', 'ttl_left',
                 'every', 'backoff', 'last_error', 'last_error_attempt', 'last_error_ms', 'cron',
                 'tz', 'priority', 'result', 'finished_ms']
        return dict(zip(names, reply))

    # await.lua: the reply as it is (None, [b'live', state], [outcome, text, attempt, at], ...)
    def await_(self, now, k):
        return self.call('await', now, k, hint(k))

    # ack.lua's one-job form: [RESULT bytes] [ATTEMPT n]
    def ack_one(self, now, k, result=None, attempt=''):
        args = [now, k, hint(k), attempt]
        if result is not None:
            args += ['result', result]
        return self.call('ack', *args)

    def result_key(self, k):
        return self.P + b'f:' + k

    def peek(self, now, count=1):
        return jobs_of(self.call('peek', now, count))

    def qstat(self, now=None):
        """now: the staged jobs due by then count as ready (qstat.lua's optional now_ms)."""
        names = ['ready', 'delayed', 'leased', 'dead', 'published_total', 'consumed_total',
                 'acked_total', 'expired_total', 'dead_total', 'nacked_total',
                 'respawned_total', 'cancelled_total', 'paused', 'undelivered_total', 'schedules']
        args = [] if now is None else [now]
        return dict(zip(names, self.call('qstat', *args)))

    def purge(self):
        return self.call('purge')

    def pump(self, now, limit=1000, lazy=None):
        """lazy: pump.lua's lazy_ms (look-ahead 0); None sends neither."""
        args = [now, limit] + ([] if lazy is None else [0, lazy])
        self.lazy, self.last_pump = lazy or 0, now  # before call(): the checker reads them
        reply = self.call('pump', *args)
        return {'made': reply[0], 'more': reply[1], 'next_due': reply[2], 'lateness': reply[3:]}

    def dl_size(self, now):
        return self.call('deadletter', 'size', now, '', '')

    def dl_peek(self, now, count=1):
        return jobs_of(self.call('deadletter', 'peek', now, count, ''))

    def dl_peek_errors(self, now, count=1):
        """deadletter.lua peek "errors": [(K, last_error, last_error_attempt, last_error_ms)]."""
        reply = self.call('deadletter', 'peek', now, count, 'errors')
        return [(reply[i], reply[i + 6], reply[i + 7], reply[i + 8])
                for i in range(0, len(reply), 9)]

    def errors(self):
        """P.."e": K -> (attempt, at_ms, reason)."""
        out = {}
        for k, v in self.r.hgetall(self.P + b'e').items():
            att, at = struct.unpack('<HQ', v[:8] + b'\0\0')
            out[k] = (att, at & 0xFFFFFFFFFFFF, v[8:])
        return out

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

    def index_key(self, k):
        """The index part holding K's entry: P.."i:" .. the first 3 hex digits of SHA-1(K)."""
        return index_key(self.P, k)

    def index(self, k):
        """K's index entry (its due ms as decimal bytes), or None."""
        return self.r.hget(self.index_key(k), k)

    def index_all(self):
        return index_entries(self.r, self.P)

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
    # Every read in two round trips (the random tests check after each call: one round trip per
    # key made them slow); nothing else writes meanwhile, so this is the same as reading in turn.
    p = r.pipeline(transaction=False)
    p.hgetall(P + b's')
    p.hgetall(P + b'j')
    p.lrange(P + b'r', 0, -1)
    p.lrange(P + b'x', 0, -1)
    p.zrange(P + b'l', 0, -1, withscores=True)
    p.zrange(P + b'w', 0, -1, withscores=True)
    p.zrange(P + b'h', 0, -1, withscores=True)
    p.zrange(P + b'b', 0, -1)
    p.hkeys(P + b'e')
    p.exists(P + b'p')
    p.exists(P + b'wt')
    if len(q.keys) == 3:
        p.sismember(REGISTRY, q.tag)
        p.zscore(DUE, q.tag)
    (raw_s, raw_j, rlist, xlist, lease_list, member_list, hset_list, b_list, error_list,
     paused_n, waited_n, *pool_reads) = p.execute()
    queue_keys = list(r.scan_iter(match=P + b'*', count=10000))
    bucket_keys = {k for k in queue_keys if k.startswith(P + b'd:')}
    index_parts = sorted(k for k in queue_keys if k.startswith(P + b'i:'))
    p = r.pipeline(transaction=False)
    for k in sorted(bucket_keys) + index_parts:
        p.hgetall(k)
    hashes = dict(zip(sorted(bucket_keys) + index_parts, p.execute()))
    s = {k.decode(): int(v) for k, v in raw_s.items()}
    # The delayed gauge is `delayed` + `pd` (delayed publishes, also in published_total).
    s['delayed'] = s.get('delayed', 0) + s.get('pd', 0)
    for name in ['ready', 'delayed', 'dead'] + [k for k in s if k.endswith('_total')]:
        tc.assertGreaterEqual(s.get(name, 0), 0, name)
    # Counters only go up (Prometheus counters, docs/metrics.md): each event is counted once and
    # never taken back. `pd` counts in published_total, so it is part of that counter.
    totals = {k: v for k, v in s.items() if k.endswith('_total')}
    totals['published_total'] = totals.get('published_total', 0) + s.get('pd', 0)
    for name, before in q.totals.items():
        tc.assertGreaterEqual(totals.get(name, 0), before, name + ' went down')
    q.totals = totals
    recs = {k: decode_record(v) for k, v in raw_j.items()}
    leases = dict(lease_list)
    # A record in j with state bits DELAYED is staged: delayed while its member (mark, due, K)
    # is in P.."w", ready once the pump moved that member to the ready list (not the record).
    members = dict(member_list)
    staged = {}
    for m, due in members.items():
        tc.assertGreaterEqual(m[0], 246, 'P.."w" member without the mark')
        k, mdue = m[7:], int.from_bytes(m[1:7], 'big')
        tc.assertEqual(mdue, due, 'P.."w" score is not the due time of its member')
        tc.assertNotIn(k, staged, 'job staged twice')
        tc.assertIn(k, recs, 'P.."w" member without a record')
        tc.assertEqual(recs[k]['state'], DELAYED, 'P.."w" member whose record is not staged')
        tc.assertEqual(staged_due(k, recs[k]), due, 'P.."w" member of another due time')
        tc.assertEqual(m[0], 255 - recs[k]['level'], 'P.."w" member of another level')
        staged[k] = due
    by_state = {st: [k for k, d in recs.items() if stored_state(k, d, staged) == st]
                for st in range(4)}
    tc.assertEqual(len(by_state[READY]), s.get('ready', 0), 'ready gauge')
    tc.assertEqual(len(by_state[DEAD]), s.get('dead', 0), 'dead gauge')
    # A ready job without a priority has an entry in P.."r" (lazy: stale entries may stay);
    # one with a priority exactly one in P.."h", scored by its level, and P.."h" holds nothing
    # else.
    hset = dict(hset_list)
    high = set()
    for k in by_state[READY]:
        d = recs[k]
        entry = k if d['state'] == READY else staged_entry(k, staged_due(k, d), d['level'])
        if d['level'] == 0:
            tc.assertIn(entry, rlist, 'ready job without a ready-list entry')
            continue
        tc.assertIn(entry, hset, 'ready job with a priority without its P.."h" entry')
        tc.assertEqual(int(hset[entry]) // 2**40, 10 - d['level'], 'P.."h" score of another level')
        high.add(entry)
    tc.assertEqual(set(hset), high, 'P.."h" entry of no ready job with a priority')
    for k in by_state[DEAD]:
        tc.assertIn(k, xlist, 'dead job without a dead-list entry')
    tc.assertEqual(set(by_state[LEASED]), set(leases), 'leased records vs lease zset')
    for k in by_state[LEASED]:
        tc.assertIsNotNone(recs[k]['ttr'], 'leased record without ttr')
    if s.get('ready', 0) == 0:
        tc.assertEqual(rlist, [], 'ready list kept although nothing is ready')
        tc.assertEqual(hset, {}, 'P.."h" kept although nothing is ready')
    if s.get('dead', 0) == 0:
        tc.assertEqual(xlist, [], 'dead list kept although nothing is dead')

    # P.."b" lists the buckets not yet staged; the pump has moved every bucket up to stage_sec
    # into P.."j", except stage_sec itself while it is still scanning it (stage_cursor != 0).
    secs = {int(m) for m in b_list}
    stage_sec = int(raw_s.get(b'stage_sec', -1))
    if raw_s.get(b'stage_cursor', b'0') != b'0':
        stage_sec -= 1
        if P + b'd:%d' % (stage_sec + 1) in bucket_keys:
            tc.assertNotIn(stage_sec + 1, secs, 'the bucket being staged is still in P.."b"')
            secs.add(stage_sec + 1)
    for sec in secs:
        tc.assertGreater(sec, stage_sec, 'a staged second in P.."b"')
    tc.assertEqual(bucket_keys, {P + b'd:%d' % sec for sec in secs}, 'P.."b" vs bucket keys')
    index = {}
    for part in index_parts:
        for k, v in hashes[part].items():
            tc.assertEqual(part, index_key(P, k), 'index entry in another part')
            index[k] = v
    delayed = []
    recurring = sum(1 for d in recs.values() if d['every'] or d['sched'] is not None)
    for sec in secs:
        h = hashes.get(P + b'd:%d' % sec, {})
        tc.assertTrue(h, 'empty bucket listed')
        for f, v in h.items():
            k, due, derivable = bucket_field_to_key(sec, f)
            if derivable:
                tc.assertEqual(len(f), 12)
                tc.assertNotIn(k, index, 'derivable job with an index entry')
            else:
                tc.assertEqual(index.get(k), b'%d' % due, 'index entry')
            tc.assertEqual(v[0] & 3, DELAYED, 'bucket record not in state delayed')
            tc.assertNotIn(k, recs, 'job both delayed and in j')
            tc.assertGreater(sec, stage_sec, 'a staged second still has a bucket')
            delayed.append(k)
            recurring += bool(v[0] & FLAG_EVERY)
    tc.assertEqual(len(delayed), len(set(delayed)), 'job in two buckets')
    tc.assertEqual(len(delayed) + len(by_state[DELAYED]), s.get('delayed', 0), 'delayed gauge')
    tc.assertTrue(set(index) <= set(delayed), 'index entry without a bucket field')
    # The schedules gauge counts the recurring jobs (EVERY, CRON) the queue holds.
    tc.assertEqual(recurring, s.get('sched', 0), 'schedules gauge')
    # A failure recorded (P.."e") belongs to a job the queue holds: none outlives its job.
    errors = set(error_list)
    tc.assertTrue(errors <= set(recs) | set(delayed), 'P.."e" entry of a job that is gone')

    # The pool's registry holds the queue exactly while it holds a job or is paused; its due index
    # entry is at or before the queue's earliest pump work (a bucket's second, a staged field, a
    # lease), and an empty queue's is when its retention ends (its counters go then).
    if len(q.keys) == 3:
        jobs = len(recs) + len(delayed)
        paused = paused_n == 1
        tc.assertEqual(bool(pool_reads[0]), jobs > 0 or paused, 'registry vs jobs held')
        # Unstaged buckets (a sparse one: its first job's due ms, common/staging.lua SPARSE; a fuller
        # one: its second), staged fields (their due ms), leases (deadline).
        # With no consumer waiting (no P.."wt"), a lazy pump (lazy_ms) put the staged jobs' part
        # as late as lazy_ms after its call or their due time.
        staged_work = list(staged.values())
        if staged_work and q.lazy and not waited_n:
            staged_work = [max(min(staged_work), q.last_pump) + q.lazy]
        def bucket_work(sec):
            fields = list(hashes.get(P + b'd:%d' % sec, {}))
            if len(fields) > SPARSE:
                return sec * 1000
            return min(bucket_field_to_key(sec, f)[1] for f in fields)
        work = ([bucket_work(sec) for sec in secs if sec > stage_sec] + staged_work +
                list(leases.values()))
        due = pool_reads[1]
        if work:
            tc.assertIsNotNone(due, 'pump work without a due index entry')
            tc.assertLessEqual(due, min(work), 'due index entry later than the work')
        if jobs == 0 and not paused:
            until = raw_s.get(b'retain_until')
            tc.assertEqual(due, None if until is None else float(until),
                           'an empty queue\'s due index entry is the end of its retention')


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

    def fill_staging(self, now=T):
        """SPARSE delayed jobs due a day after T, which a queue without buckets stages at once
        (common/staging.lua bucket_add): staging is full then, and a delayed job for a second with
        no bucket makes its bucket, as on a queue with many delayed jobs. Tests of the bucket
        layout start here. Returns the jobs' K."""
        keys = [self.pub_delayed(now, FILL_DUE + i) for i in range(SPARSE)]
        self.assertEqual(self.r.zcard(self.q.key(b'w')), SPARSE)
        return keys

    def commands_run(self):
        """The commands Redis ran since the last CONFIG RESETSTAT, by name."""
        return {k[len('cmdstat_'):]: v['calls'] for k, v in self.r.info('commandstats').items()}

    def lease_one(self, now, k, ttr=30000):
        left, jobs = self.q.consume(now, ttr)
        self.assertEqual([j['id'] for j in jobs], [k])
        return jobs[0]
