"""Script tests, a job from publish to its end: publish.lua, consume.lua, ack.lua, cancel.lua,
nack.lua and touch.lua.

Run by tests/scripts/test_scripts.py, which runs every script test file against one
redis-server; the shared part is scriptlib.py.
"""

import struct
import time

import redis

from scriptlib import (
    DELAYED, DERIVABLE_BIT, DUE, LEASED, NEW_YORK, PARIS, READY, REGISTRY, RETAIN_MS, SEC, SPARSE,
    T, check_invariants, custom_key, decode_record, gen_key, hint, key_ts, record, sched_block,
    ScriptTest)


class PublishTest(ScriptTest):
    def test_publish_without_delay_is_ready_at_once(self):
        k = gen_key(T)
        self.assertEqual(self.q.publish(T, k, record(T, ttl=60, payload=b'hello')), [1])
        self.assertEqual(self.q.r.lrange(self.q.key(b'r'), 0, -1), [k])
        self.assertEqual(self.q.stored(k)['state'], READY)
        self.stat(ready=1, delayed=0, leased=0, dead=0, published_total=1)
        self.assertEqual(self.q.job(T + 5, k), {
            'state': b'ready', 'payload': b'hello', 'tries_left': 1, 'attempt': 0, 'created': T,
            'due': T, 'ttl_left': 60, 'every': 0, 'backoff': 0, 'last_error': None,
            'last_error_attempt': 0, 'last_error_ms': 0, 'cron': None, 'tz': None,
            'priority': 0, 'result': None, 'finished_ms': 0})

    def test_a_record_is_stored_as_sent_when_its_state_bits_are_right_and_fixed_when_not(self):
        # deferq sends a delayed job's record with state bits DELAYED (queue::EncodeRecord), so
        # the script stores the bytes as they came; any other bits are set by the script.
        self.fill_staging()
        due = T + 5500
        for state, k in ((DELAYED, gen_key(due)), (READY, gen_key(due + 1))):
            rec = record(T, payload=b'x' * 64, state=state)
            self.assertEqual(self.q.publish(T, k, rec, key_ts(k)), [1])
            f = struct.pack('>H', (key_ts(k) % 1000) | DERIVABLE_BIT) + k[6:]
            self.assertEqual(self.q.bucket(SEC + 5)[f], record(T, payload=b'x' * 64,
                                                               state=DELAYED))
        for state in (DELAYED, READY):
            k = gen_key(T - 10 - state)
            self.assertEqual(self.q.publish(T, k, record(T, payload=b'r', state=state)), [1])
            self.assertEqual(self.q.r.hget(self.q.key(b'j'), k), record(T, payload=b'r'))
        self.stat(ready=2, delayed=2 + SPARSE)

    def test_due_in_the_past_is_ready_at_once(self):
        k = gen_key(T - 5000)
        self.q.publish(T, k, record(T), due=T - 5000)
        self.stat(ready=1, delayed=0)

    def test_delayed_generated_job_uses_derivable_12_byte_field_and_no_index(self):
        self.fill_staging()
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
        self.assertEqual(self.q.index_all(), {})
        self.assertEqual(self.q.r.zrange(self.q.key(b'b'), 0, -1, withscores=True),
                         [(b'%d' % (SEC + 5), float(SEC + 5))])
        self.stat(ready=0, delayed=1 + SPARSE, published_total=1 + SPARSE)
        j = self.q.job(T, k)
        self.assertEqual((j['state'], j['due'], j['ttl_left']), (b'delayed', due, 86400))

    def test_delayed_custom_id_has_index_entry_and_full_field(self):
        self.fill_staging()
        k = custom_key(b'order-123')
        self.q.publish(T, k, record(T, payload=b'x'), T + 2500)
        self.assertEqual(self.q.bucket(SEC + 2), {struct.pack('>H', 500) + k: bytes([DELAYED]) +
                                                  record(T, payload=b'x')[1:]})
        self.assertEqual(self.q.index(k), b'%d' % (T + 2500))
        self.assertEqual(self.q.job(T, k)['due'], T + 2500)

    def test_custom_id_index_is_spread_over_small_listpack_parts(self):
        # The memory design (docs/storage.md, Memory): entries spread over the 4,096 parts by
        # SHA-1(K), each part a listpack, not one hash table of ~100 bytes an entry.
        self.fill_staging()
        self.q.checker = None
        pipe = self.q.r.pipeline(transaction=False)
        keys = [custom_key(b'order-%08d' % i) for i in range(3000)]
        for i, k in enumerate(keys):
            pipe.fcall(self.shas['publish'], 3, *self.q.keys, T, k, record(T), T + 5000 + i,
                       'id', '0')
        self.assertEqual(pipe.execute(), [[1]] * len(keys))
        parts = list(self.q.r.scan_iter(match=self.q.key(b'i:*'), count=1000))
        self.assertGreater(len(parts), 2000)
        self.assertEqual({self.q.r.object('encoding', p) for p in parts}, {b'listpack'})
        self.assertEqual(len(self.q.index_all()), len(keys))
        self.assertEqual(self.q.job(T, keys[1234])['due'], T + 5000 + 1234)
        self.assertEqual(self.q.cancel(T, keys[1234]), 1)
        self.assertIsNone(self.q.index(keys[1234]))
        check_invariants(self, self.q)

    def test_caller_may_store_a_generated_key_non_derivably(self):
        self.fill_staging()
        k = gen_key(T + 100)
        self.q.publish(T, k, record(T), T + 100, derivable=False)
        self.assertEqual(self.q.index(k), b'%d' % (T + 100))
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

    def test_a_queue_with_few_delayed_jobs_stages_them_at_their_publish(self):
        """While P.."w" holds fewer than SPARSE members, a delayed job for a second with no bucket
        is staged at once, as the pump would stage it (record in P.."j", member in P.."w", no
        bucket and no index entry); then its second's bucket is made as before. The pump moves
        a staged job at its due ms without staging anything (no HSCAN, no stage_sec mark)."""
        gen = self.pub_delayed(T, T + 5500)
        custom = custom_key(b'order-1')
        self.assertEqual(self.q.publish(T, custom, record(T), T + 2500, 'id'), [1])
        self.assertEqual(self.r.zscore(DUE, self.q.tag), T + 2500)
        self.assertEqual(self.r.zcard(self.q.key(b'w')), 2)
        self.assertEqual(self.r.zcard(self.q.key(b'b')), 0)
        self.assertEqual(self.q.index_all(), {})
        self.assertEqual(self.q.stored(custom)['at'], T + 2500)  # its due time, as staged
        self.assertEqual(self.q.job(T, custom, use_hint=False)['due'], T + 2500)
        self.assertEqual(self.q.job(T, gen, use_hint=False)['due'], T + 5500)
        more = [self.pub_delayed(T, T + 60000 + i * 1000) for i in range(SPARSE - 2)]
        self.assertEqual(self.r.zcard(self.q.key(b'w')), SPARSE)
        bucketed = self.pub_delayed(T, T + 3700)  # staging is full: a bucket
        self.assertEqual(len(self.q.bucket(SEC + 3)), 1)
        self.stat(delayed=SPARSE + 1, published_total=SPARSE + 1)
        self.r.config_resetstat()
        p = self.q.pump(T + 2500)
        self.assertEqual((p['made'], p['next_due']), (1, T + 3700))
        self.assertNotIn('hscan', self.commands_run())
        self.assertIsNone(self.r.hget(self.q.key(b's'), 'stage_sec'))
        self.assertEqual(self.q.pump(T + 3700)['made'], 1)  # the bucket, staged when due
        self.assertEqual(self.q.pump(T + 5500)['made'], 1)
        left, jobs = self.q.consume(T + 5500, count=10)
        self.assertEqual([j['id'] for j in jobs], [custom, bucketed, gen])
        self.stat(ready=0, leased=3, delayed=len(more))

    def test_a_retried_publish_of_a_job_staged_at_publish_stores_it_once(self):
        """A plain publish of a generated K staged at once, retried after staging filled up (the
        retry would make a bucket), finds the job and stores nothing."""
        k = gen_key(T + 4000)
        self.assertEqual(self.q.publish(T, k, record(T), T + 4000), [1])
        self.fill_staging()  # its last job makes a bucket: staging is full
        self.assertEqual(self.q.publish(T, k, record(T), T + 4000), [0])
        self.assertEqual(self.q.bucket(SEC + 4), {})
        self.stat(delayed=SPARSE + 1, published_total=SPARSE + 1)

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

    def keep_publish(self, now, k, payload, keep_ms, mode='id', due=None):
        due = now if due is None else due
        return self.q.call('publish', now, k, record(now, payload=payload), due, mode, '0', 2000,
                           keep_ms)

    def test_keep_holds_a_key_after_its_job_finished_until_the_window_ends(self):
        k = custom_key(b'order-1')
        self.assertEqual(self.keep_publish(T, k, b'a', 300), [1])
        self.assertEqual(self.keep_publish(T, k, b'b', 300), [0])  # live: as ID alone
        self.lease_one(T, k)
        self.assertEqual(self.q.ack(T + 1, k), 1)
        self.assertEqual(self.keep_publish(T + 2, k, b'c', 300), [0])  # finished, still held
        self.stat(ready=0, published_total=1, acked_total=1)
        self.assertLessEqual(self.r.pttl(self.q.key(b'k:') + k), 300)
        time.sleep(0.35)  # Redis expires the marker (PX counts Redis's own clock)
        self.assertEqual(self.keep_publish(T + 3, k, b'd', 300), [1])
        self.stat(ready=1, published_total=2)

    def test_keep_counts_from_the_due_time_and_replace_still_replaces_a_live_job(self):
        k = custom_key(b'order-2')
        self.assertEqual(self.keep_publish(T, k, b'a', 1000, due=T + 60000), [1])
        self.assertGreater(self.r.pttl(self.q.key(b'k:') + k), 60000)
        self.assertEqual(self.keep_publish(T, k, b'b', 1000, 'replace', due=T + 60000), [2])
        self.assertEqual(self.q.cancel(T + 1, k), 1)
        self.assertEqual(self.keep_publish(T + 2, k, b'c', 1000, 'replace'), [0])  # held
        self.stat(ready=0, delayed=0, cancelled_total=1)

    def test_without_keep_no_marker_is_written(self):
        k = custom_key(b'plain')
        self.assertEqual(self.q.publish(T, k, record(T), mode='id'), [1])
        self.assertEqual(list(self.r.scan_iter(match=self.q.key(b'k:*'))), [])

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
        self.assertEqual(self.q.index_all(), {})
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
        self.fill_staging()
        k = self.pub_delayed(T, T + 5000, payload=b'v1')
        self.assertEqual(self.q.publish(T, k, record(T, payload=b'v1b'), T + 5000, 'id'), [0])
        self.assertEqual(self.q.publish(T, k, record(T, payload=b'v2'), T + 8000, 'replace'),
                         [2])
        self.assertEqual(self.q.bucket(SEC + 5), {})
        j = self.q.job(T, k)
        self.assertEqual((j['payload'], j['due']), (b'v2', T + 8000))
        self.assertEqual(self.q.index(k), b'%d' % (T + 8000))
        self.stat(delayed=1 + SPARSE, published_total=2 + SPARSE)

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
        self.fill_staging()
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
    def test_a_count_that_finds_one_job_reads_no_gauge(self):
        """CONSUME COUNT n keeps the ready gauge in Lua from its second job on, seeded by the first
        job's HINCRBY: one job found costs no read of the gauge (HGET s ready) and one write;
        several, one read fewer than a write per job."""
        for jobs in (1, 2, 5):
            with self.subTest(jobs=jobs):
                self.setUp()
                keys = [self.pub_ready(T + i) for i in range(jobs)]
                self.pub_delayed(T, T + 60000)  # the queue stays listed: nothing is forgotten
                self.r.config_resetstat()
                left, got = self.q.consume(T + 100, count=100)
                ran = self.commands_run()
                self.assertEqual((left, [j['id'] for j in got]), (0, keys))
                self.assertEqual(ran.get('hget'), jobs)  # the records only
                self.assertEqual(ran.get('hincrby'), 3 if jobs > 1 else 2)
                self.stat(ready=0, delayed=1, leased=jobs, consumed_total=jobs)

    def test_a_consume_that_empties_the_queue_counts_no_leases_having_just_added_one(self):
        """The ready gauge reaching 0 makes the call ask whether the queue is empty; a consume
        has just leased a job, so it does not count the leases (no ZCARD). The queue stays
        listed until the job is acked, as before."""
        for pump_lease in (False, True):
            with self.subTest(pump_lease=pump_lease):
                self.setUp()
                if pump_lease:  # pump.lua's lease to a waiting consumer runs consume.lua
                    ready = self.pub_ready(T)
                    due = self.pub_delayed(T, T + 100)
                    self.r.config_resetstat()
                    self.q.call('pump', T + 100, 1000, 0, 0, 1, 30000, 2)
                    keys = [ready, due]
                else:
                    keys = [self.pub_ready(T)]
                    self.r.config_resetstat()
                    self.lease_one(T + 100, keys[0])
                ran = self.commands_run()
                self.assertNotIn('zcard', ran)
                self.stat(ready=0, delayed=0, leased=len(keys))
                self.assertTrue(self.r.sismember(REGISTRY, self.q.tag))
                self.assertEqual(self.r.zscore(DUE, self.q.tag), T + 100 + 30000)
                self.assertEqual(self.q.ack(T + 200, *keys), len(keys))
                self.assertFalse(self.r.sismember(REGISTRY, self.q.tag))
                self.assertEqual(self.r.zscore(DUE, self.q.tag), T + 200 + RETAIN_MS)

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
                 dict(tries=(2, 0, 2), backoff=9, payload=b'\x00\xff' * 40),
                 dict(backoff=7, bmax=60, jitter=True)]  # the long B block
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
        self.assertEqual([j['ttl_left'] for j in jobs],
                         [86400, 86400, 86400, -1, 86400, 86400, 86400])

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
                                         self.q.key(b'b')))
        self.assertEqual(self.q.index_all(), {})

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
        self.fill_staging()  # in its bucket
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
        self.fill_staging()  # the job goes to a bucket
        k = self.pub_ready(tries=(3, 0, 3))
        self.lease_one(T, k)
        self.assertEqual(self.q.nack(T + 200, k, 1500), 1)
        self.assertEqual(self.q.index(k), b'%d' % (T + 1700))
        j = self.q.job(T + 200, k)
        self.assertEqual((j['state'], j['due']), (b'delayed', T + 1700))
        self.assertEqual(self.q.pump(T + 1699)['made'], 0)
        self.assertEqual(self.q.pump(T + 1700)['made'], 1)
        self.assertEqual(self.q.stored(k)['tries'], (2, 1, 3))

    def test_backoff_max_caps_the_wait(self):
        k = self.pub_ready(tries=(5, 0, 5), backoff=10, bmax=15)
        for n, wait in ((1, 10000), (2, 15000), (3, 15000)):
            now = T + n * 100000
            self.q.pump(now)
            self.lease_one(now, k)
            self.assertEqual(self.q.nack(now + 1, k), 1)
            self.assertEqual(self.q.job(now + 1, k)['due'], now + 1 + wait, 'attempt %d' % n)

    def test_backoff_jitter_spreads_the_waits_over_zero_to_the_capped_wait(self):
        waits = []
        for i in range(20):
            k = self.pub_ready(T, payload=b'%d' % i, tries=(2, 0, 2), backoff=100, jitter=True)
            self.lease_one(T, k)
            self.assertEqual(self.q.nack(T + 1, k), 1)
            j = self.q.job(T + 1, k)
            waits.append(j['due'] - (T + 1) if j['state'] == b'delayed' else 0)
        self.assertTrue(all(0 <= w < 100000 for w in waits), waits)
        self.assertGreater(len(set(waits)), 15, waits)
        self.assertLess(min(waits), 50000)
        self.assertGreater(max(waits), 50000)

    def test_a_long_b_block_survives_staging_and_the_expired_lease_path(self):
        # A custom id delayed: staging writes its due time into the record (with_at) after the
        # B block; the lease path finds R after it; an expired lease applies its backoff.
        k = custom_key(b'job-1')
        rec = record(T, payload=b'body', tries=(2, 0, 2), backoff=4, bmax=4, jitter=False)
        self.assertEqual(self.q.publish(T, k, rec, T + 3000), [1])
        self.q.pump(T + 3000)
        job = self.lease_one(T + 3000, k, ttr=1000)
        self.assertEqual(job['payload'], b'body')
        self.q.pump(T + 4000)  # the lease ends: BACKOFF 4 s (MAX 4)
        j = self.q.job(T + 4000, k)
        self.assertEqual((j['state'], j['due'], j['payload']), (b'delayed', T + 8000, b'body'))
        d = self.q.stored(k) if self.r.hexists(self.q.key(b'j'), k) else None
        if d is not None:
            self.assertEqual((d['backoff'], d['bmax'], d['payload']), (4, 4, b'body'))
        self.q.pump(T + 8000)
        self.assertEqual(self.lease_one(T + 8000, k)['payload'], b'body')

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

    def test_nack_records_why_with_the_attempt_and_job_shows_it(self):
        k = self.pub_ready(tries=(3, 0, 3))
        self.lease_one(T, k)
        self.assertEqual(self.q.nack(T + 5, k, '', 'smtp down: 421'), 1)
        self.assertEqual(self.q.errors(), {k: (1, T + 5, b'smtp down: 421')})
        j = self.q.job(T + 6, k)
        self.assertEqual((j['last_error'], j['last_error_attempt'], j['last_error_ms']),
                         (b'smtp down: 421', 1, T + 5))
        # The next failed attempt replaces it; a NACK without a reason records "nacked".
        self.lease_one(T + 10, k)
        self.q.nack(T + 20, k, 1000)
        self.assertEqual(self.q.errors(), {k: (2, T + 20, b'nacked')})
        self.assertEqual(self.q.job(T + 21, k)['state'], b'delayed')

    def test_a_job_that_never_failed_has_no_error_and_its_ack_reads_nothing(self):
        k = self.pub_ready()
        j = self.q.job(T, k)
        self.assertEqual((j['last_error'], j['last_error_attempt'], j['last_error_ms']),
                         (None, 0, 0))
        self.lease_one(T, k)
        self.assertEqual(self.q.ack(T + 1, k), 1)
        self.assertFalse(self.r.exists(self.q.key(b'e')))

    def test_a_reason_is_kept_to_512_bytes(self):
        k = self.pub_ready(tries=(2, 0, 2))
        self.lease_one(T, k)
        self.q.nack(T + 1, k, '', b'x' * 600)
        self.assertEqual(self.q.errors()[k][2], b'x' * 512)

    def test_an_expired_lease_is_recorded_as_such_on_retry_and_on_death(self):
        retry = self.pub_ready(tries=(2, 0, 2))
        self.lease_one(T, retry, ttr=1000)
        self.q.pump(T + 1001)
        self.assertEqual(self.q.errors(), {retry: (1, T + 1001, b'lease expired')})
        self.lease_one(T + 1002, retry, ttr=1000)
        self.q.pump(T + 2002)
        self.stat(dead=1)
        self.assertEqual(self.q.dl_peek_errors(T + 2003), [(retry, b'lease expired', 2, T + 2002)])

    def test_the_error_goes_with_the_job_on_every_way_out(self):
        def failed(now, tries=(3, 0, 3), **kw):
            k = self.pub_ready(now, tries=tries, **kw)
            self.lease_one(now, k)
            self.q.nack(now + 1, k, '', 'boom')
            return k
        acked = failed(T)
        self.lease_one(T + 2, acked)
        self.assertEqual(self.q.ack(T + 3, acked), 1)  # attempt 2's ACK
        cancelled = failed(T + 10)
        self.q.cancel(T + 12, cancelled)
        dead = failed(T + 20, tries=(1, 0, 1))
        self.assertEqual(self.q.dl_delete(T + 22), 1)
        dead_id = failed(T + 30, tries=(1, 0, 1))
        self.assertEqual(self.q.dl_delete_id(T + 32, dead_id), 1)
        expired = failed(T + 40, ttl=1)
        self.assertEqual(self.q.errors().keys(), {expired})
        self.q.pump(T + 2000)  # the ready job expires at the head of the list
        self.stat(ready=0, expired_total=1)
        self.assertEqual(self.q.errors(), {})
        for k in (acked, cancelled, dead, dead_id):
            self.assertIsNone(self.q.job(T + 2001, k))

    def test_respawn_and_a_recurring_jobs_next_occurrence_start_without_an_error(self):
        k = self.pub_ready()
        self.lease_one(T, k)
        self.q.nack(T + 1, k, '', 'boom')
        self.assertEqual(self.q.dl_peek_errors(T + 2), [(k, b'boom', 1, T + 1)])
        self.assertEqual(self.q.dl_respawn(T + 3), 1)
        self.assertEqual(self.q.errors(), {})
        self.assertIsNone(self.q.job(T + 4, k)['last_error'])
        self.lease_one(T + 5, k)
        self.assertEqual(self.q.ack(T + 6, k), 1)
        rec = self.pub_ready(T + 10, every=60, at=T + 10, tries=(2, 0, 2))
        self.lease_one(T + 10, rec)
        self.q.nack(T + 11, rec, '', 'flaky')
        self.lease_one(T + 12, rec)
        self.assertEqual(self.q.ack(T + 13, rec), 1)  # the next occurrence, afresh
        self.assertEqual(self.q.errors(), {})
        self.assertEqual(self.q.job(T + 14, rec)['state'], b'delayed')

    def test_purge_and_the_end_of_retention_take_the_errors_along(self):
        k = self.pub_ready()
        self.lease_one(T, k)
        self.q.nack(T + 1, k, '', 'boom')
        self.assertEqual(self.q.purge(), 1)
        self.assertFalse(self.r.exists(self.q.key(b'e')))
        # A stray entry (an older library's ACK, which knew no errors) goes with the counters.
        k = self.pub_ready()
        self.lease_one(T, k)
        self.assertEqual(self.q.ack(T + 1, k), 1)
        self.r.hset(self.q.key(b'e'), b'stray', b'x')
        self.q.pump(T + 2 + RETAIN_MS)
        self.assertFalse(self.r.exists(self.q.key(b's')))
        self.assertFalse(self.r.exists(self.q.key(b'e')))

    def test_a_snooze_spends_no_try_records_nothing_and_ignores_backoff(self):
        k = self.pub_ready(backoff=60)  # one try
        for n in range(1, 4):
            job = self.lease_one(T + n * 10, k)
            self.assertEqual((job['tries_left'], job['attempt']), (0, n))
            self.assertEqual(self.q.nack(T + n * 10 + 1, k, '', None, 'keep'), 1)
            self.stat(ready=1, dead=0, nacked_total=n)
            self.assertEqual(self.q.stored(k)['tries'], (1, n, 1))
        self.assertEqual(self.q.errors(), {})
        self.lease_one(T + 100, k)
        self.assertEqual(self.q.nack(T + 101, k, 2000, 'waiting for the bank', 'keep'), 1)
        j = self.q.job(T + 101, k)
        self.assertEqual((j['state'], j['due'], j['tries_left'], j['last_error']),
                         (b'delayed', T + 2101, 1, b'waiting for the bank'))
        # A plain NACK after the snoozes spends the one try: dead.
        self.q.pump(T + 2101)
        self.lease_one(T + 2101, k)
        self.assertEqual(self.q.nack(T + 2102, k), 1)
        self.stat(dead=1)

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

    def test_nack_undo_gives_an_undelivered_lease_back_at_the_head_counted_as_undelivered(self):
        k1 = self.pub_ready(T, tries=(2, 0, 2))
        k2 = self.pub_ready(T)
        self.lease_one(T + 1, k1)
        self.stat(consumed_total=1, undelivered_total=0)
        self.assertEqual(self.q.call('nack', T + 2, k1, '', 'undo'), 1)
        # Not a delivery: tries and attempt are as before the consume, no nack. consumed_total
        # keeps the lease (a counter never goes down); undelivered_total counts it given back.
        self.stat(ready=2, leased=0, consumed_total=1, undelivered_total=1, nacked_total=0)
        left, jobs = self.q.consume(T + 3, count=2)
        self.assertEqual([(j['id'], j['tries_left'], j['attempt']) for j in jobs],
                         [(k1, 1, 1), (k2, 0, 1)])
        # Two deliveries: three leases, one of them undelivered.
        self.stat(consumed_total=3, undelivered_total=1)
        # An undo of a job that is not leased (any more) changes nothing and counts nothing.
        self.assertEqual(self.q.ack(T + 4, k1), 1)
        self.assertEqual(self.q.call('nack', T + 5, k1, '', 'undo'), 0)
        self.stat(consumed_total=3, undelivered_total=1, nacked_total=0)

    def test_touch_of_a_job_that_is_not_leased_is_0(self):
        k = self.pub_ready()
        self.assertEqual(self.q.touch(T, k), 0)
        self.assertEqual(self.q.touch(T, custom_key(b'nope'), 100), 0)
        self.stat(ready=1, leased=0)


