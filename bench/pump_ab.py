#!/usr/bin/python3
"""The pump's Redis cost, one storage-script directory against another (driven by bench/pump_ab.sh).

  pump_ab.py --deferq PORT --redis PORT --reference DIR --candidate DIR [--jobs N] [--rounds R]

deferq publishes the same N delayed jobs (64-byte payload, 10 falling due per ms, due in 10
minutes) into one queue per library, then this script stops it (SIGTERM), loads both
libraries (src/persist/embed_scripts.py --library DIR; their versions differ when the scripts do)
and calls each library's pump function itself, so only the scripts differ:
  staging   pump at "one ms before the first due time" until it reports no more work: every job
            is staged (bucket -> P.."j" + staging index); µs of FCALL per job.
  moving    R interleaved rounds per library of 20 calls, each 3 ms of due time later than the
            last (30 jobs a call: the coalescing of a busy queue); µs of FCALL per call.
  sparse    the shape of many quiet queues: S queues per library with one job each (due 4 ms
            apart), each pumped at its job's due ms, so the call stages its one-job bucket and
            moves the job (bench/fleet.sh's 1,000 queues); interleaved rounds of 25 queues per
            library; µs of FCALL and commands per call.
FCALL µs come from INFO commandstats (CONFIG RESETSTAT before each phase); the commands run by
the scripts are shown too. Figures: medians, and candidate / reference ratios. Run the reference
against itself first (no --candidate) to see the noise of the machine.
"""

import argparse
import os
import signal
import statistics
import subprocess
import sys
import time

import redis

PAYLOAD = b'x' * 64
CALLS_PER_ROUND = 20
STEP_MS = 3  # due time covered by one moving call
LOOKAHEAD_MS = 3000


def load_library(r, embed, scripts_dir):
    """Loads the library of `scripts_dir`; returns its pump function's name."""
    body = subprocess.run([sys.executable, embed, '--library', scripts_dir],
                          capture_output=True, check=True).stdout
    r.execute_command('FUNCTION', 'LOAD', 'REPLACE', body)
    first_line = body.split(b'\n', 1)[0]  # "#!lua name=deferq_<version>"
    for lib in r.execute_command('FUNCTION', 'LIST'):
        fields = dict(zip(lib[0::2], lib[1::2]))
        if fields[b'library_name'] not in first_line:
            continue
        for f in fields[b'functions']:
            name = dict(zip(f[0::2], f[1::2]))[b'name']
            if name.endswith(b'_pump'):
                return name.decode()
    sys.exit(f'no pump function in the library of {scripts_dir}')


