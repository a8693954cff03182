#!/usr/bin/python3
"""The job record in two languages: deferq's C++ encoder against common/record.lua's codec.

    /usr/bin/python3 tests/scripts/test_record_codec.py <scripts-dir> <record_encode binary> [-v]

The record layout (docs/storage.md) is written in C++ (queue/model/job_codec.cc, EncodeRecord: what
PUBLISH stores) and in Lua (common/record.lua decode/encode: what every script reads and writes back).
This test makes records with the C++ encoder (tests/scripts/record_encode.cc), decodes them with
common/record.lua's decode() inside a real redis-server (a small test library made of the common code
plus two functions), checks every field, and re-encodes them with common/record.lua's encode(): the
bytes must come back identical, so the two encoders agree byte for byte. The script tests'
Python mirror of the layout (scriptlib.record) is held to the same bytes.
"""

import argparse
import os
import signal
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from dqtest import procs, runner  # noqa: E402
import scriptlib  # noqa: E402  (the script tests' Python mirror of the record layout)

SCRIPTS_DIR = None
ENCODER = None

# Returns the decoded fields in a fixed order (absent optional blocks as -1), then the record
# encode() makes of them.
TEST_FUNCTIONS = r"""
redis.register_function('dq_test_record_decode', function(keys, args)
  local r = decode(args[1])
  return {r.state, r.created, r.ttl, r.tries_left, r.attempt, r.tt, r.every, r.backoff, r.bmax or 0,
          r.jitter and 1 or 0, r.at or -1, r.ttr or -1, r.occ or -1, r.payload, encode(r)}
end)
redis.register_function('dq_test_record_level', function(keys, args)
  local r = decode(args[1])
  return {r.level, r.tries_left, r.attempt, r.tt, level_in_place(args[1]), r.payload, encode(r),
          lease_in_place(args[1], 5000)}
end)
redis.register_function('dq_test_cron_next', function(keys, args)
  local r = decode(args[1])
  local s, out = decode_schedule(r.sched), {}
  for i = 2, #args do out[#out + 1] = cron_next(s, tonumber(args[i])) or -1 end
  return {r.sched, out}
end)
"""
FIELDS = ['state', 'created', 'ttl', 'tries_left', 'attempt', 'tries_total', 'every', 'backoff',
          'bmax', 'jitter', 'at', 'ttr', 'occ', 'payload']

# created_ms, ttl_s, tries, every_s, (backoff_s, max_s, jitter), at_ms, payload
CASES = [
    (1_700_000_000_000, 86400, 1, 0, (0, 0, 0), 0, b'hello'),          # defaults: no blocks
    (1_700_000_000_123, 0, 1, 0, (0, 0, 0), 0, b''),                   # never expires, empty
    (1_700_000_000_000, 3600, 5, 0, (0, 0, 0), 0, b'retry me'),        # T block
    (1_700_000_000_000, 3600, 3, 0, (30, 0, 0), 0, b'backoff'),        # T + B
    (1_700_000_000_000, 3600, 3, 0, (30, 600, 0), 0, b'capped'),       # T + long B: MAX
    (1_700_000_000_000, 3600, 1, 0, (5, 0, 1), 1_700_000_009_000,      # long B: JITTER, + D
     b'jitter'),
    (1_700_000_000_000, 86400, 1, 60, (0, 0, 0), 1_700_000_060_000, b'cron'),  # E + D
    (1_700_000_000_000, 86400, 1, 0, (0, 0, 0), 1_700_000_005_500, b'late'),   # D: delayed
    (2**48 - 1, 2**32 - 1, 65535, 2**32 - 1, (2**32 - 1, 2**31 - 1, 1),  # every field at its max
     2**48 - 2, b'max'),
    (2**48 - 1, 2**32 - 1, 65535, 2**32 - 1, (2**32 - 1, 0, 0), 2**48 - 2, b'max short B'),
    (1_700_000_000_000, 60, 2, 0, (0, 0, 0), 0, bytes(range(256)) * 4),  # binary payload, 1 KiB
]


# Schedules (PUBLISH ... CRON spec TZ zone): zones with daylight saving time both ways, across
# new year, by half an hour, with changes before midnight, and without.
ZONES = ['Europe/Paris', 'America/New_York', 'Australia/Sydney', 'Australia/Lord_Howe',
         'America/Nuuk', 'Asia/Kolkata', 'UTC']
