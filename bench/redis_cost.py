#!/usr/bin/python3
"""Redis CPU per job: deferq against the usual layout, and the idle cost per number of queues.

Driven by bench/redis_cost.sh, which starts the servers (pinned with taskset) and passes their
ports; see that file for what is measured and why. Two modes:

  redis_cost.py cost --deferq PORT --deferq-redis PORT --usual-redis PORT [--jobs N] [--runs R]
  redis_cost.py idle --deferq PORT --deferq-pid PID --deferq-redis PORT --queues Q [--seconds S]

Redis CPU is INFO cpu (used_cpu_sys + used_cpu_user of redis-server: getrusage, exact to the µs)
and INFO commandstats (usec spent inside commands) read before and after each phase, after
CONFIG RESETSTAT. Needs redis-py (Debian's python3-redis), hence /usr/bin/python3.
"""

import argparse
import os
import statistics
import sys
import threading
import time

import redis

PAYLOAD = b'x' * 64
TTL = 86400
CHUNK = 1000  # commands per pipeline round trip

# The usual layout, exactly as issue 8 gives it: a string key per job, one timer ZSET, one ready
# LIST; the timer member is "<tries>:<id>".
USUAL = {
    'publish': """
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2]) return redis.call('ZADD', KEYS[2], ARGV[3], ARGV[4])
""",
    'pump': """
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
if #ids > 0 then redis.call('ZREM', KEYS[1], unpack(ids)); redis.call('LPUSH', KEYS[2], unpack(ids)) end
return #ids
""",
    'consume': """
local m = redis.call('RPOP', KEYS[1]); if not m then return nil end
local tries, id = string.match(m, '^(%d+):(.*)$')
local payload = redis.call('GET', 'j:' .. id); if not payload then return {m, false} end
local nm = (tonumber(tries) - 1) .. ':' .. id
redis.call('ZADD', KEYS[2], tonumber(ARGV[1]) + tonumber(ARGV[2]), nm); return {nm, payload}
""",
    'ack': """
local n = redis.call('DEL', KEYS[1]); redis.call('ZREM', KEYS[2], ARGV[1]); return n
""",
}

SCRIPT_COMMANDS = {'cmdstat_eval', 'cmdstat_evalsha', 'cmdstat_fcall', 'cmdstat_fcall_ro'}
STEPS = ['publish', 'pump', 'consume', 'ack']
STEP_TITLES = {'publish': 'delayed publish', 'pump': 'due -> ready (pump)',
               'consume': 'consume (lease)', 'ack': 'ack'}


def now_ms():
    return int(time.time() * 1000)


class Meter:
    """Redis CPU (INFO cpu) and time inside commands (INFO commandstats) of one redis-server."""

    def __init__(self, client):
        self.c = client

    def reset(self):
        self.c.config_resetstat()
        info = self.c.info('cpu')
        self.cpu0 = info['used_cpu_sys'] + info['used_cpu_user']

    def read(self):
        """(cpu µs, µs inside scripts, other command calls) since reset(). Commands a script
        runs are counted in commandstats under their own names too, so the script figure is
        that of the script commands only, and the calls are every other command (a script's
        redis.calls plus the few commands sent directly), INFO and CONFIG left out."""
        info = self.c.info('cpu')
        cpu = (info['used_cpu_sys'] + info['used_cpu_user'] - self.cpu0) * 1e6
        stats = self.c.info('commandstats')
        script = sum(v['usec'] for k, v in stats.items() if k in SCRIPT_COMMANDS)
        calls = sum(v['calls'] for k, v in stats.items()
                    if k not in SCRIPT_COMMANDS and k not in ('cmdstat_info', 'cmdstat_config'))
        return cpu, script, calls


def pipelined(client, items, add):
    """Sends add(pipe, item) for every item, CHUNK per round trip; returns all replies."""
    out = []
    for i in range(0, len(items), CHUNK):
        pipe = client.pipeline(transaction=False)
        for item in items[i:i + CHUNK]:
            add(pipe, item)
        out.extend(pipe.execute(raise_on_error=False))
    return out


def check_replies(what, replies):
    bad = [r for r in replies if isinstance(r, Exception)]
    if bad:
        sys.exit(f'{what}: {len(bad)} error replies, first: {bad[0]}')


