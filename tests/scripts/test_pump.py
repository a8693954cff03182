"""Script tests of due work and reads: pump.lua (due jobs, expired leases, staging), recurring
jobs, the read-only scripts (job.lua, peek.lua, qstat.lua) and deadletter.lua.

Run by tests/scripts/test_scripts.py, which runs every script test file against one
redis-server; the shared part is scriptlib.py.
"""

import struct

import redis

from scriptlib import (
    CALLED, DELAYED, DUE, FILL_DUE, LEASED, REGISTRY, RETAIN_MS, SEC, SPARSE, T, check_invariants,
    custom_key, gen_key, jobs_of, record, Queue, ScriptTest)


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

    def test_the_ready_heads_expiry_is_known_without_a_read_when_the_pump_made_the_head(self):
        """Nothing ready before: the lone due job this call staged is the ready list's head, and
        its expiry (next_due) is read from its record in hand (no LINDEX, no HGET); any other
        list is read as before, with the same answer."""
        for every, ttl, ready_before in ((0, 60, False), (0, 0, False), (60, 30, False),
                                         (0, 60, True)):
            with self.subTest(every=every, ttl=ttl, ready_before=ready_before):
                self.setUp()
                self.fill_staging()  # the due job waits in its bucket
                old = self.pub_ready(T, ttl=20) if ready_before else None
                self.pub_delayed(T, T + 1500, ttl=ttl, every=every)
                self.r.config_resetstat()
                p = self.q.pump(T + 1500)
                ran = self.commands_run()
                self.assertEqual(p['made'], 1)
                if ready_before:
                    self.assertEqual(ran.get('lindex'), 1)
                    self.assertEqual(p['next_due'], T + 20 * 1000 + 1)  # the older head's
                    self.assertEqual(self.q.peek(T + 1500, 1)[0]['id'], old)
                    continue
                self.assertNotIn('lindex', ran)
                if ttl == 0:
                    self.assertEqual(p['next_due'], FILL_DUE)
                else:  # an occurrence's ttl counts from its due time
                    base = T + 1500 if every else T
                    self.assertEqual(p['next_due'], base + ttl * 1000 + 1)

    def test_the_ready_heads_expiry_of_a_job_moved_from_staging_is_read_by_its_key(self):
        """Nothing ready before, and the due job comes from P.."w" (staged by an earlier call):
        the new head's record is read by its key (one HGET, no LINDEX) for next_due, an
        occurrence of a recurring job's too; when its ttl has passed meanwhile, the general path
        finds and removes it."""
        for late, every in ((False, 0), (True, 0), (False, 60)):
            with self.subTest(late=late, every=every):
                self.setUp()
                first = self.pub_delayed(T, T + 1100)
                self.assertEqual(self.q.pump(T + 1100)['made'], 1)  # stages second SEC + 1
                self.lease_one(T + 1100, first)
                # Published into a staged second: staged at once, into P.."w".
                k = self.pub_delayed(T + 1200, T + 1500, ttl=5, every=every)
                self.assertEqual(self.r.zcard(self.q.key(b'w')), 1)
                now = T + 6201 if late else T + 1500  # it expires after T + 6200
                self.r.config_resetstat()
                p = self.q.pump(now)
                ran = self.commands_run()
                self.assertEqual(p['made'], 1)
                if late:
                    self.assertIn('lindex', ran)  # the general path: (2b) in pump.lua
                    self.assertEqual(p['next_due'], T + 1100 + 30000)  # the lease's end
                    self.stat(ready=0, delayed=0, leased=1, expired_total=1)
                    continue
                self.assertNotIn('lindex', ran)
                self.assertEqual(ran.get('hget'), 1)
                # An occurrence's ttl counts from its due time.
                self.assertEqual(p['next_due'], (T + 1500 if every else T + 1200) + 5000 + 1)
                self.assertEqual(self.q.peek(now, 1)[0]['id'], k)
                self.stat(ready=1, delayed=0, leased=1)

    def test_second_boundaries(self):
        a = self.pub_delayed(T, T + 999)
        b = self.pub_delayed(T, T + 1000)
        self.assertEqual(self.q.pump(T + 998)['next_due'], T + 999)
        self.assertEqual(self.q.pump(T + 999)['made'], 1)
        p = self.q.pump(T + 999)
        self.assertEqual((p['made'], p['next_due']), (0, T + 1000))
        self.assertEqual(self.q.pump(T + 1000)['made'], 1)
        self.assertEqual([j['id'] for j in self.q.peek(T + 1000, 5)], [a, b])

    def test_next_due_before_a_bucket_is_staged_is_its_first_job_while_sparse(self):
        # A sparse bucket (common/staging.lua SPARSE) is staged by the call that moves its first job.
        self.fill_staging()
        self.pub_delayed(T, T + 3789)
        self.pub_delayed(T, T + 3456)
        self.assertEqual(self.q.pump(T)['next_due'], T + 3456)
        self.assertEqual(self.q.pump(T + 3456)['made'], 1)
        # A fuller one is staged ahead (here without a look-ahead: at the start of its second).
        for i in range(SPARSE + 1):
            self.pub_delayed(T, T + 5100 + i)
        self.assertEqual(self.q.pump(T + 3789), {'made': 1, 'more': 0, 'next_due': T + 5000,
                                                 'lateness': [0]})
        self.assertEqual(self.q.pump(T + 5000)['next_due'], T + 5100)
        self.assertEqual(self.q.pump(T + 5200)['made'], SPARSE + 1)

    def test_jobs_added_to_a_staged_second_move_on_time(self):
        self.fill_staging()
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

    def test_jobs_found_due_when_staged_skip_the_index_and_keep_due_order(self):
        first = [self.pub_delayed(T, T + 1000 + i) for i in range(SPARSE + 2)]
        p = self.q.pump(T + 1005)  # stages second SEC+1: six jobs due already
        self.assertEqual(p['made'], 6)
        self.assertEqual(self.q.r.zcard(self.q.key(b'w')), SPARSE + 2 - 6)
        later = self.pub_delayed(T, T + 2000)  # a sparse bucket, staged when due
        p = self.q.pump(T + 2500)  # the indexed ones and the direct one, merged in due order
        self.assertEqual(p['made'], SPARSE + 2 - 6 + 1)
        self.assertEqual(self.q.r.zcard(self.q.key(b'w')), 0)
        left, jobs = self.q.consume(T + 2500, count=100)
        self.assertEqual([j['id'] for j in jobs], first + [later])
        self.stat(ready=0, delayed=0, leased=SPARSE + 3)

    def test_cancelled_staged_job_leaves_no_index_entry(self):
        self.fill_staging()
        keep = self.pub_delayed(T, T + 5000)
        k = self.pub_delayed(T, T + 900)
        self.q.pump(T + 1)
        self.assertEqual(self.q.r.zcard(self.q.key(b'w')), SPARSE + 1)
        self.q.cancel(T + 2, k)
        self.assertEqual(self.q.r.zcard(self.q.key(b'w')), SPARSE)
        self.assertEqual(self.q.pump(T + 900), {'made': 0, 'more': 0, 'next_due': T + 5000,
                                                'lateness': []})
        self.assertEqual(self.q.r.zcard(self.q.key(b'w')), SPARSE)
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
        # Empty: its counters are kept until its retention ends.
        self.assertEqual(self.r.zscore(DUE, self.q.tag), T + 70011 + RETAIN_MS)

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
        """Found when its bucket is staged, it is never made ready. Staged at its publish (a queue
        with few delayed jobs), it moves to the ready list unread and (2b) in pump.lua drops it
        in the same call, as it does for a ttl that passes between staging and the due time."""
        for in_bucket in (True, False):
            with self.subTest(in_bucket=in_bucket):
                self.setUp()
                filled = SPARSE if in_bucket else 0
                if in_bucket:
                    self.fill_staging()
                self.pub_delayed(T, T + 5000, ttl=5)
                self.assertEqual(self.q.pump(T + 5001)['made'], 0 if in_bucket else 1)
                self.stat(ready=0, delayed=filled, expired_total=1)
                self.assertEqual(self.q.consume(T + 5001)[1], [])

    def test_custom_id_of_nine_chars_is_not_mistaken_for_a_derivable_field(self):
        self.fill_staging()
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

    def test_an_occurrence_out_of_tries_dies_as_a_job_of_its_own_and_the_schedule_goes_on(self):
        k = self.pub_delayed(T, T + 10000, every=60, tries=(2, 0, 2), ttl=0, payload=b'tick')
        self.q.pump(T + 10000)
        self.lease_one(T + 10000, k, ttr=1000)
        self.q.pump(T + 11000)  # the lease ends: tries are left
        self.lease_one(T + 11000, k, ttr=1000)
        self.q.pump(T + 12000)  # the last try's lease ends
        self.stat(dead=1, delayed=1, ready=0, dead_total=1)
        j = self.q.job(T + 12000, k)
        self.assertEqual((j['state'], j['due'], j['tries_left'], j['attempt'], j['last_error']),
                         (b'delayed', T + 70000, 2, 0, None))
        [(d, reason, att, at)] = self.q.dl_peek_errors(T + 12000)
        self.assertEqual((reason, att, at), (b'lease expired', 2, T + 12000))
        self.assertNotEqual(d, k)
        self.assertEqual((len(d), d[:6], d[6]), (16, struct.pack('>Q', T + 12000)[2:], 0))
        [dead] = self.q.dl_peek(T + 12000)
        self.assertEqual((dead['id'], dead['payload'], dead['tries_left'], dead['attempt']),
                         (d, b'tick', 0, 2))
        jd = self.q.job(T + 12000, d, use_hint=False)
        self.assertEqual((jd['state'], jd['every'], jd['ttl_left']), (b'dead', 0, -1))
        # The next occurrence comes; a NACK on its last try kills another copy, of its own id.
        self.assertEqual(self.q.pump(T + 70000)['made'], 1)
        self.lease_one(T + 70000, k)
        self.assertEqual(self.q.nack(T + 70001, k, '', 'boom'), 1)
        self.lease_one(T + 70002, k)
        self.assertEqual(self.q.nack(T + 70003, k, '', 'boom again'), 1)
        self.stat(dead=2, delayed=1)
        self.assertEqual(self.q.job(T + 70003, k)['due'], T + 130000)
        errors = self.q.dl_peek_errors(T + 70003, 10)
        self.assertEqual([e[1:] for e in errors],
                         [(b'lease expired', 2, T + 12000), (b'boom again', 2, T + 70003)])
        self.assertEqual(len({d, errors[1][0], k}), 3)
        # A copy is a one-off job: respawned, consumed and acked, it is gone; the schedule stays.
        self.assertEqual(self.q.dl_respawn(T + 80000, 10), 2)
        for _ in range(2):
            job = self.q.consume(T + 80000)[1][0]
            self.assertEqual(self.q.ack(T + 80001, job['id']), 1)
        self.stat(dead=0, ready=0, delayed=1)

    def test_a_shards_dead_copy_carries_the_shard_number_in_its_shard_byte(self):
        q = Queue(self.r, self.shas, name='q#3', checker=self.q.checker)
        k = gen_key(T)
        self.assertEqual(q.publish(T, k, record(T, every=60, payload=b's')), [1])
        self.assertEqual(len(q.consume(T)[1]), 1)
        self.assertEqual(q.nack(T + 1, k), 1)
        [(d, reason, _, _)] = q.dl_peek_errors(T + 1)
        self.assertEqual((d[6], reason), (3, b'nacked'))

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
        self.q.pump(T + 15001)
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

    def test_qstats_answers_each_queues_qstat_in_one_call(self):
        self.pub_ready(ttl=100)
        self.pub_delayed(T, T + 3000)
        one = self.q.call('qstat')
        prefix = self.q.keys[0]
        other = prefix.replace(b'}:', b'-none}:') if isinstance(prefix, bytes) else \
            prefix.replace('}:', '-none}:')
        CALLED.add('qstats')
        both = self.q.r.fcall(self.q.shas['qstats'], 2, prefix, other, 2)
        self.assertEqual(both, one + [0] * len(one))
        self.assertEqual(one[:2], [1, 1])

    def test_job_reports_every_state(self):
        d = self.pub_delayed(T, T + 3000, backoff=7, tries=(2, 0, 2))
        self.assertEqual(self.q.job(T, d), {'state': b'delayed', 'payload': b'p',
                                            'tries_left': 2, 'attempt': 0, 'created': T,
                                            'due': T + 3000, 'ttl_left': 86400, 'every': 0,
                                            'backoff': 7, 'last_error': None,
                                            'last_error_attempt': 0, 'last_error_ms': 0, 'cron': None,
                                            'tz': None, 'priority': 0, 'result': None,
                                            'finished_ms': 0})
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