SPECS = ['30 2 * * *', '0 9 * * 1-5', '*/30 * * * *', '15 * * * *', '0 0 29 2 *',
         '*/7 1-3 * * *', '0 0 13 * fri', '*/20 * * * * *', '45 1,2,3 * mar,oct,nov sun']
# The changes of 2026-2027 in those zones, UTC ms (from the same database, as Python reads it).
CHANGES = [1774746000000, 1792890000000, 1806195600000, 1824944400000,   # Paris, Nuuk
           1772953200000, 1793512800000, 1805007600000, 1825567200000,   # New York
           1775318400000, 1791043200000, 1806768000000, 1822492800000,   # Sydney
           1775314800000, 1791041400000, 1806764400000, 1822491000000]   # Lord Howe


def start_redis_with_common(cls, name):
    """A redis-server for a test class (cls.server, cls.r, cls.dir) with the common code and the test
    functions loaded as a Functions library."""
    cls.dir = procs.make_tmpdir(name)
    cls.server = procs.Redis(cls.dir, pdeathsig=True).start()
    cls.r = cls.server.client()
    common = scriptlib.embedder().read_common(os.path.join(SCRIPTS_DIR, 'common'))
    cls.r.function_load('#!lua name=deferq_record_test\n' + common + TEST_FUNCTIONS,
                        replace=True)


def stop_redis(cls):
    cls.server.stop(bound=10)
    procs.remove_tmpdir(cls.dir)


def cpp_encode(cases):
    lines = ''.join('%d %d %d %d %d %d %d %d %s\n' % (c, t, n, e, b[0], b[1], b[2], a,
                                                       p.hex() or '-')
                    for c, t, n, e, b, a, p in cases)
    out = subprocess.run([ENCODER], input=lines.encode(), capture_output=True, check=True,
                         timeout=30)
    return [bytes.fromhex(h) for h in out.stdout.decode().split()]


def cpp_run(lines):
    out = subprocess.run([ENCODER], input=''.join(lines).encode(), capture_output=True,
                         check=True, timeout=60)
    return out.stdout.decode().split()


class CronAgreementTest(unittest.TestCase):
    """cron.cc's NextOccurrence and common/schedule.lua's cron_next find the same instants: for every
    zone and spec above, at instants around each change (every 57 min 47 s over a day either side)
    and spread over two years."""

    @classmethod
    def setUpClass(cls):
        start_redis_with_common(cls, 'cron-agreement')

    @classmethod
    def tearDownClass(cls):
        stop_redis(cls)

    def test_cpp_and_lua_find_the_same_next_occurrence(self):
        instants = [c + d for c in CHANGES for d in range(-86_400_000, 86_400_000, 3_467_000)]
        instants += [1_767_225_600_000 + k * 7_654_321_987 for k in range(10)]
        instants += [1_774_746_000_000 - 1, 1_774_746_000_000, 1_792_890_000_000 - 1001]
        compared = 0
        for zone in ZONES:
            for spec in SPECS:
                rec = bytes.fromhex(cpp_run(['1700000000000 86400 1 0 0 0 0 1700000060000 - %s %s\n'
                                             % (zone, spec)])[0])
                want = [int(x) for x in cpp_run(['next %s %d %s\n' % (zone, t, spec)
                                                 for t in instants])]
                sched, got = self.r.fcall('dq_test_cron_next', 0, rec, *instants)
                self.assertIn(spec.encode(), sched)
                self.assertIn(zone.encode(), sched)
                for t, w, g in zip(instants, want, got):
                    self.assertEqual(g, w, '%s %s after %d' % (zone, spec, t))
                    self.assertGreater(w, t)
                compared += len(instants)
        self.assertGreater(compared, 45_000)