class DeferqLayout:
    name = 'deferq'

    def __init__(self, port, redis_port):
        self.c = redis.Redis(port=port)
        self.meter = Meter(redis.Redis(port=redis_port))

    def publish(self, q, dues):
        replies = pipelined(self.c, dues,
                            lambda p, due: p.execute_command('PUBLISH', q, PAYLOAD, 'PAT', due))
        check_replies('deferq PUBLISH', replies)

    def pump(self, q, n, window_end):
        # deferq's own pump moves the jobs at their due times; wait until all are ready. The
        # driver sleeps through the window as the usual layout's phase does, then polls QSTAT:
        # polling all along (every 50 ms from the end of publishing) added ~140 calls of the
        # driver's own to the phase, ~0.6 µs of Redis CPU per job that is no part of a job's life.
        time.sleep(max(0, window_end / 1000 - time.time()))
        deadline = time.time() + 30
        while time.time() < deadline:
            stat = self.c.execute_command('QSTAT', q)
            st = dict(zip(stat[0::2], stat[1::2]))
            if int(st[b'ready']) >= n:
                return
            time.sleep(0.05)
        sys.exit(f'deferq: {q} did not become ready within the deadline: {stat}')

    def consume(self, q, n):
        replies = pipelined(self.c, range(n), lambda p, _: p.execute_command('CONSUME', q))
        check_replies('deferq CONSUME', replies)
        ids = [r[1] for r in replies if r]
        if len(ids) != n:
            sys.exit(f'deferq CONSUME: got {len(ids)} jobs of {n}')
        return ids

    def ack(self, q, ids):
        replies = pipelined(self.c, ids, lambda p, i: p.execute_command('ACK', q, i))
        check_replies('deferq ACK', replies)
        if sum(replies) != len(ids):
            sys.exit(f'deferq ACK: {sum(replies)} of {len(ids)} found')


class UsualLayout:
    name = 'usual'

    def __init__(self, redis_port):
        self.c = redis.Redis(port=redis_port)
        self.meter = Meter(self.c)
        self.sha = {k: self.c.script_load(v) for k, v in USUAL.items()}

    def publish(self, q, dues):
        sha = self.sha['publish']
        items = list(enumerate(dues))
        replies = pipelined(self.c, items, lambda p, it: p.evalsha(
            sha, 2, f'j:{q}-{it[0]}', f'{q}:timer', PAYLOAD, TTL, it[1], f'1:{q}-{it[0]}'))
        check_replies('usual publish', replies)

    def pump(self, q, n, window_end):
        time.sleep(max(0, window_end / 1000 - time.time()) + 0.01)
        moved, calls = 0, 0
        while calls < n:  # bounded: each call moves up to 100
            calls += 1
            got = self.c.evalsha(self.sha['pump'], 2, f'{q}:timer', f'{q}:ready', now_ms(), 100)
            if got == 0:
                break
            moved += got
        if moved != n:
            sys.exit(f'usual pump: moved {moved} of {n}')

    def consume(self, q, n):
        sha = self.sha['consume']
        replies = pipelined(self.c, range(n), lambda p, _: p.evalsha(
            sha, 2, f'{q}:ready', f'{q}:timer', now_ms(), 120000))
        check_replies('usual consume', replies)
        members = [r[0] for r in replies if r]
        if len(members) != n:
            sys.exit(f'usual consume: got {len(members)} jobs of {n}')
        return members

    def ack(self, q, members):
        sha = self.sha['ack']
        replies = pipelined(self.c, members, lambda p, m: p.evalsha(
            sha, 2, b'j:' + m.split(b':', 1)[1], f'{q}:timer', m))
        check_replies('usual ack', replies)
        if sum(replies) != len(members):
            sys.exit(f'usual ack: {sum(replies)} of {len(members)} found')


def measure(layout, fn):
    layout.meter.reset()
    result = fn()
    return (result,) + layout.meter.read()


