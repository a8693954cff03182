#!/usr/bin/python3
"""Durability tests for deferq (docs/commands.md CONSUME/ACK, docs/operations.md), against the real binary.

    /usr/bin/python3 tests/durability/test_durability.py /path/to/deferq [-v] [-k NAME]

Each test starts its own redis-server and deferq instance(s) on free loopback ports and stops
them at the end, whatever happens.

test_at_least_once_across_sigkill
    Publisher threads PUBLISH 10,000 jobs with unique payloads (TRIES 10) while consumer threads
    CONSUME (TTR 2, COUNT 20, blocking) and ACK them. deferq is SIGKILLed and restarted on the same
    port twice while this runs (after a third and two thirds of the publishes); clients reconnect
    and carry on. A publish counts as acknowledged only when PUBLISH returned an id; a publish whose
    connection broke is retried (so a job may exist twice in Redis; the copy without a recorded id
    is an "unacknowledged" job, consumed and ACKed like any other). After the last publish, the
    consumers go on until every acknowledged job was ACKed, or a deadline passes. Then each
    acknowledged job that was not ACKed is looked up in Redis itself (record hash / delayed bucket)
    and must still be there, ready, leased or delayed: none may be lost. Deliveries must carry the
    payload published under their id, ids must be unique, and, because the ttr pump redelivers
    unacknowledged leases (docs/commands.md), every acknowledged job must in the end have been ACKed.

test_two_instances_one_queue
    Two deferq instances on one redis-server serve one queue. Consumers on both instances block in
    CONSUME (TTR 120, TIMEOUT) before publishers on both instances PUBLISH 2,000 jobs. Every job
    must be delivered exactly once while its lease is live (no id handed to two consumers), all of
    them must be delivered, and ACK through either instance finishes them.

Prints its numbers, ends with "N passed, M failed" and exits non-zero on any failure. Needs
redis-py (Debian's python3-redis), hence /usr/bin/python3.
"""

import collections
import hashlib
import os
import signal
import struct
import sys
import threading
import time
import unittest

import redis

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))

from dqtest import procs, runner  # noqa: E402
from dqtest.ids import CROCKFORD_VALUE  # noqa: E402

DEFERQ = None  # path of the deferq binary, from argv[1]
NS = 'default'

# --------------------------------------------------------------------------------------------
# Server processes


class Servers:
    """redis-server and deferq processes of one test; stop() SIGKILLs whatever is still running."""

    def __init__(self):
        self.dir = procs.make_tmpdir('durability')
        self.servers = []

    def start_redis(self, appendonly):
        server = procs.Redis(self.dir, appendonly=appendonly)
        self.servers.append(server)
        return server.start(attempts=20).port

    def start_deferq(self, redis_port, port=None):
        """Starts deferq (on `port`, or a free one) and waits until its pool answers. Returns
        (port, process)."""
        server = procs.Deferq(DEFERQ, self.dir, redis_port, port=port)
        self.servers.append(server)
        server.start(attempts=20 if port is None else 1)
        return server.port, server.proc

    def stop(self):
        for server in self.servers:
            server.kill9()
        procs.remove_tmpdir(self.dir)


# --------------------------------------------------------------------------------------------
# Where a job is in Redis. Ids and keys as documented in src/queue/model/job_id.h and the storage
# scripts' headers: a generated id is 26 characters of Crockford base32 (10 for the 48-bit due
# timestamp in ms, 16 for 80 random bits); its canonical key K in Redis is those 16 raw bytes,
# big-endian. A custom id's K is "#" + id. Records of ready, leased and dead jobs are in the hash
# P.."j" (state = first byte % 4: 0 ready, 1 leased, 2 dead); delayed jobs are in the bucket hash
# P.."d:"..SEC, under the field OFFSET|0x8000 .. K[6:] when the id is derivable (due == its
# timestamp), else under OFFSET .. K with K -> due ms in the index part P.."i:"..XXX (XXX: the
# first three hex digits of SHA-1(K)).



