"""Script tests of batch.lua (several calls of one script on one queue in one call) and acks.lua
(several one-id ACKs in one call).

deferq sends a client's pipelined commands of one kind on one queue as one batch call, and a
pipeline of one-id ACKs of one ms as one acks call (src/persist/call_batch.h). Either must do
exactly what the same calls one by one do: the same replies, the same keys, the same counters.
Run by tests/scripts/test_scripts.py.
"""

import random

import redis

from scriptlib import (CALLED, DUE, Queue, REGISTRY, SEC, SPARSE, T, ScriptTest, check_invariants,
                       custom_key, gen_key, hint, record)


def batch_args(calls, queue_of=None, queues=1):
    """batch.lua's ARGV after the script name: the queue count, then each call's queue number,
    argument count and arguments. queue_of: each call's queue number (default: all on queue 1)."""
    queue_of = queue_of or [1] * len(calls)
    args = [queues]
    for q, call in zip(queue_of, calls):
        args += [q, len(call)] + list(call)
    return args


class BatchTest(ScriptTest):
    def batch(self, script, calls, q=None):
        q = q or self.q
        return q.call('batch', script, *batch_args(calls))

    def publish_args(self, now, k, due, payload=b'p', mode=''):
        derivable = '1' if due > now and len(k) == 16 and k[0] != 35 and due == int.from_bytes(
            k[:6], 'big') else '0'
        return [now, k, record(now, payload=payload), due, mode, derivable]

    def test_publishes_into_one_second_are_stored_as_one_by_one(self):
        self.fill_staging()  # in the second's bucket
        ks = [gen_key(T + 5000 + i) for i in range(20)]
        reply = self.batch('publish', [self.publish_args(T, k, T + 5000 + i)
                                       for i, k in enumerate(ks)])
        self.assertEqual(reply, [[1]] * 20)
        self.stat(delayed=20 + SPARSE, published_total=20 + SPARSE)
        self.assertEqual(self.r.zrange(self.q.key(b'b'), 0, -1), [str(SEC + 5).encode()])
        self.assertEqual(len(self.q.bucket(SEC + 5)), 20)
        # Pumped and consumed like any others.
        self.assertEqual(self.q.pump(T + 5019)['made'], 20)
        left, jobs = self.q.consume(T + 5019, count=20)
        self.assertEqual([j['id'] for j in jobs], ks)

    def test_each_call_gets_its_own_reply_and_a_bad_one_changes_nothing(self):
        k1, k2, k3 = gen_key(T), custom_key(b'x'), gen_key(T + 2000)
        calls = [self.publish_args(T, k1, T), self.publish_args(T, k2, T + 1500, mode='id'),
                 [T, b'', record(T), T, '', '0'],  # no K: refused by publish.lua
                 self.publish_args(T, k2, T + 1500, mode='id'),  # exists now: {0}
                 self.publish_args(T, k3, T + 2000)]
        reply = self.batch('publish', calls)
        self.assertEqual(reply[0], [1])
        self.assertEqual(reply[1], [1])
        self.assertIsInstance(reply[2], redis.ResponseError)
        self.assertIn('deferq publish: bad arguments', str(reply[2]))
        self.assertEqual(reply[3], [0])
        self.assertEqual(reply[4], [1])
        self.stat(ready=1, delayed=2, published_total=3)

    def test_consumes_and_acks(self):
        ks = [self.pub_ready(T + i) for i in range(5)]
        reply = self.batch('consume', [[T + 10, 30000, 2], [T + 10, 30000, 2], [T + 10, 30000, 2],
                                       [T + 10, 30000, 2]])
        self.assertEqual([r[0] for r in reply], [3, 1, 0, 0])
        got = [r[1::6] for r in reply]
        self.assertEqual(got, [ks[0:2], ks[2:4], ks[4:5], []])
        self.stat(ready=0, leased=5, consumed_total=5)
        reply = self.batch('ack', [[T + 20, k, hint(k)] for k in ks] + [[T + 20, ks[0], hint(ks[0])]])
        self.assertEqual(reply, [1, 1, 1, 1, 1, 0])
        self.stat(ready=0, leased=0, acked_total=5)
        # The queue holds nothing: it left the registry.
        self.assertFalse(self.r.sismember(b'dq:queues', self.q.tag))

    def test_acks_answer_each_pair_as_an_ack_of_its_own(self):
        """acks.lua against the same ACKs one by one on another queue: leased, ready, delayed and
        recurring jobs, a K twice (a recurring job's second ACK finds its next occurrence), a
        missing K and a derivable_sec that does not match (an error for that pair alone)."""
        one = Queue(self.r, self.shas, name='one', checker=lambda q: check_invariants(self, q))
        leased = [gen_key(T + i) for i in range(3)]
        ready, delayed, every = gen_key(T + 6), gen_key(T + 4000), gen_key(T + 7)
        for q in (self.q, one):
            for i, k in enumerate(leased):
                self.assertEqual(q.publish(T + i, k, record(T + i)), [1])
            self.assertEqual(len(q.consume(T + 5, 30000, count=3)[1]), 3)
            self.assertEqual(q.publish(T + 6, ready, record(T + 6)), [1])
            self.assertEqual(q.publish(T, delayed, record(T), T + 4000), [1])
            self.assertEqual(q.publish(T + 7, every, record(T + 7, every=60)), [1])
        missing = gen_key(T + 9)
        pairs = [(k, hint(k)) for k in leased + [ready, delayed, every, every, missing, leased[0]]]
        pairs.insert(2, (leased[2], str(SEC + 99)))  # not K's second: an error, nothing changes
        singles = []
        for k, h in pairs:
            try:
                singles.append(one.call('ack', T + 10, k, h))
            except redis.ResponseError as e:
                singles.append('error: %s' % e)
        got = self.q.call('acks', T + 10, *[x for pair in pairs for x in pair])
        got = ['error: %s' % g if isinstance(g, redis.ResponseError) else g for g in got]
        self.assertEqual(got, singles)
        self.assertEqual(got, [1, 1, 'error: deferq ack: derivable_sec does not match K', 1, 1,
                               1, 1, 1, 0, 0])
        self.assertEqual(self.q.qstat(), one.qstat())
        self.assertEqual(self.q.job(T + 10, every), one.job(T + 10, every))
        with self.assertRaises(redis.ResponseError):
            self.q.call('acks', T + 10)  # no pair
        with self.assertRaises(redis.ResponseError):
            self.q.call('acks', T + 10, leased[0])  # half a pair

    def test_cancels_that_empty_a_bucket_and_the_queue(self):
        ks = [self.pub_delayed(T, T + 3000 + i) for i in range(3)]
        reply = self.batch('cancel', [[T, k, hint(k)] for k in ks])
        self.assertEqual(reply, [1, 1, 1])
        self.stat(delayed=0, cancelled_total=3, published_total=3)
        self.assertEqual(self.r.zcard(self.q.key(b'b')), 0)
        self.assertFalse(self.r.sismember(b'dq:queues', self.q.tag))

    def test_a_batch_that_fails_midway_leaves_no_batch_state_to_the_next_call(self):
        """The batch state lives in library variables: a batch aborted by a Lua error (here a
        WRONGTYPE index part met by its second ACK) must not leave it to the next call, which
        would count into it and never write its gauges."""
        a, b, c = (self.pub_ready(T + i) for i in range(3))
        self.lease_one(T + 5, a)
        missing = custom_key(b'zz')
        self.r.set(self.q.index_key(missing), b'not a hash')
        with self.assertRaises(redis.ResponseError):
            self.batch('ack', [[T + 10, a, hint(a)], [T + 10, missing, hint(missing)]])
        self.r.delete(self.q.index_key(missing))
        # The first ACK's writes stay (Redis does not roll a script back); its acked_total,
        # added up for the batch's end, is lost with the batch.
        left, jobs = self.q.consume(T + 20, count=1)
        self.assertEqual([j['id'] for j in jobs], [b])
        self.assertEqual(left, 1)
        self.stat(ready=1, leased=1, consumed_total=2)
        self.assertEqual(self.r.hget(self.q.key(b's'), b'ready'), b'1')
        self.assertEqual(self.q.peek(T + 20)[0]['id'], c)

    def test_nacks_and_touches(self):
        ks = [self.pub_ready(T) for _ in range(3)]
        self.q.consume(T, count=3)
        self.assertEqual(self.batch('touch', [[T + 5, k, 60000] for k in ks]), [1, 1, 1])
        self.assertEqual(self.batch('nack', [[T + 6, k, ''] for k in ks[:2]]), [1, 1])
        self.stat(ready=0, leased=1, dead=2, nacked_total=2)  # one try each: nacked to dead

    def test_malformed_batches_are_refused_whole(self):
        k = gen_key(T)
        good = self.publish_args(T, k, T)
        for args in (['nope'] + batch_args([good]),  # not a batchable script
                     ['pump', 1, T],                   # nor is the pump
                     ['publish'],                      # no call
                     ['publish', 7] + good,            # more queues than keys
                     ['publish', 'x'] + good,          # not a queue count
                     ['publish', 1, 2, len(good)] + good,  # a queue past the count
                     ['publish', 1, 1, 9] + good,      # an argument count past the end
                     ['publish', 1, 1, 'x'] + good):   # not an argument count
            with self.assertRaises(redis.ResponseError):
                self.q.call('batch', *args)
        self.stat(ready=0, published_total=0)
        self.assertEqual(self.r.dbsize(), 0)

    def test_random_batches_equal_the_same_calls_one_by_one(self):
        """Random runs of calls, batched by script on one queue and one by one on another: the
        replies, every job, every counter and the registry agree (several seeds: a batch keeps
        the ready and dead gauges and the registry check in Lua until it ends)."""
        for seed in (8, 9, 10, 11, 12):
            with self.subTest(seed=seed):
                self.r.flushall()
                self.random_batches(seed)

    def test_a_batch_over_several_queues_equals_the_same_calls_one_by_one(self):
        """Calls of one script spread over three queues in one batch (as deferq sends a client's
        pipeline over many queues): replies, jobs, counters and the registry agree with the same
        calls made one by one on three other queues."""
        for seed in (21, 22, 23):
            with self.subTest(seed=seed):
                self.r.flushall()
                self.random_wide_batches(seed)

    def random_wide_batches(self, seed):
        rng = random.Random(seed)
        check = lambda q: check_invariants(self, q)  # noqa: E731
        one = [Queue(self.r, self.shas, name='o%d.%d' % (seed, i), checker=check)
               for i in range(3)]
        many = [Queue(self.r, self.shas, name='m%d.%d' % (seed, i), checker=check)
                for i in range(3)]
        now = T
        keys = [[], [], []]
        for _ in range(30):
            script = rng.choice(['publish', 'publish', 'consume', 'ack', 'nack', 'cancel'])
            calls, at = [], []
            for _ in range(rng.randint(1, 8)):
                qi = rng.randrange(3)
                if script == 'publish':
                    due = now + rng.choice([0, 0, 300, 2500])
                    k = gen_key(due)
                    keys[qi].append(k)
                    calls.append(self.publish_args(now, k, due))
                elif script == 'consume':
                    calls.append([now, 30000, rng.randint(1, 2)])
                elif not keys[qi]:
                    continue
                elif script in ('ack', 'cancel'):
                    k = rng.choice(keys[qi])
                    calls.append([now, k, hint(k)])
                else:
                    calls.append([now, rng.choice(keys[qi]), ''])
                at.append(qi)
            if not calls:
                continue
            singles = [one[qi].call(script, *c) for qi, c in zip(at, calls)]
            prefixes = [q.P for q in many]
            CALLED.add('batch')
            batched = self.r.fcall(self.shas['batch'], 5, *prefixes, REGISTRY, DUE, script,
                                   *batch_args(calls, [qi + 1 for qi in at], queues=3))
            for q in many:
                check_invariants(self, q)
            self.assertEqual(singles, batched, script)
            for a, b in zip(one, many):
                self.assertEqual(a.qstat(), b.qstat(), script)
                self.assertEqual(self.r.sismember(REGISTRY, a.tag), self.r.sismember(REGISTRY, b.tag))
            now += rng.choice([0, 7, 400, 1100])
            if rng.random() < 0.3:
                for a, b in zip(one, many):
                    self.assertEqual(a.pump(now), b.pump(now))

    def random_batches(self, seed):
        rng = random.Random(seed)
        one = Queue(self.r, self.shas, name='a%d' % seed,
                    checker=lambda q: check_invariants(self, q))
        many = Queue(self.r, self.shas, name='b%d' % seed,
                     checker=lambda q: check_invariants(self, q))
        now = T
        keys = []
        for _ in range(40):
            script = rng.choice(['publish', 'publish', 'consume', 'ack', 'nack', 'touch', 'cancel'])
            calls = []
            for _ in range(rng.randint(1, 6)):
                if script == 'publish':
                    custom = rng.random() < 0.3
                    due = now + rng.choice([0, 0, 300, 1500, 2500])
                    k = custom_key(b'c%d' % rng.randint(0, 30)) if custom else gen_key(due)
                    keys.append(k)
                    calls.append(self.publish_args(now, k, due,
                                                   mode=rng.choice(['', 'id', 'replace']) if custom else ''))
                elif script == 'consume':
                    calls.append([now, rng.choice([1000, 30000]), rng.randint(1, 3)])
                elif not keys:
                    continue
                elif script in ('ack', 'cancel'):
                    k = rng.choice(keys)
                    calls.append([now, k, hint(k)])
                elif script == 'nack':
                    calls.append([now, rng.choice(keys), rng.choice(['', '2000'])])
                else:
                    calls.append([now, rng.choice(keys), rng.choice(['', '5000'])])
            if not calls:
                continue
            singles = [one.call(script, *c) for c in calls]
            if script == 'ack' and rng.random() < 0.5:  # as deferq sends one-id ACKs of one ms
                batched = many.call('acks', now, *[x for c in calls for x in c[1:]])
            else:
                batched = self.batch(script, calls, q=many)
            self.assertEqual(singles, batched, script)
            self.assertEqual(one.qstat(), many.qstat(), script)
            self.assertEqual(self.r.sismember(b'dq:queues', one.tag),
                             self.r.sismember(b'dq:queues', many.tag), script)
            now += rng.choice([0, 7, 400, 1100])
            if rng.random() < 0.3:
                self.assertEqual(one.pump(now), many.pump(now))
        self.assertEqual(one.qstat(), many.qstat())
        for k in set(keys):
            self.assertEqual(one.job(now, k), many.job(now, k))