class CronTest(ScriptTest):
    """CRON schedules in the scripts (docs/commands.md CRON): each reschedule finds the next
    occurrence in the job's zone, across daylight-saving changes both ways, on a fake clock (the
    now_ms argument). Instants are UTC ms of 2026's changes."""

    def cron_job(self, first, block, key=None, **kw):
        if key is None:
            return self.pub_delayed(first - 60000, first, sched=block, at=first, **kw)
        self.assertEqual(self.q.publish(first - 60000, key, record(first - 60000, sched=block,
                                                                   at=first, **kw), first), [1])
        return key

    def deliver(self, k, due, ack_after=10):
        """The occurrence due at `due` is delivered and acked ack_after ms later; the next due."""
        job = self.q.job(due - 1, k)
        self.assertEqual((job['state'], job['due']), (b'delayed', due))
        self.q.pump(due)
        self.lease_one(due + 5, k)
        self.assertEqual(self.q.ack(due + ack_after, k), 1)
        return self.q.job(due + ack_after + 1, k)['due']

    def test_paris_spring_forward_fires_the_missing_time_once_at_the_change(self):
        # 30 2 * * * TZ Europe/Paris: 2026-03-29 02:30 does not exist (02:00 CET -> 03:00 CEST).
        block = sched_block([30], [2], zone=PARIS, text=b'30 2 * * *', zone_name=b'Europe/Paris')
        k = self.cron_job(1774661400000, block)  # 03-28 02:30 CET
        self.assertEqual(self.deliver(k, 1774661400000), 1774746000000)  # 03-29 03:00 CEST
        self.assertEqual(self.deliver(k, 1774746000000), 1774830600000)  # 03-30 02:30 CEST
        job = self.q.job(1774830600000 - 5, k)
        self.assertEqual((job['cron'], job['tz'], job['every']),
                         (b'30 2 * * *', b'Europe/Paris', 0))

    def test_new_york_fall_back_fires_the_repeated_time_once(self):
        # 30 1 * * * TZ America/New_York: 2026-11-01 01:30 happens twice (EDT, then EST).
        block = sched_block([30], [1], zone=NEW_YORK)
        k = self.cron_job(1793424600000, block, key=custom_key(b'nightly'))
        self.assertEqual(self.deliver(k, 1793424600000), 1793511000000)  # 11-01 01:30 EDT
        self.assertEqual(self.deliver(k, 1793511000000), 1793601000000)  # 11-02 01:30 EST

    def test_qstat_counts_schedules_until_they_are_cancelled_or_replaced(self):
        every = self.pub_delayed(T, T + 120000, every=60, at=T + 120000)
        cron = self.cron_job(T + 60000, sched_block([0], None))
        self.stat(schedules=2)
        self.q.pump(T + 60000)
        self.lease_one(T + 60005, cron)
        self.assertEqual(self.q.ack(T + 60010, cron), 1)  # the next occurrence: still one
        self.pub_ready()  # a one-off job counts nowhere
        self.stat(schedules=2)
        # REPLACE by a one-off job ends a schedule; replacing one schedule by another does not.
        self.assertEqual(self.q.publish(T + 1, every, record(T + 1), T + 1, 'replace'), [2])
        self.stat(schedules=1)
        self.assertEqual(self.q.publish(T + 2, cron, record(T + 2, every=5, at=T + 5002),
                                        T + 5002, 'replace'), [2])
        self.stat(schedules=1)
        self.assertEqual(self.q.cancel(T + 3, cron), 1)
        self.stat(schedules=0)

    def test_every_half_hour_runs_through_both_passes_of_the_repeated_hour(self):
        block = sched_block([0, 30], None, zone=PARIS)
        due = 1792886400000  # 2026-10-25 02:00 CEST
        seen = [due]
        k = self.cron_job(due, block)
        for _ in range(4):
            due = self.deliver(k, due)
            seen.append(due)
        self.assertEqual(seen, [1792886400000, 1792888200000, 1792890000000, 1792891800000,
                                1792893600000])

    def test_missed_occurrences_fire_once_then_the_schedule_goes_on_from_now(self):
        block = sched_block([30], [2], zone=PARIS)
        k = self.cron_job(1774661400000, block)
        week = 7 * 86400000
        # Acked a week late (no deferq ran): the next occurrence is the first after the ack.
        self.assertEqual(self.deliver(k, 1774661400000, ack_after=week), 1775349000000)
        self.stat(ready=0, delayed=1, acked_total=1)

    def test_a_failing_occurrence_goes_dead_as_its_own_job_and_the_schedule_goes_on(self):
        block = sched_block([0], [9], zone=NEW_YORK, weekdays=[1, 2, 3, 4, 5])
        first = 1772805600000  # 2026-03-06 (a Friday) 09:00 EST
        k = self.cron_job(first, block)
        self.q.pump(first)
        self.lease_one(first + 5, k)
        self.assertEqual(self.q.nack(first + 10, k, '', 'smtp down'), 1)
        dead = self.q.dl_peek_errors(first + 20)
        self.assertEqual(len(dead), 1)
        self.assertNotEqual(dead[0][0], k)
        self.assertEqual(dead[0][1:3], (b'smtp down', 1))
        # Monday 09:00 EDT, after the spring change (13:00 UTC).
        job = self.q.job(first + 20, k)
        self.assertEqual((job['state'], job['due'], job['last_error']),
                         (b'delayed', 1773061200000, None))
        self.stat(dead=1, delayed=1)