def commandstats(r):
    stats = r.info('commandstats')
    fcall = stats.get('cmdstat_fcall', {}).get('usec', 0)
    inner = {k[8:]: v['usec'] for k, v in stats.items()
             if k not in ('cmdstat_fcall', 'cmdstat_config|resetstat', 'cmdstat_info')}
    return fcall, inner


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--deferq', type=int, required=True)
    ap.add_argument('--deferq-pid', type=int, required=True)
    ap.add_argument('--redis', type=int, required=True)
    ap.add_argument('--reference', required=True)
    ap.add_argument('--candidate')
    ap.add_argument('--embed', required=True, help='src/persist/embed_scripts.py')
    ap.add_argument('--jobs', type=int, default=20000)
    ap.add_argument('--rounds', type=int, default=30)
    ap.add_argument('--sparse-queues', type=int, default=3000)
    args = ap.parse_args()
    n = args.jobs
    libs = [('reference', args.reference), ('candidate', args.candidate or args.reference)]
    dq, r = redis.Redis(port=args.deferq), redis.Redis(port=args.redis)

    start = int(time.time() * 1000) + 600000
    for i in range(len(libs)):
        for first in range(0, n, 1000):
            p = dq.pipeline(transaction=False)
            for j in range(first, min(first + 1000, n)):
                p.execute_command('PUBLISH', f'ab{i}', PAYLOAD, 'PAT', start + j // 10)
            for reply in p.execute():
                if isinstance(reply, Exception):
                    sys.exit(f'PUBLISH: {reply}')
    sq = args.sparse_queues
    for i in range(len(libs)):
        p = dq.pipeline(transaction=False)
        for k in range(sq):
            p.execute_command('PUBLISH', f'sp{i}_{k}', PAYLOAD, 'PAT', start + 4 * k)
        for reply in p.execute():
            if isinstance(reply, Exception):
                sys.exit(f'PUBLISH: {reply}')
    # Only the scripts called below touch the queues from here on.
    os.kill(args.deferq_pid, signal.SIGTERM)
    for _ in range(50):
        try:
            os.kill(args.deferq_pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    pumps = [load_library(r, args.embed, d) for _, d in libs]

    def call(i, now):
        keys = [f'dq:{{default/ab{i}}}:', 'dq:queues', 'dq:due']
        return r.execute_command('FCALL', pumps[i], len(keys), *keys, now, 5000, LOOKAHEAD_MS)

    print(f'{n} jobs per library; reference {libs[0][1]}, candidate {libs[1][1]}')
    staging = []
    for i, (label, _) in enumerate(libs):
        r.config_resetstat()
        for _ in range(10000):  # bounded: every call stages up to 128 jobs
            if call(i, start - 1)[1] == 0:
                break
        fcall, inner = commandstats(r)
        staged = r.zcard(f'dq:{{default/ab{i}}}:w')
        staging.append(fcall / n)
        top = ', '.join(f'{k} {v / n:.2f}' for k, v in
                        sorted(inner.items(), key=lambda kv: -kv[1])[:5])
        print(f'staging, {label}: {staged} staged, {fcall / n:.2f} µs of FCALL per job '
              f'(commands: {top})')

    now = [start - 1, start - 1]
    per_call = [[], []]
    for _ in range(args.rounds):
        for i in range(len(libs)):
            r.config_resetstat()
            moved = 0
            for _ in range(CALLS_PER_ROUND):
                now[i] += STEP_MS
                moved += call(i, now[i])[0]
            fcall, _ = commandstats(r)
            if moved == 0:
                break
            per_call[i].append((fcall / CALLS_PER_ROUND, fcall / moved))
    print(f'moving, {STEP_MS} ms of due time per call ({10 * STEP_MS} jobs), '
          f'{len(per_call[0])} interleaved rounds of {CALLS_PER_ROUND} calls:')
    med = []
    for i, (label, _) in enumerate(libs):
        c = statistics.median(x[0] for x in per_call[i])
        j = statistics.median(x[1] for x in per_call[i])
        med.append((c, j))
        print(f'  {label}: {c:.1f} µs of FCALL per call, {j:.2f} per job')

    def call_sparse(i, k):
        keys = [f'dq:{{default/sp{i}_{k}}}:', 'dq:queues', 'dq:due']
        return r.execute_command('FCALL', pumps[i], len(keys), *keys, start + 4 * k, 5000,
                                 LOOKAHEAD_MS)

    sparse = [[], []]
    for first in range(0, sq, 25):
        # The library that goes first in a block measured ~20% dearer against itself (an A/A run
        # read 0.78-0.83x): the order alternates.
        for i in (range(len(libs)) if first // 25 % 2 == 0 else reversed(range(len(libs)))):
            r.config_resetstat()
            moved = sum(call_sparse(i, k)[0] for k in range(first, min(first + 25, sq)))
            calls = min(first + 25, sq) - first
            fcall, _ = commandstats(r)
            stats = r.info('commandstats')
            commands = sum(v['calls'] for k, v in stats.items()
                           if k not in ('cmdstat_fcall', 'cmdstat_config|resetstat',
                                        'cmdstat_info'))
            if moved != calls:
                sys.exit(f'sparse: {moved} jobs moved by {calls} calls')
            sparse[i].append((fcall / calls, commands / calls))
    print(f'sparse, {sq} queues of one job each, each pumped at its due ms:')
    sp = []
    for i, (label, _) in enumerate(libs):
        c = statistics.median(x[0] for x in sparse[i])
        m = statistics.median(x[1] for x in sparse[i])
        sp.append(c)
        print(f'  {label}: {c:.1f} µs of FCALL per call, {m:.1f} commands per call')
    print(f'candidate / reference: staging {staging[1] / staging[0]:.2f}x, '
          f'moving {med[1][0] / med[0][0]:.2f}x per call, sparse {sp[1] / sp[0]:.2f}x per call')


if __name__ == '__main__':
    main()