def canonical_key(id_text):
    if len(id_text) == 26 and all(c in CROCKFORD_VALUE for c in id_text):
        v = 0
        for c in id_text:
            v = v * 32 + CROCKFORD_VALUE[c]
        ts, rand = v >> 80, v & ((1 << 80) - 1)
        if ts < (1 << 48):
            return ts.to_bytes(6, 'big') + rand.to_bytes(10, 'big')
    return b'#' + id_text.encode()


def queue_prefix(queue):
    return f'dq:{{{NS}/{queue}}}:'.encode()


def locate_jobs(r, queue, ids):
    """{id: 'ready' | 'leased' | 'dead' | 'delayed' | None} for each id, read from Redis."""
    P = queue_prefix(queue)
    ids = list(ids)
    keys = [canonical_key(i) for i in ids]
    out = {}
    pipe = r.pipeline(transaction=False)
    for K in keys:
        pipe.hget(P + b'j', K)
        pipe.hget(P + b'i:' + hashlib.sha1(K).hexdigest()[:3].encode(), K)
    res = pipe.execute()
    bucket_lookups = []
    for n, (jid, K) in enumerate(zip(ids, keys)):
        rec, pos = res[2 * n], res[2 * n + 1]
        if rec is not None:
            # State bits 3 in P.."j": a staged delayed job (docs/storage.md), which the pump
            # may have made ready already; both count as present.
            out[jid] = ('ready', 'leased', 'dead', 'delayed')[rec[0] % 4]
            continue
        if pos is not None:
            due = int(pos)
            bucket_lookups.append((jid, due // 1000, struct.pack('>H', due % 1000) + K))
        elif len(K) == 16 and K[0] != ord('#'):
            due = int.from_bytes(K[:6], 'big')
            bucket_lookups.append((jid, due // 1000, struct.pack('>H', due % 1000 | 0x8000) + K[6:]))
        else:
            out[jid] = None
    pipe = r.pipeline(transaction=False)
    for _, sec, field in bucket_lookups:
        pipe.hexists(P + b'd:' + str(sec).encode(), field)
    for (jid, _, _), found in zip(bucket_lookups, pipe.execute()):
        out[jid] = 'delayed' if found else None
    return out


QSTAT_FIELDS = ['ready', 'delayed', 'leased', 'dead', 'published_total', 'consumed_total',
                'acked_total', 'expired_total', 'dead_total']


def qstat(client, queue):
    reply = client.execute_command('QSTAT', queue)
    if isinstance(reply, dict):
        return {k.decode() if isinstance(k, bytes) else k: int(v) for k, v in reply.items()}
    if not isinstance(reply, list) or len(reply) % 2:
        raise AssertionError(f'QSTAT {queue} replied {reply!r}, not a flat field/value array')
    return {reply[i].decode(): int(reply[i + 1]) for i in range(0, len(reply), 2)}


def parse_jobs(reply, queue, counted):
    """CONSUME's reply as [(id, payload, tries_left, ttl_left_s)]; [] for a null reply."""
    if reply is None:
        return []
    jobs = reply if counted else [reply]
    if not isinstance(jobs, list) or (counted and not jobs):
        raise AssertionError(f'CONSUME reply {reply!r} is not a job array')
    out = []
    for j in jobs:
        if not (isinstance(j, list) and len(j) == 7 and j[0] == queue.encode()
                and isinstance(j[1], bytes) and isinstance(j[2], bytes)
                and all(isinstance(n, int) for n in j[3:])):
            raise AssertionError(f'CONSUME job {j!r} is not [queue, id, payload, tries_left, '
                                 f'ttl_left_s, attempt, elapsed_ms] for queue {queue}')
        out.append((j[1].decode(), j[2], j[3], j[4]))
    return out


def client(port, timeout=5.0):
    return redis.Redis(host='127.0.0.1', port=port, socket_timeout=timeout,
                       socket_connect_timeout=1)


TRANSIENT = (redis.ConnectionError, redis.TimeoutError)


def is_tryagain(e):
    """-TRYAGAIN: deferq (just restarted) has no pool connection yet; docs/operations.md says retry."""
    return str(e).startswith('TRYAGAIN')


# --------------------------------------------------------------------------------------------


class DurabilityTest(unittest.TestCase):

    def setUp(self):
        self.servers = Servers()

    def tearDown(self):
        self.servers.stop()

    # ----------------------------------------------------------------------------------------
    def test_at_least_once_across_sigkill(self):
        N = 10_000
        PUBLISHERS, CONSUMERS = 4, 3
        KILL_AT = (N // 3, 2 * N // 3)
        TTR = 2
        Q = 'durable'
        t0 = time.monotonic()
        publish_deadline = t0 + 30
        drain_deadline = t0 + 42

        redis_port = self.servers.start_redis(appendonly=True)
        port, proc = self.servers.start_deferq(redis_port)

        lock = threading.Lock()
        published = {}            # id -> payload, only for PUBLISH calls that returned an id
        duplicate_ids = []        # ids PUBLISH returned twice
        delivered = collections.Counter()
        delivered_payload = {}    # id -> payload of its first delivery
        payload_mismatch = []
        acked = set()             # ids an ACK of ours counted
        acked_in_doubt = set()    # an ACK broke in flight; the retry found the job already gone
        stats = collections.Counter()
        errors = []               # unexpected replies (not connection errors)
        publishing_done = threading.Event()
        stop = threading.Event()

        def note_error(what, e):
            stats[what] += 1
            with lock:
                if len(errors) < 20:
                    errors.append(f'{what}: {e!r}')

        def publisher(k):
            c = client(port)
            token = os.urandom(4).hex()
            for i in range(k, N, PUBLISHERS):
                payload = f'job-{i:05d}-{token}'.encode()
                while True:
                    if time.monotonic() > publish_deadline:
                        note_error('publish_deadline', f'job {i} not published in time')
                        return
                    try:
                        jid = c.execute_command('PUBLISH', Q, payload, 'TRIES', 10).decode()
                        break
                    except TRANSIENT:
                        stats['publish_retries_connection'] += 1
                        time.sleep(0.02)
                    except redis.ResponseError as e:
                        if is_tryagain(e):
                            stats['publish_retries_tryagain'] += 1
                        else:
                            note_error('publish_error_reply', e)
                        time.sleep(0.05)
                with lock:
                    if jid in published:
                        duplicate_ids.append(jid)
                    published[jid] = payload

        def ack(c, ids):
            """ACKs ids, one ACK command each (pipelined), so each count is attributable."""
            in_doubt = False
            while ids and not stop.is_set():
                try:
                    pipe = c.pipeline(transaction=False)
                    for jid in ids:
                        pipe.execute_command('ACK', Q, jid)
                    res = pipe.execute(raise_on_error=False)
                except TRANSIENT:
                    stats['ack_retries_connection'] += 1
                    in_doubt = True
                    time.sleep(0.02)
                    continue
                retry = []
                with lock:
                    for jid, n in zip(ids, res):
                        if isinstance(n, Exception):
                            if is_tryagain(n):
                                stats['ack_retries_tryagain'] += 1
                            else:
                                note_error('ack_error_reply', n)
                            retry.append(jid)
                        elif n == 1:
                            acked.add(jid)
                        elif n == 0:
                            # Gone: our earlier ACK that broke in flight went through, or the
                            # lease expired and another consumer got the job and ACKed it.
                            if in_doubt:
                                acked_in_doubt.add(jid)
                            else:
                                stats['ack_found_nothing'] += 1
                        else:
                            note_error('ack_bad_reply', n)
                ids = retry
                if retry:
                    time.sleep(0.05)

        def consumer():
            c = client(port)
            while not stop.is_set():
                try:
                    reply = c.execute_command('CONSUME', Q, 'TTR', TTR, 'TIMEOUT', '0.5',
                                              'COUNT', 20)
                except TRANSIENT:
                    stats['consume_retries_connection'] += 1
                    time.sleep(0.02)
                    continue
                except redis.ResponseError as e:
                    if is_tryagain(e):
                        stats['consume_retries_tryagain'] += 1
                    else:
                        note_error('consume_error_reply', e)
                    time.sleep(0.05)
                    continue
                try:
                    jobs = parse_jobs(reply, Q, counted=True)
                except AssertionError as e:
                    note_error('consume_bad_reply', e)
                    continue
                if not jobs:
                    stats['consume_timeouts'] += 1
                    continue
                with lock:
                    for jid, payload, _, _ in jobs:
                        delivered[jid] += 1
                        first = delivered_payload.setdefault(jid, payload)
                        if first != payload:
                            payload_mismatch.append((jid, first, payload))
                ack(c, [j[0] for j in jobs])

        def all_acked():
            with lock:
                return all(j in acked or j in acked_in_doubt for j in published)

        threads = [threading.Thread(target=publisher, args=(k,), daemon=True)
                   for k in range(PUBLISHERS)]
        threads += [threading.Thread(target=consumer, daemon=True) for _ in range(CONSUMERS)]
        for t in threads:
            t.start()

        kills = []
        for at in KILL_AT:
            while time.monotonic() < publish_deadline:
                with lock:
                    if len(published) >= at:
                        break
                time.sleep(0.005)
            else:
                break
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            with lock:
                kills.append(len(published))
            time.sleep(0.2)
            _, proc = self.servers.start_deferq(redis_port, port=port)
        for t in threads[:PUBLISHERS]:
            t.join(max(0.0, publish_deadline - time.monotonic()) + 5)
        publishing_done.set()
        t_published = time.monotonic()
        while time.monotonic() < drain_deadline and not all_acked():
            time.sleep(0.1)
        t_drained = time.monotonic()
        stop.set()
        for t in threads[PUBLISHERS:]:
            t.join(6)  # a consumer waits at most its socket timeout (5 s)

        # ---- The verdict, from Redis itself.
        r = client(redis_port)
        remaining = [j for j in published if j not in acked and j not in acked_in_doubt]
        where = locate_jobs(r, Q, remaining)
        by_state = collections.Counter(where.values())
        lost = sorted(j for j, s in where.items() if s is None)
        unexpected_state = sorted(j for j, s in where.items() if s not in (None, 'ready',
                                                                           'leased', 'delayed'))
        stat = qstat(client(port), Q)
        gauges = {k.decode(): v.decode() for k, v in r.hgetall(queue_prefix(Q) + b's').items()}
        stuck_leases = r.zcount(queue_prefix(Q) + b'l', '-inf',
                                int(time.time() * 1000) - 1000 * (TTR + 2))
        unknown_deliveries = [j for j in delivered if j not in published]
        redelivered = sum(1 for n in delivered.values() if n > 1)
        wrong_payload = [(j, delivered_payload[j], published[j]) for j in published
                         if j in delivered_payload and delivered_payload[j] != published[j]]

        print(f'\n  at-least-once: {len(published)} acknowledged publishes of {N} '
              f'(deferq SIGKILLed after {kills} acknowledged publishes), '
              f'publish {t_published - t0:.1f}s, drain {t_drained - t_published:.1f}s')
        print(f'  clients: {dict(sorted(stats.items()))}')
        print(f'  deliveries {sum(delivered.values())} of {len(delivered)} ids '
              f'({redelivered} redelivered, {len(unknown_deliveries)} ids from unacknowledged '
              f'publishes); ACKed {len(acked)}, ACK in doubt {len(acked_in_doubt)}')
        print(f'  leases whose CONSUME reply was lost in a kill (consumed_total - deliveries): '
              f'{stat["consumed_total"] - sum(delivered.values())}')
        print(f'  not ACKed: {len(remaining)} -> in Redis by state {dict(by_state)}; '
              f'lost {len(lost)}')
        print(f'  QSTAT {stat}')
        print(f'  Redis {queue_prefix(Q).decode()}s {gauges}; leases overdue by > 2 s: '
              f'{stuck_leases}')
        if errors:
            print('  first unexpected replies:\n    ' + '\n    '.join(errors))

        self.assertEqual(len(kills), len(KILL_AT), 'publishing stalled before the SIGKILLs')
        self.assertEqual(duplicate_ids, [], 'PUBLISH returned the same id twice')
        self.assertEqual(len(published), N, f'only {len(published)} of {N} publishes were '
                         f'acknowledged within 30 s; first errors: {errors[:5]}')
        self.assertEqual(lost, [], f'{len(lost)} acknowledged jobs were neither ACKed nor are in '
                         f'Redis (lost), e.g. {lost[:5]}')
        self.assertEqual(unexpected_state, [], 'acknowledged jobs not ACKed are not ready/leased/'
                         f'delayed: {[(j, where[j]) for j in unexpected_state[:5]]}')
        self.assertEqual(wrong_payload, [], 'a delivery carried another payload than published')
        self.assertEqual(payload_mismatch, [], 'redeliveries of one id carried different payloads')
        for j in unknown_deliveries:
            self.assertTrue(delivered_payload[j].startswith(b'job-'),
                            f'delivery {j} with payload {delivered_payload[j]!r} was never '
                            'published')
        # Liveness: leases that were never ACKed (a CONSUME reply lost in a SIGKILL) must come
        # back after their ttr, so every acknowledged job ends up ACKed.
        self.assertEqual(remaining, [], f'{len(remaining)} acknowledged jobs were not delivered '
                         f'and ACKed within {drain_deadline - t_published:.0f} s after the last '
                         f'publish (ttr {TTR} s); states {dict(by_state)}, first '
                         f'{[(j, where[j]) for j in remaining[:5]]}')
        self.assertEqual(errors, [], 'unexpected error replies')

    # ----------------------------------------------------------------------------------------
    def test_two_instances_one_queue(self):
        N = 2_000
        Q = 'shared'
        TTR = 120
        redis_port = self.servers.start_redis(appendonly=False)
        port_a, _ = self.servers.start_deferq(redis_port)
        port_b, _ = self.servers.start_deferq(redis_port)
        ports = {'A': port_a, 'B': port_b}
        t0 = time.monotonic()
        deadline = t0 + 60

        lock = threading.Lock()
        deliveries = collections.defaultdict(list)  # id -> [(instance, consumer, payload)]
        published = {}
        errors = []
        enough = threading.Event()
        stop = threading.Event()
        per_consumer = collections.Counter()

        def consumer(instance, k):
            c = client(ports[instance])
            count = 1 + 6 * (k % 2)  # half of them take one job, half COUNT 7
            while not stop.is_set():
                args = ['CONSUME', Q, 'TTR', TTR, 'TIMEOUT', '0.3']
                if k % 2:
                    args += ['COUNT', count]
                try:
                    jobs = parse_jobs(c.execute_command(*args), Q, counted=bool(k % 2))
                except (redis.RedisError, AssertionError) as e:
                    with lock:
                        errors.append(f'{instance}{k}: {e!r}')
                    time.sleep(0.05)
                    continue
                with lock:
                    for jid, payload, tries_left, _ in jobs:
                        deliveries[jid].append((instance, k, payload, tries_left))
                        per_consumer[f'{instance}{k}'] += 1
                    if len(deliveries) >= N:
                        enough.set()

        def publisher(instance, part):
            c = client(ports[instance])
            mine = list(range(part, N, 2))
            for start in range(0, len(mine), 50):
                pipe = c.pipeline(transaction=False)
                batch = mine[start:start + 50]
                for i in batch:
                    pipe.execute_command('PUBLISH', Q, f'shared-{i}')
                try:
                    ids = pipe.execute()
                except redis.RedisError as e:
                    with lock:
                        errors.append(f'publish via {instance}: {e!r}')
                    return
                with lock:
                    for i, jid in zip(batch, ids):
                        published[jid.decode()] = f'shared-{i}'.encode()

        consumers = [threading.Thread(target=consumer, args=(inst, k), daemon=True)
                     for inst in ('A', 'B') for k in range(3)]
        for t in consumers:
            t.start()
        time.sleep(0.3)  # let them block first: publishes must wake them, on either instance
        publishers = [threading.Thread(target=publisher, args=(inst, n), daemon=True)
                      for n, inst in enumerate(('A', 'B'))]
        for t in publishers:
            t.start()
        for t in publishers:
            t.join(max(0.0, deadline - time.monotonic()))
        enough.wait(max(0.0, deadline - 20 - time.monotonic()))
        t_all = time.monotonic()
        time.sleep(1.5)  # any second delivery of a live lease would show up now
        stop.set()
        for t in consumers:
            t.join(5)

        twice = {j: d for j, d in deliveries.items() if len(d) > 1}
        missing = [j for j in published if j not in deliveries]
        unknown = [j for j in deliveries if j not in published]
        wrong_payload = [j for j, d in deliveries.items()
                         if j in published and any(p != published[j] for _, _, p, _ in d)]
        by_instance = collections.Counter(d[0][0] for d in deliveries.values())
        stats = {name: qstat(client(p), Q) for name, p in ports.items()}
        print(f'\n  two instances: {len(published)} published, {len(deliveries)} ids delivered in '
              f'{t_all - t0:.1f}s, by instance {dict(by_instance)}, by consumer '
              f'{dict(sorted(per_consumer.items()))}; delivered twice {len(twice)}, '
              f'missing {len(missing)}')
        print(f'  QSTAT via A {stats["A"]}')
        if errors:
            print('  errors: ' + '; '.join(errors[:10]))

        self.assertEqual(errors, [])
        self.assertEqual(len(published), N)
        self.assertEqual(twice, {}, 'ids handed to two consumers while their lease was live')
        self.assertEqual(unknown, [], 'deliveries of ids that were never published')
        self.assertEqual(missing, [], f'{len(missing)} jobs never delivered')
        self.assertEqual(wrong_payload, [], 'deliveries with another payload than published')
        self.assertTrue(all(d[0][3] == 0 for d in deliveries.values()),
                        'tries_left of a TRIES 1 job after its delivery must be 0')
        self.assertGreater(by_instance['A'], 0, 'no job was delivered through instance A')
        self.assertGreater(by_instance['B'], 0, 'no job was delivered through instance B')
        for name in ports:
            self.assertEqual((stats[name]['ready'], stats[name]['leased'],
                              stats[name]['published_total'], stats[name]['consumed_total']),
                             (0, N, N, N), f'QSTAT via {name}')

        # ACK through both instances (alternating) finishes every job exactly once.
        ca, cb = client(port_a), client(port_b)
        ids = sorted(published)
        pipes = {0: ca.pipeline(transaction=False), 1: cb.pipeline(transaction=False)}
        for n, jid in enumerate(ids):
            pipes[n % 2].execute_command('ACK', Q, jid)
        counts = pipes[0].execute() + pipes[1].execute()
        self.assertEqual(counts, [1] * N, 'ACK of a leased job must count 1')
        self.assertEqual(ca.execute_command('ACK', Q, *ids[:100]), 0, 'second ACK counts 0')
        final = qstat(cb, Q)
        self.assertEqual((final['ready'], final['leased'], final['acked_total']), (0, 0, N))


# --------------------------------------------------------------------------------------------


def main():
    return runner.main_with_deferq(__name__, sys.argv, 'test_durability.py /path/to/deferq [-v] [-k NAME]')


if __name__ == '__main__':
    sys.exit(main())