class FenceTest(ScriptTest):
    """Lease fencing (ACK/NACK/TOUCH ... ATTEMPT n, docs/commands.md): only the lease of that
    attempt acts; any other answers -1 (STALE) and changes nothing."""

    def test_only_the_lease_of_the_attempt_acks_nacks_or_touches(self):
        k = self.pub_ready(tries=(3, 0, 3))
        self.lease_one(T + 1, k, ttr=1000)  # attempt 1
        self.q.pump(T + 1002)  # its lease ran out: ready again
        self.lease_one(T + 1003, k)  # attempt 2, another worker
        self.assertEqual(self.q.call('ack', T + 1004, k, hint(k), 1), -1)
        self.assertEqual(self.q.call('nack', T + 1004, k, '', '', '', 1), -1)
        self.assertEqual(self.q.call('touch', T + 1004, k, '', 1), -1)
        self.stat(leased=1, acked_total=0, nacked_total=0)
        self.assertEqual(self.q.call('touch', T + 1005, k, '5000', 2), 1)
        self.assertEqual(self.q.call('nack', T + 1006, k, '', '', 'busy', 2), 1)  # ready again
        self.assertEqual(self.q.call('ack', T + 1007, k, hint(k), 2), -1)  # ready: no lease
        self.lease_one(T + 1008, k)  # attempt 3
        self.assertEqual(self.q.call('ack', T + 1009, k, hint(k), 3), 1)
        self.assertEqual(self.q.call('ack', T + 1010, k, hint(k), 3), 0)  # gone
        self.stat(ready=0, leased=0, acked_total=1, nacked_total=1)

    def test_a_fenced_ack_of_a_delayed_or_recurring_job(self):
        d = self.pub_delayed(T, T + 5000)
        self.assertEqual(self.q.call('ack', T + 1, d, hint(d), 0), -1)  # delayed: no lease
        rec = self.pub_ready(T + 2, every=60, at=T + 2)
        self.lease_one(T + 3, rec)
        self.assertEqual(self.q.call('ack', T + 4, rec, hint(rec), 1), 1)
        self.assertEqual(self.q.job(T + 5, rec)['due'], T + 60002)  # rescheduled as by ACK
        self.stat(delayed=2, acked_total=1)