class LazyMoveTest(ScriptTest):
    """pump.lua's lazy_ms: while no consumer waits on the queue (no P.."wt" marker), the pump
    moves due staged jobs up to lazy_ms late, and every read moves or counts them itself."""

    def wait_marker(self):
        self.q.r.set(self.q.key(b'wt'), b'1', px=3000)

    def test_without_a_waiter_due_jobs_move_late_and_read_0_ms_late_unless_staged_late(self):
        self.fill_staging()
        self.pub_delayed(T, T + 500)
        self.pub_delayed(T, T + 520)
        late = self.pub_delayed(T, T + 900)
        self.assertEqual(self.q.pump(T + 1, lazy=100)['next_due'], T + 500)  # stages SEC
        # The job due at T + 520 is due within lazy_ms: the next call is at T + 600.
        self.assertEqual(self.q.pump(T + 500, lazy=100),
                         {'made': 1, 'more': 0, 'next_due': T + 600, 'lateness': [0]})
        self.assertEqual(self.q.pump(T + 600, lazy=100),
                         {'made': 1, 'more': 0, 'next_due': T + 900, 'lateness': [0]})
        self.assertEqual(self.q.pump(T + 905, lazy=100)['made'], 1)
        # A bucket staged after its jobs fell due: they became ready at this call.
        self.pub_delayed(T + 905, T + 1100)
        self.assertEqual(self.q.pump(T + 1130, lazy=100)['lateness'], [30])
        self.assertEqual(self.q.job(T + 1130, late)['state'], b'ready')
        self.stat(ready=4, delayed=SPARSE)

    def test_with_a_waiter_due_jobs_move_at_their_due_ms_with_lateness(self):
        self.pub_delayed(T, T + 500)
        self.pub_delayed(T, T + 520)
        self.q.pump(T + 1, lazy=100)
        self.wait_marker()
        self.assertEqual(self.q.pump(T + 501, lazy=100),
                         {'made': 1, 'more': 0, 'next_due': T + 520, 'lateness': [1]})

    def test_while_a_consumer_waits_reads_leave_due_jobs_to_the_pump(self):
        # The pump moves them at their due ms and times each move (lateness), as before.
        k = self.pub_delayed(T, T + 500)
        self.q.pump(T + 1, lazy=100)
        self.wait_marker()
        self.assertEqual(self.q.consume(T + 500), (0, []))
        self.assertEqual(self.q.peek(T + 500, 5), [])
        self.assertEqual(self.q.job(T + 500, k)['state'], b'delayed')
        st = self.q.qstat(T + 500)
        self.assertEqual((st['ready'], st['delayed']), (0, 1))
        self.assertEqual(self.q.pump(T + 502, lazy=100)['lateness'], [2])
        self.assertEqual([j['id'] for j in self.q.consume(T + 502)[1]], [k])

    def test_consume_takes_a_due_job_the_pump_has_not_moved(self):
        first = self.pub_ready(T)
        a = self.pub_delayed(T, T + 500)
        b = self.pub_delayed(T, T + 700)
        self.q.pump(T + 1, lazy=100)  # staged, nothing moved
        left, jobs = self.q.consume(T + 499, count=5)
        self.assertEqual(([j['id'] for j in jobs], left), ([first], 0))
        left, jobs = self.q.consume(T + 500)
        self.assertEqual(([j['id'] for j in jobs], left), ([a], 0))
        self.stat(ready=0, delayed=1, leased=2)
        # Moved by the consume: the pump finds nothing more due at T + 600.
        self.assertEqual(self.q.pump(T + 600, lazy=100)['made'], 0)
        left, jobs = self.q.consume(T + 700)
        self.assertEqual([j['id'] for j in jobs], [b])
        self.stat(ready=0, delayed=0, leased=3, consumed_total=3)

    def test_a_due_job_joins_the_ready_list_after_the_jobs_already_in_it(self):
        a = self.pub_delayed(T, T + 500)
        self.q.pump(T + 1, lazy=100)
        ready = self.pub_ready(T + 600)  # published ready before anyone read the queue
        self.assertEqual([j['id'] for j in self.q.consume(T + 650, count=5)[1]], [ready, a])

    def test_peek_job_and_qstat_show_a_due_unmoved_job_as_ready(self):
        k = self.pub_delayed(T, T + 500)
        self.q.pump(T + 1, lazy=100)
        self.assertEqual(self.q.qstat(T + 499)['ready'], 0)
        st = self.q.qstat(T + 500)
        self.assertEqual((st['ready'], st['delayed']), (1, 0))
        st = self.q.qstat()  # without now: the stored gauges
        self.assertEqual((st['ready'], st['delayed']), (0, 1))
        # qstats (the metrics poller) takes now too.
        both = self.q.r.fcall(self.q.shas['qstats'], 1, self.q.P, 1, T + 500)
        self.assertEqual(both[:2], [1, 0])
        self.assertEqual(self.q.peek(T + 499, 5), [])
        self.assertEqual(self.q.job(T + 499, k)['state'], b'delayed')
        self.assertEqual([j['id'] for j in self.q.peek(T + 500, 5)], [k])
        self.assertEqual(self.q.job(T + 500, k)['state'], b'ready')
        # The reads are read only (no-writes: they answer at maxmemory and under MISCONF): the
        # stored gauges still say delayed until the pump or a consume moves the job.
        self.stat(ready=0, delayed=1)

    def test_a_paused_queue_moves_nothing_on_consume(self):
        self.pub_delayed(T, T + 500)
        self.q.pump(T + 1, lazy=100)
        self.q.r.set(self.q.key(b'p'), b'1')
        self.assertEqual(self.q.consume(T + 600), (0, []))
        self.stat(ready=0, delayed=1)
        self.assertEqual(self.q.qstat(T + 600)['ready'], 1)

    def test_bad_lazy_and_now_arguments_are_refused(self):
        for args in ([T, 10, 0, 'x'],):
            with self.assertRaises(Exception):
                self.q.call('pump', *args)
        with self.assertRaises(Exception):
            self.q.call('qstat', 'soon')
        with self.assertRaises(Exception):
            self.q.r.fcall(self.q.shas['qstats'], 1, self.q.P, 1, 'soon')


