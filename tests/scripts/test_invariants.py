"""Script tests of whole-queue properties and the pool-wide scripts: random operation sequences
against the invariants, stale list entries, the registry and due index, own.lua (the pump lease),
pumpers.lua (a sharded queue's roster) and due.lua, namespace.lua, the scripts' structure and
list, and Redis Cluster.

Run by tests/scripts/test_scripts.py, which runs every script test file against one
redis-server; the shared part is scriptlib.py.
"""

import os
import random
import time
import unittest

import redis

import scriptlib
from scriptlib import (
    CALLED, COMMON_BEGIN, COMMON_END, DUE, FILL_DUE, REGISTRY, RETAIN_MS, SPARSE, T, all_scripts,
    check_invariants, custom_key, function_flags, gen_key, load_scripts, Queue, queue_scripts,
    read_script, read_source, record, RedisServer, script_list, stage_spread, ScriptTest)


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
                elif recurring and rng.random() < 0.2:  # CRON: every 1 or 5 s, or each minute
                    kw['sched'] = scriptlib.sched_block(
                        None, None, seconds=rng.choice([None, list(range(0, 60, 5)), [0]]),
                        zone=rng.choice([scriptlib.UTC, scriptlib.PARIS]))
                if rng.random() < 0.3:  # PRIORITY: P.."h" beside P.."r"
                    kw['level'] = rng.choice([1, 5, 9])
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
                # Lazy moving (pump.lua lazy_ms) with and without a consumer waiting.
                if rng.random() < 0.2:
                    if rng.random() < 0.5:
                        self.q.r.set(self.q.key(b'wt'), b'1')
                    else:
                        self.q.r.delete(self.q.key(b'wt'))
                self.q.pump(now, limit=rng.choice([1, 2, 5, 100]),
                            lazy=rng.choice([None, 0, 100, 1000]))
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
                st = self.q.qstat(rng.choice([None, now]))
                live = st['ready'] + st['delayed'] + st['leased'] + st['dead']
                self.assertEqual(live, st['published_total'] - st['acked_total'] -
                                 st['cancelled_total'] - st['expired_total'] - replaced - deleted,
                                 'step %d' % step)
        # Drain: everything pending eventually moves. Recurring schedules never run dry, so
        # theirs is 20 rounds (100 s of their clock: each schedule fires 2 to 100 more times).
        for _ in range(20 if recurring else 200):
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
            self.q.totals = {}  # the counters start again
            self._run(seed, 600, recurring=False)

    def test_random_operations_with_recurring_jobs_keep_the_invariants(self):
        for seed in range(4):
            self.r.flushall()
            self.q.totals = {}
            self._run(100 + seed, 600, recurring=True)