class ResultTest(ScriptTest):
    """Results (docs/commands.md CALL, RESULT, RETAIN): a one-off job with RETAIN keeps its
    outcome in P.."f:"..K for its retention once it finishes; one someone waits for (L_NOTIFY) is
    announced on dq:ready as "done ns/q " + u16 #K + K + outcome + u16 attempt + u48 when + text."""

    def setUp(self):
        super().setUp()
        self.ps = self.r.pubsub()
        self.ps.subscribe('dq:ready')
        self.ps.get_message(timeout=1)  # the subscription's confirmation

    def tearDown(self):
        self.ps.close()
        super().tearDown()

    def news(self):
        out = []
        while True:
            m = self.ps.get_message(timeout=0.2)
            if m is None:
                return out
            if m['type'] == 'message':
                out.append(m['data'])

    def done(self, k, outcome, attempt, when, text=b''):
        return (b'done ' + self.q.tag + b' ' + struct.pack('>H', len(k)) + k + outcome +
                struct.pack('<H', attempt) + when.to_bytes(6, 'little') + text)

    def test_ack_result_kept_for_the_retention_and_announced(self):
        k = self.pub_ready(retain=60, notify=True)
        self.lease_one(T + 1, k)
        self.assertEqual(self.q.ack_one(T + 2, k, result=b'42\x00ok'), 1)
        self.assertEqual(self.news(), [self.done(k, b'f', 1, T + 2, b'42\x00ok')])
        self.assertTrue(55000 < self.r.pttl(self.q.result_key(k)) <= 60000)
        j = self.q.job(T + 3, k)
        self.assertEqual((j['state'], j['payload'], j['attempt'], j['result'], j['finished_ms'],
                          j['created']), (b'finished', None, 1, b'42\x00ok', T + 2, T))
        self.assertEqual(self.q.await_(T + 3, k), [b'finished', b'42\x00ok', 1, T + 2])
        self.stat(ready=0, leased=0, acked_total=1)
        # The kept outcome holds the id as KEEP does; REPLACE drops it.
        c = custom_key(b'order-1')
        self.assertEqual(self.q.publish(T + 4, c, record(T + 4, retain=60), mode='id'), [1])
        self.lease_one(T + 5, c)
        self.assertEqual(self.q.ack_one(T + 6, c, result=b'r1'), 1)
        self.assertEqual(self.q.publish(T + 7, c, record(T + 7), mode='id'), [0])
        self.assertEqual(self.q.await_(T + 8, c), [b'finished', b'r1', 1, T + 6])
        self.assertEqual(self.q.publish(T + 9, c, record(T + 9), mode='replace'), [1])
        self.assertFalse(self.r.exists(self.q.result_key(c)))
        self.assertEqual(self.q.job(T + 10, c)['state'], b'ready')

    def test_a_job_without_flags_keeps_nothing(self):
        k = self.pub_ready()
        self.lease_one(T + 1, k)
        self.assertEqual(self.q.ack_one(T + 2, k, result=b'dropped'), 1)
        self.assertEqual(self.news(), [])
        self.assertEqual(self.q.all_keys(), {self.q.P + b's'})
        self.assertIsNone(self.q.await_(T + 3, k))
        # Batched one-id ACKs (acks.lua) retire too, without a result.
        k2 = self.pub_ready(T + 4, retain=30)
        self.lease_one(T + 5, k2)
        self.assertEqual(self.q.call('acks', T + 6, k2, hint(k2)), [1])
        self.assertEqual(self.q.await_(T + 7, k2), [b'finished', b'', 1, T + 6])

    def test_await_marks_a_live_job_wherever_it_is(self):
        d = self.pub_delayed(T, T + 5000, retain=10)  # in its bucket
        c = custom_key(b'c1')
        self.assertEqual(self.q.publish(T, c, record(T), T + 3000, mode='id'), [1])  # indexed
        r = self.pub_ready(T + 1)
        for k in (d, c, r):
            self.assertEqual(self.q.await_(T + 2, k)[0], b'live')
        self.assertEqual(self.q.await_(T + 2, r), [b'live', b'ready'])
        self.assertEqual(self.q.await_(T + 2, d), [b'live', b'delayed'])
        self.assertIsNone(self.q.await_(T + 2, gen_key(T + 9)))
        self.q.pump(T + 3000, lazy=1)  # c staged and moved to ready, d staged later
        self.q.pump(T + 5000, lazy=1)
        left, jobs = self.q.consume(T + 5001, count=3)
        self.assertEqual(sorted(j['id'] for j in jobs), sorted([d, c, r]))
        self.assertEqual(self.q.ack(T + 5002, d, c, r), 3)
        self.assertEqual(sorted(self.news()), sorted([
            self.done(d, b'f', 1, T + 5002), self.done(c, b'f', 1, T + 5002),
            self.done(r, b'f', 1, T + 5002)]))
        self.assertEqual(self.q.await_(T + 5003, d), [b'finished', b'', 1, T + 5002])
        self.assertIsNone(self.q.await_(T + 5003, c))  # no RETAIN: nothing kept
        every = self.pub_ready(T + 5004, every=60, at=T + 5004)
        self.assertEqual(self.q.await_(T + 5005, every), [b'recurring'])

    def test_expired_cancelled_and_dead(self):
        x = self.pub_ready(ttl=1, retain=60, notify=True)
        c = self.pub_ready(T + 1, retain=60, notify=True)
        self.assertEqual(self.q.cancel(T + 2, c), 1)
        left, jobs = self.q.consume(T + 1500)  # x expired when met: c's turn is gone too
        self.assertEqual(jobs, [])
        self.assertEqual(self.news(), [self.done(c, b'c', 0, T + 2), self.done(x, b'x', 0, T + 1500)])
        self.assertEqual(self.q.job(T + 1501, x)['state'], b'expired')
        self.assertEqual(self.q.await_(T + 1501, c), [b'cancelled', b'', 0, T + 2])
        # An expired delayed job met by the staging, and one met by the pump's head walk.
        s = self.pub_delayed(T + 2000, T + 2500, ttl=1, retain=5, notify=True)
        self.q.pump(T + 3500, lazy=1)
        self.assertEqual(self.q.await_(T + 3501, s)[0], b'expired')
        self.assertEqual(self.news(), [self.done(s, b'x', 0, T + 3500)])
        d = self.pub_ready(T + 4000, notify=True)
        self.lease_one(T + 4001, d)
        self.assertEqual(self.q.nack(T + 4002, d, reason=b'smtp down'), 1)
        self.assertEqual(self.news(), [self.done(d, b'd', 1, T + 4002, b'smtp down')])
        self.assertEqual(self.q.await_(T + 4003, d), [b'dead', b'smtp down', 1, T + 4002])
        self.stat(dead=1, expired_total=2, cancelled_total=1)

    def test_replace_carries_the_mark_and_a_fenced_ack_with_result(self):
        c = custom_key(b'r1')
        self.assertEqual(self.q.publish(T, c, record(T, tries=(2, 0, 2), notify=True),
                                        mode='id'), [1])
        self.assertEqual(self.q.publish(T + 1, c, record(T + 1, payload=b'v2'), mode='replace'),
                         [2])
        self.assertTrue(decode_record(self.r.hget(self.q.P + b'j', c))['notify'])
        self.lease_one(T + 2, c)
        self.assertEqual(self.q.ack_one(T + 3, c, result=b'x', attempt=2), -1)  # stale
        self.assertEqual(self.q.ack_one(T + 3, c, result=b'v2 done', attempt=1), 1)
        self.assertEqual(self.news(), [self.done(c, b'f', 1, T + 3, b'v2 done')])