class RecordCodecTest(unittest.TestCase):
    server = None

    @classmethod
    def setUpClass(cls):
        start_redis_with_common(cls, 'record-codec')
        cls.records = cpp_encode(CASES)

    @classmethod
    def tearDownClass(cls):
        stop_redis(cls)

    def lua_decode(self, record):
        reply = self.r.fcall('dq_test_record_decode', 0, record)
        return dict(zip(FIELDS, reply[:14])), reply[14]

    def test_encoder_writes_one_record_per_job(self):
        self.assertEqual(len(self.records), len(CASES))

    def test_lua_decodes_every_field_the_cpp_encoder_wrote(self):
        for case, record in zip(CASES, self.records):
            created, ttl, tries, every, backoff, at, payload = case
            with self.subTest(case=case[:6]):
                fields, _ = self.lua_decode(record)
                self.assertEqual(fields, {
                    'state': 0, 'created': created, 'ttl': ttl, 'tries_left': tries,
                    'attempt': 0, 'tries_total': tries, 'every': every, 'backoff': backoff[0],
                    'bmax': backoff[1], 'jitter': backoff[2], 'at': at if at else -1, 'ttr': -1,
                    # A recurring record's occurrence defaults to its at_ms (no O block).
                    'occ': (at if at else created) if every else -1, 'payload': payload})

    def test_lua_encodes_the_decoded_record_back_to_the_same_bytes(self):
        for case, record in zip(CASES, self.records):
            with self.subTest(case=case[:6]):
                _, again = self.lua_decode(record)
                self.assertEqual(again, record)

    def test_script_tests_python_mirror_writes_the_same_bytes(self):
        for case, record in zip(CASES, self.records):
            created, ttl, tries, every, backoff, at, payload = case
            with self.subTest(case=case[:6]):
                mirror = scriptlib.record(
                    created, ttl=ttl, payload=payload,
                    tries=(tries, 0, tries) if tries != 1 else None, every=every,
                    backoff=backoff[0], bmax=backoff[1], jitter=bool(backoff[2]),
                    at=at if at else None)
                self.assertEqual(mirror, record)

    def test_a_priority_in_the_long_tries_block_in_three_languages(self):
        for level, tries in ((1, 1), (9, 3), (4, 65535)):
            with self.subTest(level=level, tries=tries):
                line = 'priority %d 1700000000000 86400 %d 0 5 0 0 0 %s\n' % (level, tries,
                                                                         b'job'.hex())
                want = bytes.fromhex(cpp_run([line])[0])
                self.assertEqual(scriptlib.record(1_700_000_000_000, payload=b'job', backoff=5,
                                                  tries=(tries, 0, tries), level=level), want)
                got = self.r.fcall('dq_test_record_level', 0, want)
                self.assertEqual(got[:7], [level, tries, 0, tries, level, b'job', want])
                leased = scriptlib.decode_record(got[7])  # leased in place keeps the level
                self.assertEqual((leased['level'], leased['tries'], leased['backoff'],
                                  leased['ttr'], leased['payload']),
                                 (level, (max(0, tries - 1), 1, tries), 5, 5000, b'job'))

    def test_script_tests_python_mirror_writes_the_same_schedules(self):
        sb = scriptlib.sched_block
        for zone, spec, fields in [
                ('Europe/Paris', '30 2 * * *', dict(minutes=[30], hours=[2], zone=scriptlib.PARIS)),
                ('America/New_York', '0 9 * * 1-5',
                 dict(minutes=[0], hours=[9], weekdays=[1, 2, 3, 4, 5], zone=scriptlib.NEW_YORK)),
                ('UTC', '*/20 * * * * *', dict(minutes=None, hours=None, seconds=[0, 20, 40]))]:
            with self.subTest(spec=spec):
                line = '1700000000000 86400 1 0 0 0 0 1700000060000 - %s %s\n' % (zone, spec)
                want = bytes.fromhex(cpp_run([line])[0])
                block = sb(text=spec.encode(), zone_name=zone.encode(), **fields)
                mirror = scriptlib.record(1_700_000_000_000, at=1_700_000_060_000, sched=block)
                self.assertEqual(mirror, want)

def main():
    global SCRIPTS_DIR, ENCODER
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('scripts_dir')
    ap.add_argument('encoder')
    ap.add_argument('-v', '--verbose', action='store_true')
    args = ap.parse_args()
    SCRIPTS_DIR, ENCODER = args.scripts_dir, args.encoder
    scriptlib.SCRIPTS_DIR = SCRIPTS_DIR  # scriptlib.embedder() finds embed_scripts.py beside it
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    loader = unittest.TestLoader()
    suite = unittest.TestSuite([loader.loadTestsFromTestCase(RecordCodecTest),
                                loader.loadTestsFromTestCase(CronAgreementTest)])
    return runner.run_suite(suite, verbosity=2 if args.verbose else 1)


if __name__ == '__main__':
    sys.exit(main())
