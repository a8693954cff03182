#!/usr/bin/python3
"""deferq through redis-py's generic command API (execute_command), against a running deferq.

    DEFERQ_PORT=P /usr/bin/python3 tests/clients/test_redis_py.py [-v]

Run by run_clients.sh, which starts redis-server and deferq. Covers docs/commands.md PUBLISH / CONSUME /
ACK / QSTAT replies as redis-py parses them, blocking CONSUME (timeout, and wake-up by a PUBLISH
from redis-cli; a redis-cli blocked in CONSUME woken by a PUBLISH from redis-py), COUNT, delayed
jobs, publish options, binary payloads, the transactional pipeline() (MULTI/EXEC, and EXECABORT
after a syntax error), a plain pipeline and info('queues') (docs/commands.md). redis-py 4.3 speaks
RESP2 only. UrlAuthTest connects with redis://namespace:token@host:port to the deferq with
auth.required = true (DEFERQ_AUTH_URL). Each test uses its own queue. Ends with "N passed, M failed"; exits
non-zero on any failure. Needs redis-py (Debian's python3-redis), hence /usr/bin/python3.
"""

import os
import re
import subprocess
import sys
import threading
import time
import unittest

import redis

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))

from dqtest import runner  # noqa: E402

PORT = int(os.environ.get('DEFERQ_PORT', '0'))
AUTH_URL = os.environ.get('DEFERQ_AUTH_URL', '')  # redis://namespace:token@127.0.0.1:port
ID_RE = re.compile(rb'^[0-9A-HJKMNP-TV-Z]{26}$')  # 26 characters of Crockford base32
DEFAULT_TTL = 86400


def redis_cli(*args, **kw):
    return subprocess.run(['redis-cli', '-h', '127.0.0.1', '-p', str(PORT), *map(str, args)],
                          capture_output=True, check=True, timeout=20, **kw).stdout


def info_key(queue):
    """The INFO key of a queue of namespace `default` (docs/commands.md): ':' written as %3A."""
    return 'queue_default/' + queue.replace(':', '%3A')