class PumpLeaseTest(ScriptTest):
    """pump.lua's lease (ARGV[6..7]): the jobs a call makes ready go to the calling instance's
    waiting consumer in the same call, as consume.lua would lease them."""

    def setUp(self):
        super().setUp()
        self.q.r.set(self.q.key(b'wt'), b'1', px=30000)  # a consumer waits (the marker)
        self.news = self.r.pubsub()
        self.news.subscribe('dq:ready')
        self.news.get_message(timeout=1)

    def tearDown(self):
        self.news.close()
        super().tearDown()

    def pump_lease(self, now, serve, count, ttr=30000):
        reply = self.q.call('pump', now, 1000, 0, 100, serve, ttr, count)
        n = reply[4]
        return {'made': reply[0], 'more': reply[1], 'next_due': reply[2], 'ready_left': reply[3],
                'lateness': reply[5:5 + n], 'jobs': jobs_of(reply[5 + n:])}

    def heard(self):
        out = []
        while True:
            msg = self.news.get_message(timeout=0.2)
            if msg is None:
                return out
            if msg['type'] == 'message':
                out.append(msg['data'])

    def test_due_jobs_are_leased_to_the_waiting_consumer_and_nobody_hears_of_them(self):
        a = self.pub_delayed(T, T + 500)
        b = self.pub_delayed(T, T + 500)
        c = self.pub_delayed(T, T + 600)
        self.q.pump(T + 1, lazy=100)
        self.heard()
        p = self.pump_lease(T + 501, serve=2, count=2)
        self.assertEqual((p['made'], p['ready_left'], p['lateness']), (2, 0, [1, 1]))
        self.assertEqual(sorted(j['id'] for j in p['jobs']), sorted([a, b]))
        self.assertEqual([j['attempt'] for j in p['jobs']], [1, 1])
        self.assertEqual(p['next_due'], T + 600)  # the next job; the leases end later
        self.stat(ready=0, delayed=1, leased=2, consumed_total=2)
        # Announced to nobody: not the ready jobs (served here), not the list going empty again.
        self.assertEqual(self.heard(), [])
        self.assertEqual(self.q.r.zscore(self.q.key(b'l'), a), T + 501 + 30000)
        self.assertEqual(self.pump_lease(T + 600, serve=1, count=1)['jobs'][0]['id'], c)

    def test_a_lease_takes_its_count_and_what_passes_serve_is_announced(self):
        ks = [self.pub_delayed(T, T + 500 + i) for i in range(3)]
        self.q.pump(T + 1, lazy=100)
        self.heard()
        p = self.pump_lease(T + 510, serve=1, count=1)
        self.assertEqual((p['made'], p['ready_left']), (3, 2))
        self.assertEqual([j['id'] for j in p['jobs']], ks[:1])  # oldest first
        self.assertEqual(self.heard(), [b'ns/q'])
        self.stat(ready=2, leased=1)

    def test_older_ready_jobs_go_first_and_the_list_going_empty_is_announced(self):
        old = self.pub_ready(T)
        self.heard()
        k = self.pub_delayed(T, T + 500)
        self.q.pump(T + 1, lazy=100)
        self.heard()
        p = self.pump_lease(T + 500, serve=2, count=2)
        self.assertEqual([j['id'] for j in p['jobs']], [old, k])
        self.assertEqual(p['ready_left'], 0)
        # Others may have heard of `old`: the list's emptying is news for them.
        self.assertEqual(self.heard(), [b'empty ns/q'])

    def test_due_jobs_go_to_the_consumer_without_passing_through_the_ready_list(self):
        # Nothing ready before them: the direct lease (common/moving.lua holdable, lease_held).
        ks = [self.pub_delayed(T, T + 500 + i, payload=b'p%d' % i) for i in range(3)]
        self.q.pump(T + 1, lazy=100)
        self.heard()
        self.r.config_resetstat()
        p = self.pump_lease(T + 510, serve=3, count=2, ttr=5000)
        ran = self.commands_run()
        for cmd in ('lpop', 'del', 'zpopmin'):
            self.assertNotIn(cmd, ran)  # the two leased jobs never were in P.."r"
        self.assertEqual(ran['rpush'], 1)  # the third one is
        self.assertEqual([j['id'] for j in p['jobs']], ks[:2])  # due order
        self.assertEqual([j['payload'] for j in p['jobs']], [b'p0', b'p1'])
        self.assertEqual([(j['attempt'], j['tries_left']) for j in p['jobs']], [(1, 0), (1, 0)])
        self.assertEqual((p['made'], p['ready_left'], p['lateness']), (3, 1, [10, 9, 8]))
        self.assertEqual(self.q.r.zscore(self.q.key(b'l'), ks[0]), T + 510 + 5000)
        self.stat(ready=1, delayed=0, leased=2, consumed_total=2)
        self.assertEqual(self.heard(), [])  # the third one: within serve, the caller's to offer
        self.assertEqual(p['next_due'], T + 510 + 5000)  # the leases end before ks[2] expires
        left, jobs = self.q.consume(T + 511)
        self.assertEqual(([j['id'] for j in jobs], left), ([ks[2]], 0))

    def test_jobs_this_call_staged_and_leased_need_no_read_of_the_ready_list(self):
        """A sparse bucket staged by the call at its due ms (no earlier pump), all its jobs
        leased: they never were in the list, which stays empty (not read)."""
        self.staged_and_leased(count=3)

    def test_a_job_this_call_staged_and_pushed_is_the_heads_expiry_without_a_read(self):
        """As above with one job left over: it is the list's head, its expiry known from its
        record in hand."""
        ks = self.staged_and_leased(count=2)
        self.assertEqual(self.q.peek(T + 1510, 1)[0]['id'], ks[2])
        self.q.r.delete(self.q.key(b'wt'))
        self.assertEqual(self.q.pump(T + 1600 + 50000)['next_due'], T + 600 * 1000 + 1)

    def staged_and_leased(self, count):
        ks = [self.pub_delayed(T, T + 1500 + i, ttl=600) for i in range(3)]
        self.r.config_resetstat()
        p = self.pump_lease(T + 1510, serve=3, count=count, ttr=50000)
        self.assertNotIn('lindex', self.commands_run())
        self.assertEqual([j['id'] for j in p['jobs']], ks[:count])
        self.assertEqual(p['ready_left'], 3 - count)
        # The head (ks[2], when not leased) expires at T + 600 s, after the leases end.
        self.assertEqual(p['next_due'], T + 1510 + 50000)
        return ks

    def test_a_recurring_due_job_is_leased_through_the_ready_list_as_before(self):
        k = self.pub_delayed(T, T + 500, every=60)
        self.q.pump(T + 1, lazy=100)
        self.r.config_resetstat()
        p = self.pump_lease(T + 500, serve=1, count=1)
        self.assertEqual(self.commands_run()['lpop'], 1)  # consume.lua's path
        self.assertEqual([(j['id'], j['attempt']) for j in p['jobs']], [(k, 1)])
        self.stat(ready=0, leased=1, consumed_total=1)

    def test_a_direct_lease_short_of_its_count_takes_the_expired_leases_next(self):
        old = self.pub_ready(T, tries=(3, 0, 3))
        self.lease_one(T, old, ttr=1000)
        k = self.pub_delayed(T, T + 1000)
        self.q.pump(T + 1, lazy=100)
        p = self.pump_lease(T + 1000, serve=2, count=2)
        # The due job first (moved before the leases end, as through the ready list), then the
        # job whose lease ended, leased again on its second attempt.
        self.assertEqual([(j['id'], j['attempt']) for j in p['jobs']], [(k, 1), (old, 2)])
        self.assertEqual(p['ready_left'], 0)
        self.stat(ready=0, delayed=0, leased=2, consumed_total=3)

    def test_nothing_made_ready_tries_no_lease(self):
        self.pub_delayed(T, T + 500)
        self.q.pump(T + 1, lazy=100)
        p = self.pump_lease(T + 100, serve=1, count=1)
        self.assertEqual((p['made'], p['ready_left'], p['jobs']), (0, -1, []))
        self.stat(delayed=1, leased=0)

    def test_a_paused_queue_leases_nothing(self):
        self.pub_delayed(T, T + 500)
        self.q.pump(T + 1, lazy=100)
        self.q.r.set(self.q.key(b'p'), b'1')
        p = self.pump_lease(T + 500, serve=1, count=1)
        self.assertEqual((p['made'], p['jobs']), (1, []))
        self.stat(ready=1, leased=0)

    def test_bad_lease_arguments_are_refused(self):
        for args in ([T, 10, 0, 0, 1, 30000, 1001], [T, 10, 0, 0, 1, 'x', 1],
                     [T, 10, 0, 0, 1, 2 ** 32, 1]):
            with self.assertRaisesRegex(Exception, 'pump: bad arguments'):
                self.q.call('pump', *args)