def cost(args):
    layouts = [DeferqLayout(args.deferq, args.deferq_redis), UsualLayout(args.usual_redis)]
    n = args.jobs
    # figures[layout][step] = list of (cpu µs, script µs, calls) per job, one per run
    figures = {l.name: {s: [] for s in STEPS} for l in layouts}
    for run in range(args.runs):
        order = layouts if run % 2 == 0 else layouts[::-1]
        q = f'cost{run}'
        # Both layouts' jobs fall due in the same window, which starts once both have published
        # (and, for deferq, after its look-ahead), spread over `window_ms`.
        start = now_ms() + args.lead_ms
        dues = [start + i * args.window_ms // n for i in range(n)]
        window_end = dues[-1] + 1
        held = {}
        for layout in order:
            _, cpu, script, calls = measure(layout, lambda: layout.publish(q, dues))
            figures[layout.name]['publish'].append((cpu / n, script / n, calls / n))
        if now_ms() > start - 2500:
            sys.exit('publishing took longer than the lead time; raise --lead-ms')
        # The pump phase always measures deferq first: deferq pumps on its own clock during the
        # window, so measured second (after the usual layout's phase, which sleeps through the
        # window) it would miss most of its own work. The usual layout's pump runs from here
        # once the window has passed, whenever its phase starts.
        for layout in layouts:
            _, cpu, script, calls = measure(layout, lambda: layout.pump(q, n, window_end))
            figures[layout.name]['pump'].append((cpu / n, script / n, calls / n))
        for layout in order:
            held[layout.name], cpu, script, calls = measure(layout, lambda: layout.consume(q, n))
            figures[layout.name]['consume'].append((cpu / n, script / n, calls / n))
        for layout in order:
            _, cpu, script, calls = measure(layout, lambda: layout.ack(q, held[layout.name]))
            figures[layout.name]['ack'].append((cpu / n, script / n, calls / n))
        print(f'run {run + 1}: ' + '  '.join(
            f'{l.name} {sum(figures[l.name][s][-1][0] for s in STEPS):.1f}' for l in layouts) +
            ' µs/job (Redis CPU, whole life)', flush=True)

    print()
    print(f'Redis CPU per job, µs (INFO cpu); in brackets: µs inside scripts and redis.calls '
          f'per job (INFO commandstats); medians of {args.runs} runs, {n} jobs each')
    print(f'{"step":<22} {"deferq":>22} {"usual layout":>22} {"ratio":>7}')
    totals = {'deferq': [0.0] * args.runs, 'usual': [0.0] * args.runs}
    ratios = {}
    for s in STEPS:
        row = {}
        for name in ('deferq', 'usual'):
            runs = figures[name][s]
            row[name] = tuple(statistics.median(r[i] for r in runs) for i in range(3))
            for i, r in enumerate(runs):
                totals[name][i] += r[0]
        ratios[s] = row['deferq'][0] / row['usual'][0]
        print(f'{STEP_TITLES[s]:<22} ' + ' '.join(
            f'{row[k][0]:7.1f} ({row[k][1]:5.1f}, {row[k][2]:4.1f})' for k in ('deferq', 'usual')) +
            f' {ratios[s]:6.2f}x')
    whole = {k: statistics.median(v) for k, v in totals.items()}
    ratio = whole['deferq'] / whole['usual']
    print(f'{"whole life of a job":<22} {whole["deferq"]:7.1f}{"":15} {whole["usual"]:7.1f}{"":15}'
          f' {ratio:6.2f}x')
    print()
    print(f'targets: whole life <= 1.50x ({ratio:.2f}x: {"met" if ratio <= 1.5 else "NOT met"}), '
          f'delayed publish <= 1.20x ({ratios["publish"]:.2f}x: '
          f'{"met" if ratios["publish"] <= 1.2 else "NOT met"})')
    if args.waiting_jobs > 0:
        waiting(args, layouts[0], whole['usual'])


def waiting(args, deferq, usual_whole):
    """The whole life again, as a deployment whose consumers block: 4 consumers (a connection
    each) wait in `CONSUME q TIMEOUT 1` before anything is published, and ACK each job as it
    comes; the jobs fall due at 1,000 per second. Redis CPU from the first publish to the last
    ACK, per job, against the usual layout's whole life measured above (whose consumers poll:
    the usual layout has nothing that wakes a waiting consumer)."""
    n = args.waiting_jobs
    port = deferq.c.connection_pool.connection_kwargs['port']
    figures = []
    for run in range(args.runs):
        q = f'waiting{run}'
        done = threading.Event()
        acked = [0]
        lock = threading.Lock()

        def consumer():
            c = redis.Redis(port=port, socket_timeout=10)
            while not done.is_set():
                job = c.execute_command('CONSUME', q, 'TIMEOUT', 1)
                if not job:
                    continue
                c.execute_command('ACK', q, job[1])
                with lock:
                    acked[0] += 1
                    if acked[0] >= n:
                        done.set()
            c.close()

        threads = [threading.Thread(target=consumer) for _ in range(4)]
        for t in threads:
            t.start()
        time.sleep(0.5)  # the consumers are blocked
        deferq.meter.reset()
        start = now_ms() + 1500
        deferq.publish(q, [start + i for i in range(n)])  # one due per ms: 1,000 jobs/s
        done.wait(timeout=n / 1000 + 30)
        cpu, script, calls = deferq.meter.read()
        done.set()
        for t in threads:
            t.join()
        if acked[0] < n:
            sys.exit(f'waiting: {acked[0]} of {n} jobs acked within the deadline')
        figures.append(cpu / n)
        print(f'waiting run {run + 1}: {cpu / n:.1f} µs/job (Redis CPU, whole life, consumers '
              f'waiting)', flush=True)
    med = statistics.median(figures)
    print(f'whole life with 4 consumers waiting (CONSUME TIMEOUT 1 + ACK per job, {n} jobs at '
          f'1,000/s): {med:.1f} µs/job, {med / usual_whole:.2f}x the usual layout\'s whole life '
          f'({usual_whole:.1f} µs/job, consumers polling); median of {args.runs} runs')


def proc_cpu_s(pid):
    """utime + stime of a process, seconds (/proc, clock ticks)."""
    with open(f'/proc/{pid}/stat') as f:
        fields = f.read().rsplit(')', 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf('SC_CLK_TCK')


def idle_cpu(r, pid, seconds):
    """Redis (INFO cpu of client r) and process `pid` CPU over `seconds`, as % of a core."""
    info = r.info('cpu')
    rc0, dc0, t0 = info['used_cpu_sys'] + info['used_cpu_user'], proc_cpu_s(pid), time.monotonic()
    time.sleep(seconds)
    info = r.info('cpu')
    rc1, dc1, t1 = info['used_cpu_sys'] + info['used_cpu_user'], proc_cpu_s(pid), time.monotonic()
    return 100 * (rc1 - rc0) / (t1 - t0), 100 * (dc1 - dc0) / (t1 - t0)


def idle(args):
    d = redis.Redis(port=args.deferq)
    r = redis.Redis(port=args.deferq_redis)
    qn = args.queues
    due = now_ms() + 3_600_000
    names = [f'idle{qn}_{i}' for i in range(qn)]
    replies = pipelined(d, names, lambda p, q: p.execute_command('PUBLISH', q, PAYLOAD, 'PAT', due))
    check_replies('idle PUBLISH', replies)
    time.sleep(args.settle)
    redis_pct, deferq_pct = idle_cpu(r, args.deferq_pid, args.seconds)
    # Publishing to every queue meanwhile: no reply may be TRYAGAIN.
    replies = pipelined(d, names, lambda p, q: p.execute_command('PUBLISH', q, PAYLOAD, 'PAT', due))
    tryagain = sum(1 for x in replies if isinstance(x, Exception) and 'TRYAGAIN' in str(x))
    other = sum(1 for x in replies if isinstance(x, Exception)) - tryagain
    print(f'{qn:>6} queues with one delayed job each: idle Redis {redis_pct:5.1f}% of a core, '
          f'deferq {deferq_pct:5.1f}%; then {qn} publishes: {tryagain} TRYAGAIN, {other} other '
          f'errors', flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('mode', choices=['cost', 'idle'])
    ap.add_argument('--deferq', type=int, required=True)
    ap.add_argument('--deferq-redis', type=int, required=True)
    ap.add_argument('--usual-redis', type=int)
    ap.add_argument('--deferq-pid', type=int)
    ap.add_argument('--jobs', type=int, default=20000)
    ap.add_argument('--runs', type=int, default=3)
    ap.add_argument('--lead-ms', type=int, default=5000)
    ap.add_argument('--window-ms', type=int, default=2000)
    ap.add_argument('--queues', type=int, default=1)
    ap.add_argument('--waiting-jobs', type=int, default=5000)
    ap.add_argument('--settle', type=float, default=3.0)
    ap.add_argument('--seconds', type=float, default=5.0)
    args = ap.parse_args()
    if args.mode == 'cost':
        cost(args)
    else:
        idle(args)


if __name__ == '__main__':
    main()