class RedisPyTest(unittest.TestCase):

    def setUp(self):
        self.r = redis.Redis(host='127.0.0.1', port=PORT, socket_timeout=15)
        self.q = f'py-{self._testMethodName[5:]}-{os.urandom(4).hex()}'

    def tearDown(self):
        self.r.close()

    def cmd(self, *args):
        return self.r.execute_command(*args)

    def assertJob(self, job, id_, payload, tries_left, ttl=DEFAULT_TTL, max_ttl=None, attempt=1):
        """A job is [queue, id, payload, tries_left, ttl_left_s, attempt, elapsed_ms] (docs/commands.md)."""
        self.assertIsInstance(job, list)
        self.assertEqual(len(job), 7, f'{job!r}: [queue, id, payload, tries_left, ttl_left_s, '
                         'attempt, elapsed_ms]')
        self.assertEqual(job[:4], [self.q.encode(), id_, payload, tries_left])
        self.assertIsInstance(job[4], int)
        self.assertTrue(ttl - 10 < job[4] <= (max_ttl or ttl), f'ttl_left_s {job[4]}')
        self.assertEqual(job[5], attempt, f'attempt of {job!r}')
        self.assertIsInstance(job[6], int)
        self.assertTrue(0 <= job[6] < 60000, f'elapsed_ms {job[6]}')

    def qstat(self):
        flat = self.cmd('QSTAT', self.q)
        self.assertIsInstance(flat, list)
        return {flat[i].decode(): flat[i + 1] for i in range(0, len(flat), 2)}

    def test_publish_consume_ack(self):
        id_ = self.cmd('PUBLISH', self.q, 'hello redis-py')
        self.assertRegex(id_, ID_RE)
        self.assertJob(self.cmd('CONSUME', self.q, 'TTR', 30), id_, b'hello redis-py', 0)
        self.assertIsNone(self.cmd('CONSUME', self.q), 'an empty queue answers null')
        self.assertEqual(self.cmd('ACK', self.q, id_), 1)
        self.assertEqual(self.cmd('ACK', self.q, id_), 0, 'a second ACK counts 0')
        s = self.qstat()
        self.assertEqual(list(s), ['ready', 'delayed', 'leased', 'dead', 'published_total',
                                   'consumed_total', 'acked_total', 'expired_total',
                                   'dead_total', 'paused', 'schedules'])
        self.assertEqual((s['ready'], s['leased'], s['published_total'], s['consumed_total'],
                          s['acked_total']), (0, 0, 1, 1, 1))

    def test_tries_and_lease(self):
        id_ = self.cmd('PUBLISH', self.q, 'p', 'TRIES', 3)
        self.assertJob(self.cmd('CONSUME', self.q, 'TTR', 30, 'TIMEOUT', 1), id_, b'p', 2)
        s = self.qstat()
        self.assertEqual((s['ready'], s['leased']), (0, 1))
        self.assertEqual(self.cmd('ACK', self.q, id_), 1)

    def test_nack_reason_is_shown_by_job_and_the_dead_letter(self):
        id_ = self.cmd('PUBLISH', self.q, 'p')
        self.cmd('CONSUME', self.q)
        try:
            raise ConnectionError('smtp down \u2709')
        except ConnectionError as e:
            self.assertEqual(self.cmd('NACK', self.q, id_, 'REASON', str(e)), 1)
        job = self.cmd('JOB', self.q, id_)
        info = dict(zip(job[0::2], job[1::2]))
        self.assertEqual((info[b'last_error'], info[b'last_error_attempt']),
                         ('smtp down \u2709'.encode(), 1))
        dead = self.cmd('DEADLETTER', 'PEEK', self.q, 'WITHERRORS')
        self.assertEqual(dead[0][7:9], ['smtp down \u2709'.encode(), 1])

    def test_dedup_window_capped_jittered_backoff_and_snooze(self):
        q = self.q
        args = ('PUBLISH', q, b'charge-7', 'ID', 'charge-7', 'KEEP', 3600, 'TRIES', 5,
                'BACKOFF', 2, 'MAX', 60, 'JITTER')
        self.assertEqual(self.cmd(*args), b'charge-7')
        job = self.cmd('CONSUME', q)
        self.assertEqual((job[1], job[3], job[5]), (b'charge-7', 4, 1))
        self.assertEqual(self.cmd('NACK', q, b'charge-7', 'DELAY', 30, 'KEEPTRY'), 1)
        info = dict(zip(*[iter(self.cmd('JOB', q, b'charge-7'))] * 2))
        self.assertEqual((info[b'state'], info[b'tries_left']), (b'delayed', 5), 'no try spent')
        self.assertEqual(self.cmd('ACK', q, b'charge-7'), 1)
        self.assertEqual(self.cmd(*args), b'charge-7')  # held: nothing created
        self.assertIsNone(self.cmd('JOB', q, b'charge-7'))

    def test_a_fenced_ack_of_a_stale_lease_is_refused(self):
        id_ = self.cmd('PUBLISH', self.q, b'p', 'TRIES', 2)
        queue, id_, payload, tries_left, ttl_left_s, attempt, elapsed_ms = self.cmd(
            'CONSUME', self.q)
        self.assertEqual(self.cmd('NACK', self.q, id_), 1)
        with self.assertRaisesRegex(redis.ResponseError, '^STALE'):
            self.cmd('ACK', self.q, id_, 'ATTEMPT', attempt)
        attempt = self.cmd('CONSUME', self.q)[5]
        self.assertEqual(self.cmd('ACK', self.q, id_, 'ATTEMPT', attempt), 1)

    def test_call_answered_by_a_worker_with_a_result(self):
        q = self.q
        w = redis.Redis(host='127.0.0.1', port=PORT)   # the worker's own connection

        def worker():
            job = w.execute_command('CONSUME', q, 'TIMEOUT', 5)
            w.execute_command('ACK', q, job[1], 'RESULT', b'{"ok": true}')

        t = threading.Thread(target=worker, daemon=True)
        t.start()
        result = self.cmd('CALL', q, b'{"image": 42}', 'TIMEOUT', 30)
        self.assertEqual(result, b'{"ok": true}')
        t.join(10)
        id_ = self.cmd('PUBLISH', q, b'report', 'RETAIN', 600)   # keep the outcome 10 minutes
        job = self.cmd('CONSUME', q)
        self.cmd('ACK', q, job[1], 'RESULT', b'42 rows', 'ATTEMPT', job[5])
        self.assertEqual(self.cmd('WAITJOB', q, id_, 'TIMEOUT', 5), b'42 rows')
        with self.assertRaisesRegex(redis.ResponseError, '^TIMEOUT job'):
            self.cmd('CALL', q, b'nobody', 'TIMEOUT', 0.2)
        w.close()

    def test_priority_jumps_the_backlog(self):
        self.cmd('PUBLISH', self.q, b'nightly-batch')
        id_ = self.cmd('PUBLISH', self.q, b'customer-42', 'PRIORITY', 5)
        job = self.cmd('CONSUME', self.q)
        self.assertEqual((job[1], job[2]), (id_, b'customer-42'))
        info = dict(zip(*[iter(self.cmd('JOB', self.q, id_))] * 2))
        self.assertEqual(info[b'priority'], 5)

    def test_cron_in_a_time_zone(self):
        id_ = self.cmd('PUBLISH', self.q, b'digest', 'CRON', '0 9 * * mon-fri', 'TZ',
                       'Europe/Paris')
        job = self.cmd('JOB', self.q, id_)
        info = dict(zip(job[0::2], job[1::2]))
        self.assertEqual((info[b'state'], info[b'cron'], info[b'tz']),
                         (b'delayed', b'0 9 * * mon-fri', b'Europe/Paris'))
        self.assertEqual(info[b'due_ms'] % 3_600_000, 0)  # 09:00 in Paris: 08:00 or 07:00 UTC
        self.assertEqual(self.cmd('CANCEL', self.q, id_), 1)

    def test_count_and_multi_ack(self):
        ids = [self.cmd('PUBLISH', self.q, p) for p in (b'a', b'b', b'c')]
        jobs = self.cmd('CONSUME', self.q, 'COUNT', 10, 'TTR', 30)
        self.assertEqual(len(jobs), 3)
        for job, id_, p in zip(jobs, ids, (b'a', b'b', b'c')):
            self.assertJob(job, id_, p, 0)
        self.assertEqual(self.cmd('ACK', self.q, *ids, 'no-such-id'), 3)
        self.assertIsNone(self.cmd('CONSUME', self.q, 'COUNT', 10, 'TIMEOUT', '0.2'))

    def test_binary_payload(self):
        payload = bytes(range(256)) * 4
        id_ = self.cmd('PUBLISH', self.q, payload)
        self.assertJob(self.cmd('CONSUME', self.q, 'TTR', 30), id_, payload, 0)
        self.assertEqual(self.cmd('ACK', self.q, id_), 1)

    def test_pipelined(self):
        pipe = self.r.pipeline(transaction=False)
        for i in range(100):
            pipe.execute_command('PUBLISH', self.q, f'job-{i}')
        ids = pipe.execute()
        self.assertEqual(len(set(ids)), 100)
        pipe = self.r.pipeline(transaction=False)
        for _ in range(100):
            pipe.execute_command('CONSUME', self.q, 'TTR', 30)
        jobs = pipe.execute()
        self.assertEqual([j[1] for j in jobs], ids, 'FIFO order')
        self.assertEqual([j[2] for j in jobs], [f'job-{i}'.encode() for i in range(100)])
        self.assertEqual(self.cmd('ACK', self.q, *ids), 100)

    def test_publish_with_options_and_blocking_consume(self):
        key = f'order-{os.urandom(4).hex()}'
        t0 = time.monotonic()
        self.assertEqual(self.cmd('PUBLISH', self.q, 'later', 'PDELAY', 300, 'TTL', 600,
                                  'TRIES', 3, 'ID', key), key.encode())
        self.assertEqual(self.cmd('PUBLISH', self.q, 'again', 'ID', key), key.encode(),
                         'ID makes publish idempotent')
        job = self.cmd('CONSUME', self.q, 'TTR', 30, 'TIMEOUT', 5)
        took = time.monotonic() - t0
        self.assertJob(job, key.encode(), b'later', 2, ttl=600)
        self.assertTrue(0.25 <= took < 3, f'delivered after {took:.3f} s, due after 0.3 s')
        self.assertEqual(self.cmd('ACK', self.q, key), 1)

    def test_transaction_of_three_publishes(self):
        """pipeline() is transactional by default: MULTI ... EXEC."""
        pipe = self.r.pipeline()
        for p in ('m1', 'm2', 'm3'):
            pipe.execute_command('PUBLISH', self.q, p)
        ids = pipe.execute()
        self.assertEqual(len(ids), 3, ids)
        for id_ in ids:
            self.assertRegex(id_, ID_RE)
        s = self.qstat()
        self.assertEqual((s['ready'], s['published_total']), (3, 3))
        jobs = self.cmd('CONSUME', self.q, 'COUNT', 10, 'TTR', 30)
        self.assertEqual([j[1] for j in jobs], ids)
        self.assertEqual(self.cmd('ACK', self.q, *ids), 3)
        self.assertTrue(self.r.ping(), 'the connection is in step after EXEC')

    def test_syntax_error_inside_transaction_creates_no_job(self):
        pipe = self.r.pipeline()
        pipe.execute_command('PUBLISH', self.q, 'a')
        pipe.execute_command('PUBLISH', self.q, 'b', 'NOSUCHOPTION', 1)
        pipe.execute_command('PUBLISH', self.q, 'c')
        with self.assertRaisesRegex(redis.ResponseError, r'Command # 2 \(PUBLISH .*syntax error'):
            pipe.execute()
        s = self.qstat()
        self.assertEqual((s['ready'], s['published_total']), (0, 0))
        self.assertTrue(self.r.ping(), 'the connection is in step after EXECABORT')

    def test_info_shows_two_queues(self):
        """redis-py's info() keeps one entry per key: each queue needs its own (docs/commands.md)."""
        queues = [f'{self.q}:info:a', f'{self.q}:info:b']
        for q in queues:
            # Taken by a consumer waiting before it falls due, it records lateness (one nobody
            # waits for may be moved by a read instead: docs/metrics.md).
            id_ = self.cmd('PUBLISH', q, 'due', 'PDELAY', 300)
            job = self.cmd('CONSUME', q, 'TTR', 30, 'TIMEOUT', 5)
            self.assertEqual(job[:3], [q.encode(), id_, b'due'])
            self.assertEqual(self.cmd('ACK', q, id_), 1)
        info = self.r.info('queues')
        for q in queues:
            entry = info.get(info_key(q))
            self.assertIsInstance(entry, dict, f'{info_key(q)} in {info!r}')
            self.assertEqual(entry['lateness_count'], 1, entry)
            self.assertIsInstance(entry['lateness_p99_ms'], int, entry)

    def test_pubsub_habit_publish_creates_a_job(self):
        """r.publish(channel, message) sends PUBLISH: deferq creates a job and answers its id."""
        id_ = self.r.publish(self.q, 'not a broadcast')
        self.assertRegex(id_, ID_RE)
        self.assertJob(self.cmd('CONSUME', self.q, 'TTR', 30), id_, b'not a broadcast', 0)
        self.assertEqual(self.cmd('ACK', self.q, id_), 1)

    def test_consume_timeout(self):
        t0 = time.monotonic()
        self.assertIsNone(self.cmd('CONSUME', self.q, 'TIMEOUT', '0.3'))
        took = time.monotonic() - t0
        self.assertTrue(0.25 <= took < 2, f'returned after {took:.3f} s')

    def test_delayed_job_wakes_blocked_consumer(self):
        id_ = self.cmd('PUBLISH', self.q, 'later', 'PDELAY', 400)
        t0 = time.monotonic()
        self.assertIsNone(self.cmd('CONSUME', self.q), 'not before its due time')
        job = self.cmd('CONSUME', self.q, 'TTR', 30, 'TIMEOUT', 5)
        took = time.monotonic() - t0
        # deferq extends the default ttl (not an explicit TTL) by the delay, rounded up to whole
        # seconds, so that a default job can be delayed longer than the default ttl.
        self.assertJob(job, id_, b'later', 0, max_ttl=DEFAULT_TTL + 1)
        self.assertTrue(0.35 <= took < 2, f'delivered after {took:.3f} s, due after 0.4 s')
        self.assertEqual(self.cmd('ACK', self.q, id_), 1)

    def test_blocked_redis_py_woken_by_redis_cli_publish(self):
        result = {}

        def consume():
            c = redis.Redis(host='127.0.0.1', port=PORT, socket_timeout=15)
            try:
                result['job'] = c.execute_command('CONSUME', self.q, 'TTR', 30, 'TIMEOUT', 10)
            except Exception as e:  # reported by the main thread
                result['error'] = e
            result['t'] = time.monotonic()
            c.close()

        t = threading.Thread(target=consume)
        t.start()
        time.sleep(0.3)
        self.assertTrue(t.is_alive(), f'CONSUME returned before any publish: {result}')
        t_pub = time.monotonic()
        id_ = redis_cli('PUBLISH', self.q, 'from redis-cli').strip()
        t.join(12)
        self.assertNotIn('error', result)
        self.assertJob(result['job'], id_, b'from redis-cli', 0)
        woke = result['t'] - t_pub
        self.assertLess(woke, 1.0, f'woken {woke:.3f} s after the publish')
        self.assertEqual(self.cmd('ACK', self.q, id_), 1)

    def test_blocked_redis_cli_woken_by_redis_py_publish(self):
        cli = subprocess.Popen(['redis-cli', '-h', '127.0.0.1', '-p', str(PORT), 'CONSUME',
                                self.q, 'TTR', '30', 'TIMEOUT', '10'], stdout=subprocess.PIPE)
        try:
            time.sleep(0.3)
            self.assertIsNone(cli.poll(), 'redis-cli CONSUME returned before any publish')
            t_pub = time.monotonic()
            id_ = self.cmd('PUBLISH', self.q, 'from redis-py')
            out, _ = cli.communicate(timeout=12)
            woke = time.monotonic() - t_pub
        finally:
            if cli.poll() is None:
                cli.kill()
                cli.wait()
        self.assertEqual(cli.returncode, 0)
        lines = out.split(b'\n')
        self.assertEqual(lines[:4], [self.q.encode(), id_, b'from redis-py', b'0'], out)
        self.assertLess(woke, 1.0, f'woken {woke:.3f} s after the publish')
        self.assertEqual(self.cmd('ACK', self.q, id_), 1)

    def test_error_replies(self):
        with self.assertRaisesRegex(redis.ResponseError,
                                    '^value is not an integer or out of range$|'
                                    '^ERR value is not an integer or out of range$'):
            self.cmd('PUBLISH', self.q, 'x', 'TRIES', 0)
        with self.assertRaisesRegex(redis.ResponseError, 'timeout is negative'):
            self.cmd('CONSUME', self.q, 'TIMEOUT', -1)
        with self.assertRaisesRegex(redis.ResponseError, 'syntax error'):
            self.cmd('PUBLISH', self.q, 'x', 'BOGUS', 1)
        self.assertTrue(self.r.ping())