class CheckerTest(ScriptTest):
    """check_invariants itself: a queue holding a job in each place passes it, and each kind of
    damage to one of the keys it reads (all in two pipelines) makes it fail."""
    check_every_call = False

    def setUp(self):
        super().setUp()
        q = self.q
        self.fill_staging()  # the next two go to buckets
        self.delayed = gen_key(T + 5000)
        q.publish(T, self.delayed, record(T), T + 5000)                # a bucket (derivable)
        self.indexed = custom_key(b'late')
        q.publish(T, self.indexed, record(T), T + 7000, 'id')          # a bucket + an index entry
        self.ready = gen_key(T)
        q.publish(T, self.ready, record(T))                            # ready
        q.publish(T, gen_key(T), record(T))
        q.consume(T + 1)                                               # one leased
        check_invariants(self, q)

    def damaged(self, damage):
        damage(self.r, self.q.P)
        with self.assertRaises(AssertionError):
            check_invariants(self, self.q)

    def test_each_damage_is_caught(self):
        cases = {
            'ready gauge': lambda r, P: r.hincrby(P + b's', 'ready', 1),
            'delayed gauge': lambda r, P: r.hincrby(P + b's', 'pd', 1),
            'lease zset': lambda r, P: r.delete(P + b'l'),
            'ready list': lambda r, P: r.delete(P + b'r'),
            'bucket key': lambda r, P: r.delete(P + b'd:%d' % ((T + 5000) // 1000)),
            'buckets zset': lambda r, P: r.delete(P + b'b'),
            'index part': lambda r, P: [r.delete(k) for k in r.scan_iter(match=P + b'i:*')],
            'registry': lambda r, P: r.srem(scriptlib.REGISTRY, self.q.tag),
            'due index': lambda r, P: r.zrem(scriptlib.DUE, self.q.tag),
            'error of no job': lambda r, P: r.hset(P + b'e', b'gone', b'x' * 10),
        }
        dump = {k: self.r.dump(k) for k in self.r.keys('*')}

        def undamaged():
            self.r.flushall()
            for k, v in dump.items():
                self.r.restore(k, 0, v)
            self.q.totals = {}  # the counters went back with the keys
            check_invariants(self, self.q)
        for name, damage in cases.items():
            with self.subTest(name):
                undamaged()
                self.damaged(damage)
        undamaged()  # for tearDown's check


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
        # Its counters stay until its retention ends, which the due index entry says.
        self.assertEqual(self.r.zscore(DUE, self.q.tag), T + 1 + RETAIN_MS)
        # A request/reply round: publish, consume, ack, again and again: nothing is left behind.
        for i in range(3):
            k = self.pub_ready(T + 10 + i)
            self.lease_one(T + 10 + i, k)
            self.q.ack(T + 10 + i, k)
        self.assertEqual(self.r.smembers(REGISTRY), set())
        self.assertEqual(self.r.zrange(DUE, 0, -1, withscores=True),
                         [(self.q.tag, T + 12 + RETAIN_MS)])
        self.stat(published_total=4, consumed_total=4, acked_total=4)
        # The pump call at the end of the retention deletes the counters: nothing of it is left.
        self.q.pump(T + 12 + RETAIN_MS - 1)
        self.assertEqual(self.q.qstat()['acked_total'], 4)
        self.q.pump(T + 12 + RETAIN_MS)
        self.assertEqual(self.r.keys(self.q.P + b'*'), [])
        self.assertEqual(self.r.zcard(DUE), 0)
        self.stat(published_total=0, acked_total=0)

    def test_due_index_is_a_sparse_buckets_first_job_or_a_fuller_ones_look_ahead(self):
        spread = stage_spread(self.q.P)  # where in its look-ahead this queue stages
        self.assertTrue(0 <= spread < 1000)
        self.fill_staging()  # jobs for a second with no bucket make one
        self.assertEqual(self.r.zscore(DUE, self.q.tag), FILL_DUE)
        self.pub_delayed(T, T + 7500)
        self.assertEqual(self.r.zscore(DUE, self.q.tag), T + 7500)
        self.pub_delayed(T, T + 7300)  # an earlier job of the same sparse bucket lowers it
        self.assertEqual(self.r.zscore(DUE, self.q.tag), T + 7300)
        self.pub_delayed(T, T + 9100)  # a later one does not
        self.assertEqual(self.r.zscore(DUE, self.q.tag), T + 7300)
        # The bucket fills past SPARSE: its look-ahead (publish.lua's default, 2 s) from then on.
        for i in range(SPARSE - 1):
            self.pub_delayed(T, T + 7600 + i)
        self.assertEqual(self.r.zscore(DUE, self.q.tag), T + 7000 - 2000 + spread)
        self.assertEqual(self.q.pump(T + 7300)['made'], 1)
        self.assertEqual(self.r.zscore(DUE, self.q.tag), T + 7500)  # the pump's next_due
        self.assertEqual(self.q.pump(T + 9100)['made'], SPARSE + 1)
        # Only the staged fillers are left to move.
        self.assertEqual(self.r.zscore(DUE, self.q.tag), FILL_DUE)
        self.assertTrue(self.r.sismember(REGISTRY, self.q.tag))
        self.assertEqual(self.q.purge(), 2 * SPARSE + 2)
        self.assertFalse(self.r.sismember(REGISTRY, self.q.tag))

    def test_expired_ready_jobs_consumed_away_leave_the_registry(self):
        self.pub_ready(T, ttl=1)
        self.assertEqual(self.q.consume(T + 1500), (0, []))
        self.stat(ready=0, expired_total=1)
        self.assertFalse(self.r.sismember(REGISTRY, self.q.tag))


class ClusterReadTest(ScriptTest):
    """cluster_due.lua, cluster_registry.lua, cluster_slots.lua: a Redis Cluster node's
    pool-wide keys of many slots ("dq:{<slot tag>}:due" and ":queues") in one keyless call.
    Here on a standalone Redis, which serves every slot; a cluster node that does not serve one
    reports it (tests/cluster)."""

    def fcall(self, name, *args):
        CALLED.add(name)
        return self.r.fcall(ScriptTest.shas[name], 0, *args)

    def test_the_due_indexes_of_the_slots_given_in_one_call(self):
        self.r.zadd('dq:{a}:due', {'ns/q1': 100, 'ns/q2': 300})
        self.r.zadd('dq:{b}:due', {'ns/q3': 200})
        entries, missed = self.fcall('cluster_due', '-inf', 250, -1, 'a', 'b', 'c')
        self.assertEqual((entries, missed), ([b'ns/q1', b'100', b'ns/q3', b'200'], []))
        entries, _ = self.fcall('cluster_due', '-inf', '+inf', 1, 'a', 'b')
        self.assertEqual(entries, [b'ns/q1', b'100', b'ns/q3', b'200'])  # LIMIT per slot

    def test_the_registries_of_the_slots_given_in_one_call(self):
        self.r.sadd('dq:{a}:queues', 'ns/q1')
        self.r.sadd('dq:{c}:queues', 'ns/q2')
        tags, missed = self.fcall('cluster_registry', 'a', 'b', 'c')
        self.assertEqual((sorted(tags), missed), ([b'ns/q1', b'ns/q2'], []))

    def test_which_slots_hold_queues(self):
        self.r.sadd('dq:{a}:queues', 'ns/q1')
        self.r.zadd('dq:{b}:due', {'ns/q2': 1})
        self.assertEqual(self.fcall('cluster_slots', 'a', 'b', 'c'), [1, 1, 0])
        self.r.set('dq:{c}:due', 'not a sorted set')  # a key of another type is still a key
        self.assertEqual(self.fcall('cluster_slots', 'c'), [1])


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


class PumpersTest(ScriptTest):
    """pumpers.lua: a sharded queue's roster of pumping instances, members expiring by PX."""

    def pumpers(self, who, lease_ms=2000):
        CALLED.add('pumpers')
        return self.r.fcall(ScriptTest.shas['pumpers'], 1, self.q.P, who, lease_ms)

    def test_members_join_and_every_call_lists_them_sorted(self):
        self.assertEqual(self.pumpers('b'), [b'b'])
        self.assertEqual(self.pumpers('c'), [b'b', b'c'])
        self.assertEqual(self.pumpers('a'), [b'a', b'b', b'c'])
        self.assertEqual(self.pumpers('b'), [b'a', b'b', b'c'])  # renewing changes nothing
        self.assertEqual(self.r.smembers(self.q.P + b'pumpers'), {b'a', b'b', b'c'})
        self.assertGreater(self.r.pttl(self.q.P + b'pumper:a'), 1000)
        self.assertGreater(self.r.pttl(self.q.P + b'pumpers'), 1000)

    def test_a_member_that_stops_renewing_leaves_and_an_unrenewed_roster_is_gone(self):
        self.assertEqual(self.pumpers('a', 100), [b'a'])
        self.assertEqual(self.pumpers('b', 2000), [b'a', b'b'])
        time.sleep(0.2)
        self.assertEqual(self.pumpers('b', 100), [b'b'])  # a expired: dropped from the set too
        self.assertEqual(self.r.smembers(self.q.P + b'pumpers'), {b'b'})
        time.sleep(0.2)
        self.assertEqual(self.r.exists(self.q.P + b'pumpers', self.q.P + b'pumper:b'), 0)

    def test_bad_arguments_are_errors_and_write_nothing(self):
        for who, lease in (('', 100), ('a', 0), ('a', 'x')):
            with self.assertRaisesRegex(redis.ResponseError, 'deferq pumpers: bad arguments'):
                self.pumpers(who, lease)
        self.assertEqual(self.r.exists(self.q.P + b'pumpers', self.q.P + b'pumper:a'), 0)


class DueTest(ScriptTest):
    """due.lua: a queue's due index entry, read alone (shard owners read their shards')."""

    def test_answers_the_due_index_entry_and_nil_without_pending_work(self):
        self.assertIsNone(self.q.call('due'))
        k = self.pub_delayed(T, T + 5000)
        entry = self.r.zscore(DUE, self.q.tag)
        self.assertIsNotNone(entry)
        self.assertEqual(self.q.call('due'), int(entry))
        self.assertEqual(self.q.pump(T + 5000)['made'], 1)
        self.assertEqual(self.q.consume(T + 5000, ttr=30000)[1][0]['id'], k)
        self.assertEqual(self.q.call('due'), T + 5000 + 30000)  # the lease end
        self.assertEqual(self.q.ack(T + 5001, k), 1)
        # An empty queue's entry is the end of its retention (common/keys.lua RETAIN_MS).
        self.assertEqual(self.q.call('due'), T + 5001 + RETAIN_MS)

    def test_without_the_pool_keys_the_answer_is_nil(self):
        self.pub_delayed(T, T + 5000)
        q = Queue(self.r, ScriptTest.shas, pool_keys=False)
        self.assertIsNone(q.call('due'))


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
        # Only the mark that the owners index is built stays (it is pool-wide, not the namespace's).
        self.assertEqual(self.r.keys(b'dq:{auth}:*'), [b'dq:{auth}:owners_v1'])
        self.r.hset(self.A + b'tokens:shop', 'f' * 64, 'left over')
        self.ns('create', 'shop', 'eu', '', T)
        self.assertEqual(self.ns('lookup', 'shop'), [b'eu'])


    def test_owner_finds_the_namespace_of_a_token_and_forgets_revoked_and_deleted_ones(self):
        d1, d2, d3 = 'a' * 64, 'b' * 64, 'c' * 64
        self.ns('create', 'shop', 'default', '', T)
        self.ns('create', 'mail', 'default', '', T)
        self.ns('token_add', 'shop', d1, '', T)
        self.ns('token_add', 'mail', d2, '', T)
        self.ns('token_add', 'mail', d3, '', T)
        self.assertEqual(self.ns('owner', d1), b'shop')
        self.assertEqual(self.ns('owner', d2), b'mail')
        self.assertIsNone(self.ns('owner', 'f' * 64))
        self.assertEqual(self.ns('token_revoke', 'mail', d2[:16]), 1)  # by id
        self.assertIsNone(self.ns('owner', d2))
        self.assertEqual(self.ns('delete', 'shop'), 1)
        self.assertIsNone(self.ns('owner', d1))
        self.assertEqual(self.r.hgetall(self.A + b'owners'), {d3.encode(): b'mail'})
        # The read registration answers it too (AUTH at maxmemory or under MISCONF).
        self.assertEqual(self.r.fcall(ScriptTest.shas['namespace_read'], 1, self.A, 'owner', d3),
                         b'mail')
        CALLED.add('namespace_read')

    def test_tokens_of_an_older_library_are_found_then_indexed_by_the_next_change(self):
        # What an older deferq left: namespaces and tokens, no owners index.
        self.r.hset(self.A + b'namespaces', 'old', 'default')
        self.r.hset(self.A + b'tokens:old', 'e' * 64, '%d x' % T)
        self.assertEqual(self.ns('owner', 'e' * 64), b'old')  # found by looking in each namespace
        self.assertIsNone(self.ns('owner', 'd' * 64))
        self.ns('create', 'new', 'default', '', T)  # any change builds the index
        self.assertEqual(self.r.hgetall(self.A + b'owners'), {b'e' * 64: b'old'})
        self.assertEqual(self.ns('owner', 'e' * 64), b'old')


class FlagsTest(ScriptTest):
    """The functions' Redis flags (list.txt): at maxmemory only what frees or keeps memory and the
    reads run; a no-writes function cannot write."""

    check_every_call = False

    def tearDown(self):
        self.r.config_set('maxmemory', 0)
        super().tearDown()

    def fcall(self, name, *args):
        CALLED.add(name)
        return self.r.fcall(ScriptTest.shas[name], len(self.q.keys), *self.q.keys, *args)

    def test_at_maxmemory_reads_and_what_frees_memory_run_and_publish_does_not(self):
        flags = function_flags()
        self.assertEqual(flags['publish'], ())
        self.assertEqual(flags['batch'], ())
        for name in ('job', 'peek', 'qstat', 'qstats', 'due', 'deadletter_read', 'namespace_read'):
            self.assertEqual(flags[name], ('no-writes',), name)
        ks = [self.pub_ready(T + i) for i in range(6)]
        self.r.config_set('maxmemory', 1)  # anything is over it now
        with self.assertRaisesRegex(redis.ResponseError, 'OOM'):
            self.q.publish(T, gen_key(T), record(T))
        with self.assertRaisesRegex(redis.ResponseError, 'OOM'):
            self.fcall('batch', 'publish', 1, 1, 7, T, gen_key(T), record(T), T, '', '0', 2000)
        left, jobs = self.q.consume(T + 10, count=2)
        self.assertEqual([j['id'] for j in jobs], ks[:2])
        self.assertEqual(self.q.ack(T + 11, ks[0]), 1)
        self.assertEqual(self.q.nack(T + 12, ks[1]), 1)
        # A batch of consumes (or acks) runs through the allow-oom registration of batch.lua.
        got = self.fcall('batch_free', 'consume', 1, 1, 3, T + 13, 30000, 1, 1, 3, T + 13, 30000,
                         1)
        self.assertEqual(len(got), 2)
        self.assertEqual(self.q.qstat(T + 14)['leased'], 2)
        # The nacked job had one try: it is dead.
        self.assertEqual(self.fcall('deadletter_read', 'size', T, '', ''), 1)
        self.assertEqual(self.fcall('deadletter_read', 'peek', T, 5, '')[0], ks[1])
        self.assertEqual(len(self.q.peek(T + 14, 5)), 2)
        self.assertEqual(self.q.job(T + 14, ks[5])['state'], b'ready')
        self.assertEqual(self.q.purge(), 5)

    def test_a_no_writes_function_cannot_write(self):
        self.pub_ready(T)
        with self.assertRaisesRegex(redis.ResponseError, 'Write commands are not allowed'):
            self.fcall('deadletter_read', 'delete', T, 1, '')


class RetentionAndPauseTest(ScriptTest):
    """Retention of an empty queue's counters (common/keys.lua RETAIN_MS, pump.lua (3)) and pause.lua."""

    def pause(self, op, now=T):
        CALLED.add('pause')
        return self.q.call('pause', op, now)

    def test_a_job_during_the_retention_keeps_the_queue_and_the_next_emptying_restarts_it(self):
        k = self.pub_ready(T)
        self.lease_one(T, k)
        self.q.ack(T + 1, k)
        k2 = self.pub_ready(T + 100)
        self.assertTrue(self.r.sismember(REGISTRY, self.q.tag))
        self.q.pump(T + 1 + RETAIN_MS)  # the old retention's end: the queue holds a job
        self.assertEqual(self.q.qstat()['ready'], 1)
        self.assertEqual(self.r.zscore(DUE, self.q.tag), T + 100 + 86400 * 1000 + 1)  # its ttl
        self.lease_one(T + 200, k2)
        self.q.ack(T + 300, k2)
        self.assertEqual(self.r.zscore(DUE, self.q.tag), T + 300 + RETAIN_MS)
        self.stat(published_total=2, acked_total=2)

    def test_a_queue_that_never_held_a_job_leaves_nothing_when_read_or_pumped(self):
        # Consumers waited on it (a marker, the pump told), then read it: no counters, no due
        # index entry, nothing listed.
        self.r.set(self.q.P + b'wt', '1', px=30000)
        self.q.pump(T)
        self.assertEqual(self.q.consume(T + 1), (0, []))
        self.q.pump(T + 2)
        self.assertFalse(self.r.exists(self.q.P + b's'))
        self.assertIsNone(self.r.zscore(DUE, self.q.tag))
        self.assertFalse(self.r.sismember(REGISTRY, self.q.tag))

    def test_a_paused_queue_is_listed_until_resumed_and_never_retired_meanwhile(self):
        # Paused before its first job: listed in the registry (QUEUES) from then on.
        self.assertEqual(self.pause('pause'), 1)
        self.assertTrue(self.r.sismember(REGISTRY, self.q.tag))
        self.assertEqual(self.pause('resume'), 1)
        self.assertEqual(self.pause('resume'), 0)
        self.assertEqual(self.r.zscore(DUE, self.q.tag), T + RETAIN_MS)
        k = self.pub_ready(T)
        self.assertEqual(self.pause('pause'), 1)
        self.assertEqual(self.pause('pause'), 0)
        self.assertEqual(self.q.consume(T + 1), (0, []))  # paused: nothing handed out
        self.assertEqual(self.q.cancel(T + 2, k), 1)
        # Empty and paused: still listed (QUEUES), no retention, never retired by the pump.
        self.assertTrue(self.r.sismember(REGISTRY, self.q.tag))
        self.q.pump(T + 10 * RETAIN_MS)
        self.assertTrue(self.r.exists(self.q.P + b'p'))
        self.assertEqual(self.q.qstat()['cancelled_total'], 1)
        # Resumed: its retention starts; at its end nothing is left.
        self.assertEqual(self.pause('resume', T + 20), 1)
        self.assertFalse(self.r.sismember(REGISTRY, self.q.tag))
        self.q.pump(T + 20 + RETAIN_MS)
        self.assertEqual(self.r.keys(self.q.P + b'*'), [])

    def test_purge_keeps_a_pause_and_drop_removes_it(self):
        self.pub_ready(T)
        self.pause('pause')
        self.assertEqual(self.q.purge(), 1)
        self.assertTrue(self.r.exists(self.q.P + b'p'))
        self.assertTrue(self.r.sismember(REGISTRY, self.q.tag))  # paused: still listed
        self.assertEqual(self.q.call('purge', T, 'drop'), 0)
        self.assertEqual(self.r.keys(self.q.P + b'*'), [])
        self.assertFalse(self.r.sismember(REGISTRY, self.q.tag))
        self.assertIsNone(self.r.zscore(DUE, self.q.tag))


class ConsumesAndMarksTest(ScriptTest):
    """consumes.lua (a CONSUME of several queues in one call) and marks.lua (the waiters'
    markers, batched)."""

    check_every_call = False

    def queue(self, name):
        return Queue(self.r, ScriptTest.shas, name=name)

    def consumes(self, queues, now, count, ttr=30000):
        CALLED.add('consumes')
        keys = [q.P for q in queues] + [REGISTRY, DUE]
        reply = self.r.fcall(ScriptTest.shas['consumes'], len(keys), *keys, now, ttr, count,
                             len(queues))
        left = reply[:len(queues)]
        jobs = [(reply[i], reply[i + 1]) for i in range(len(queues), len(reply), 7)]
        return left, jobs

    def test_takes_from_the_queues_in_order_and_fills_from_later_ones(self):
        a, b, c = self.queue('a'), self.queue('b'), self.queue('c')
        ka = gen_key(T)
        a.publish(T, ka, record(T))
        kb = [gen_key(T + i) for i in range(1, 4)]
        for k in kb:
            b.publish(T, k, record(T))
        kc = gen_key(T + 9)
        c.publish(T, kc, record(T))
        left, jobs = self.consumes([a, b, c], T + 10, 3)
        self.assertEqual(jobs, [(1, ka), (2, kb[0]), (2, kb[1])])
        self.assertEqual(left, [0, 1, -1])  # c was not visited: the count was reached
        self.assertEqual(b.qstat()['leased'], 2)
        left, jobs = self.consumes([a, b, c], T + 11, 5)
        self.assertEqual(jobs, [(2, kb[2]), (3, kc)])
        self.assertEqual(left, [0, 0, 0])
        # Nothing ready: nothing changes, every queue answers 0.
        self.assertEqual(self.consumes([a, b, c], T + 12, 5), ([0, 0, 0], []))
        for q in (a, b, c):
            check_invariants(self, q)

    def test_a_paused_queue_is_passed_and_bad_arguments_are_refused(self):
        a, b = self.queue('a'), self.queue('b')
        a.publish(T, gen_key(T), record(T))
        kb = gen_key(T + 1)
        b.publish(T, kb, record(T))
        self.r.set(a.P + b'p', '1')
        self.assertEqual(self.consumes([a, b], T + 5, 2)[1], [(2, kb)])
        with self.assertRaisesRegex(redis.ResponseError, 'consumes: bad arguments'):
            self.r.fcall(ScriptTest.shas['consumes'], 1, a.P, T, 1000, 1, 2)  # n > #KEYS

    def test_marks_set_each_marker_once_and_tell_which_it_created(self):
        a, b, c = self.queue('a'), self.queue('b'), self.queue('c')
        CALLED.add('marks')
        self.r.set(b.P + b'wt', '1')
        # a holds a staged job (its pump put off moving it while nobody waited); c holds nothing.
        self.r.zadd(a.P + b'w', {b'staged': T + 5})
        news = self.r.pubsub()
        news.subscribe('dq:ready')
        news.get_message(timeout=1)
        created = self.r.fcall(ScriptTest.shas['marks'], 2, a.P, b.P, 30000, 2, '1')
        self.assertEqual(created, [1, 0])
        self.assertGreater(self.r.pttl(a.P + b'wt'), 29000)
        self.assertGreater(self.r.pttl(b.P + b'wt'), 29000)
        msg = news.get_message(timeout=2)
        self.assertEqual(msg['data'], b'wait ns/a')
        # A new marker on a queue without staged jobs: nothing for its pump to hear.
        self.assertEqual(self.r.fcall(ScriptTest.shas['marks'], 1, c.P, 30000, 1, '1'), [1])
        self.assertIsNone(news.get_message(timeout=0.3))
        # A renewal (no news) creates nothing new and publishes nothing.
        self.assertEqual(self.r.fcall(ScriptTest.shas['marks'], 2, a.P, b.P, 30000, 2, ''),
                         [0, 0])
        self.assertIsNone(news.get_message(timeout=0.2))
        news.close()


class StructureTest(unittest.TestCase):
    def test_list_names_every_script_file_and_which_share_no_common_code(self):
        files = sorted(f[:-len('.lua')] for f in os.listdir(scriptlib.SCRIPTS_DIR)
                       if f.endswith('.lua'))
        self.assertEqual(sorted(all_scripts()), files)
        for name, standalone in script_list():
            self.assertEqual(COMMON_BEGIN in read_source(name), not standalone, name)

    def test_every_script_has_one_empty_common_placeholder(self):
        # The shared code lives in common/*.lua only; the build fills each placeholder in.
        for name in queue_scripts():
            text = read_source(name)
            self.assertEqual(text.count(COMMON_BEGIN), 1, name)
            self.assertIn(COMMON_BEGIN + '\n' + COMMON_END + '\n', text, name)

    def test_the_common_modules_are_the_files_of_common_and_each_names_itself(self):
        common = os.path.join(scriptlib.SCRIPTS_DIR, 'common')
        modules = scriptlib.embedder().common_modules(common)
        self.assertEqual(sorted(modules), sorted(f[:-len('.lua')] for f in os.listdir(common)
                                                 if f.endswith('.lua')))
        for name in modules:
            with open(os.path.join(common, name + '.lua')) as f:
                self.assertTrue(f.readline().startswith('-- common/%s.lua: ' % name), name)

    def test_every_script_header_lists_keys_argv_state_change_and_return(self):
        for name in all_scripts():
            header = read_script(name).split(COMMON_BEGIN)[0]
            for word in ('KEYS[1]', 'ARGV', 'State change', 'Returns'):
                self.assertIn(word, header, name)

    def test_scripts_never_read_the_clock(self):
        for name in all_scripts():
            self.assertNotRegex(read_script(name), r"call\('TIME'", name)


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
            # The roster's keys share the queue's hash tag.
            self.assertEqual(c.fcall(q.shas['pumpers'], 1, q.P, 'a', 2000), [b'a'])
            with self.assertRaisesRegex(redis.ResponseError, 'same slot|cross slot|CROSSSLOT'):
                c.fcall(q.shas['qstat'], 2, q.P, b'dq:{other/q}:')
        finally:
            server.stop()