class BrowseTest(ScriptTest):
    """browse.lua: the delayed jobs in due order whether their second is staged or not, the
    leased ones by lease end, and the counts of what falls due per step."""

    def browse(self, op, now, a, n):
        reply = self.q.call('browse', op, now, a, n)
        if op == 'due':
            return reply
        return [tuple(reply[i:i + 6]) for i in range(0, len(reply), 6)]

    def test_delayed_in_due_order_staged_or_not_and_paged_from_a_due_time(self):
        staged = [self.pub_delayed(T, T + 1000 + i, payload=b's%d' % i) for i in range(SPARSE + 2)]
        self.q.pump(T + 1005)  # stages second SEC+1: six of them made ready
        early = custom_key(b'early')
        self.q.publish(T, early, record(T, payload=b'e' * 300), T + 1500, 'id')  # staged second
        later = self.pub_delayed(T, T + 7000, payload=b'later')
        far = self.pub_delayed(T, T + 3600 * 1000, payload=b'far')
        got = self.browse('delayed', T + 1005, 0, 100)
        want = staged[6:] + [early, later, far]
        self.assertEqual([g[0] for g in got], want)  # staged, then the buckets, in due order
        by_id = {g[0]: g for g in got}
        self.assertEqual(by_id[early][1:4], (T + 1500, b'e' * 200, 300))
        self.assertEqual(by_id[later][1:], (T + 7000, b'later', 5, 1, 0))
        self.assertEqual(by_id[staged[6]][1], T + 1006)
        # FROM a due time, COUNT at most.
        self.assertEqual([g[0] for g in self.browse('delayed', T + 1005, T + 1500, 2)],
                         [early, later])
        self.assertEqual([g[0] for g in self.browse('delayed', T + 1005, T + 7001, 10)], [far])
        self.assertEqual(self.browse('delayed', T + 1005, T + 3600 * 1000 + 1, 10), [])

    def test_leased_by_lease_end(self):
        a = self.pub_ready(T, payload=b'a')
        b = self.pub_ready(T, payload=b'b')
        self.q.consume(T, ttr=60000)
        self.q.consume(T + 10, ttr=5000)
        got = self.browse('leased', T + 20, 0, 10)
        self.assertEqual([(g[0], g[1]) for g in got], [(b, T + 5010), (a, T + 60000)])
        self.assertEqual(got[0][2:], (b'b', 1, 0, 1))
        self.assertEqual([g[0] for g in self.browse('leased', T + 20, T + 5011, 10)], [a])

    def test_due_counts_per_step_staged_or_not_and_later(self):
        for i in range(SPARSE + 2):
            self.pub_delayed(T, T + 1000 + i)
        self.q.pump(T + 1005)  # six made ready, the rest staged
        self.pub_delayed(T, T + 1500)  # into the staged second
        self.pub_delayed(T, T + 65000)
        self.pub_delayed(T, T + 65500)
        self.pub_delayed(T, T + 10 * 60000)
        # Steps of a minute from T + 1005: the staged ones and the first bucket, then two, later 1.
        self.assertEqual(self.browse('due', T + 1005, 60000, 3),
                         [SPARSE + 2 - 6 + 1, 2, 0, 1, 1])
        self.assertEqual(self.browse('due', T + 1005, 3600000, 1), [SPARSE + 2 - 6 + 4, 0, 1])

    def test_bad_arguments_are_errors(self):
        for args in (('delayed', T, -1, 10), ('delayed', T, 0, 0), ('leased', T, 0, 1001),
                     ('due', T, 0, 5), ('bogus', T, 0, 1), ('delayed', 'x', 0, 1)):
            with self.assertRaises(redis.ResponseError, msg=args):
                self.q.call('browse', *args)