class UrlAuthTest(unittest.TestCase):
    """redis.Redis.from_url('redis://namespace:token@host:port') against the deferq with
    auth.required = true that run_clients.sh starts (DEFERQ_AUTH_URL): redis-py sends
    AUTH namespace token on connect (docs/commands.md)."""

    def setUp(self):
        self.assertTrue(AUTH_URL, 'DEFERQ_AUTH_URL is not set (run_clients.sh sets it)')
        self.q = f'py-url-{os.urandom(4).hex()}'

    def test_url_authenticated_client_publishes_consumes_and_acks(self):
        r = redis.Redis.from_url(AUTH_URL, socket_timeout=15)
        other = redis.Redis.from_url(AUTH_URL, socket_timeout=15)
        try:
            jid = r.execute_command('PUBLISH', self.q, 'hello')
            self.assertRegex(jid, ID_RE)
            self.assertIn(self.q.encode(), r.execute_command('QUEUES'))
            job = other.execute_command('CONSUME', self.q, 'TIMEOUT', 2)
            self.assertEqual(job[1], jid)
            self.assertEqual(job[2], b'hello')
            self.assertEqual(other.execute_command('ACK', self.q, jid), 1)
            # A blocked consumer is woken by a publish from the other connection.
            got = []
            t = threading.Thread(target=lambda: got.append(
                other.execute_command('CONSUME', self.q, 'TIMEOUT', 5)))
            t.start()
            time.sleep(0.2)
            jid2 = r.execute_command('PUBLISH', self.q, 'later')
            t.join(10)
            self.assertEqual(got[0][1], jid2)
        finally:
            r.close()
            other.close()

    def test_wrong_token_and_no_credentials_are_refused(self):
        wrong = AUTH_URL.replace('@', 'x@', 1)
        # redis-py 4.3 raises WRONGPASS as a ResponseError (later versions AuthenticationError).
        with self.assertRaises((redis.ResponseError, redis.AuthenticationError)) as cm:
            redis.Redis.from_url(wrong, socket_timeout=15).ping()
        self.assertIn('WRONGPASS invalid username-password pair', str(cm.exception))
        anon = redis.Redis.from_url(AUTH_URL.split('//')[0] + '//' + AUTH_URL.split('@')[1])
        try:
            # redis-py raises NOAUTH as AuthenticationError (a ConnectionError).
            with self.assertRaises((redis.ResponseError, redis.AuthenticationError)) as cm:
                anon.execute_command('PUBLISH', self.q, 'x')
            self.assertIn('Authentication required', str(cm.exception))
        finally:
            anon.close()


def main():
    if not PORT:
        print('DEFERQ_PORT is not set', file=sys.stderr)
        return 2
    return runner.main(__name__, sys.argv)


if __name__ == '__main__':
    sys.exit(main())