class PriorityTest(ScriptTest):
    """PRIORITY n (docs/commands.md): the ready jobs with a priority sit in P.."h" and CONSUME
    takes them first, the highest level first and FIFO within a level; every way back to ready
    (NACK, a lease that ran out, staging, RESPAWN) keeps the level."""

    def pub(self, now, payload, level=0, **kw):
        k = gen_key(now)
        self.assertEqual(self.q.publish(now, k, record(now, payload=payload, level=level, **kw)),
                         [1])
        return k

    def order(self, now, n=10):
        return [j['payload'] for j in self.q.consume(now, 30000, n)[1]]

    def test_higher_levels_first_and_fifo_within_a_level(self):
        for i, (p, level) in enumerate([(b'a', 0), (b'b', 2), (b'c', 1), (b'd', 2), (b'e', 0),
                                        (b'f', 9)]):
            self.pub(T + i, p, level)
        self.assertEqual([j['payload'] for j in self.q.peek(T + 10, 10)],
                         [b'f', b'b', b'd', b'c', b'a', b'e'])
        self.assertEqual(self.order(T + 10, 3), [b'f', b'b', b'd'])
        self.assertEqual(self.order(T + 11), [b'c', b'a', b'e'])
        self.stat(ready=0, leased=6)

    def test_nack_and_an_expired_lease_put_it_back_at_its_level(self):
        self.pub(T, b'plain')
        k = self.pub(T + 1, b'urgent', 3, tries=(3, 0, 3))
        self.assertEqual(self.order(T + 2, 1), [b'urgent'])
        self.assertEqual(self.q.nack(T + 3, k), 1)
        self.assertEqual(self.order(T + 4, 1), [b'urgent'])  # before the older plain job
        self.q.pump(T + 4 + 30001)  # its lease ran out: ready again, at its level
        self.assertEqual(self.q.job(T + 30006, k)['priority'], 3)
        self.assertEqual(self.order(T + 30006, 1), [b'urgent'])
        self.assertEqual(self.q.call('nack', T + 30007, k, '', 'undo'), 1)  # back at the head
        self.assertEqual(self.order(T + 30008, 2), [b'urgent', b'plain'])

    def test_delayed_jobs_keep_their_level_through_staging(self):
        due = T + 1500
        for i, (p, level) in enumerate([(b'p0', 0), (b'p4', 4), (b'q0', 0), (b'q4', 4)]):
            k = gen_key(due + i)
            self.assertEqual(self.q.publish(T, k, record(T, payload=p, level=level), due + i),
                             [1])
        self.q.pump(T + 1000)  # stages the second (the look-ahead) before it is due
        # A publish into the staged second waits in P.."j" with its level in its member.
        late = gen_key(due + 9)
        self.assertEqual(self.q.publish(T + 1001, late, record(T + 1001, payload=b'l7', level=7),
                                        due + 9), [1])
        self.q.pump(due + 20)
        self.assertEqual(self.order(due + 21), [b'l7', b'p4', b'q4', b'p0', b'q0'])

    def test_cancel_and_replace_of_a_ready_job_with_a_priority(self):
        k = self.pub(T, b'high', 5)
        self.assertEqual(self.q.cancel(T + 1, k), 1)
        self.assertFalse(self.r.exists(self.q.key(b'h')))
        # A plain job republished with a priority: its old P.."r" entry is stale, one delivery.
        c = custom_key(b'same')
        self.assertEqual(self.q.publish(T + 2, c, record(T + 2, payload=b'v1'), T + 2, 'id'), [1])
        self.pub(T + 3, b'other')
        self.assertEqual(self.q.publish(T + 4, c, record(T + 4, payload=b'v2', level=1), T + 4,
                                        'replace'), [2])
        self.assertEqual(self.order(T + 5), [b'v2', b'other'])
        self.stat(ready=0, leased=2)

    def test_respawn_keeps_the_level_and_the_pump_expires_the_head_of_p_h(self):
        k = self.pub(T, b'dies', 2)
        self.assertEqual(self.order(T + 1, 1), [b'dies'])
        self.assertEqual(self.q.nack(T + 2, k), 1)  # one try: dead
        self.pub(T + 3, b'plain')
        self.assertEqual(self.q.dl_respawn(T + 4), 1)
        self.assertEqual(self.q.stored(k)['level'], 2)
        self.assertEqual(self.order(T + 5, 1), [b'dies'])
        self.q.ack(T + 6, k)
        short = self.pub(T + 10, b'short', 6, ttl=1)
        self.q.pump(T + 1011)  # its ttl passed while it waited at the head of P.."h"
        self.assertIsNone(self.q.job(T + 1012, short))
        self.stat(ready=1, expired_total=1)
