#!/usr/bin/python3
"""What the console's pages cost Redis (driven by bench/console.sh, which starts a redis-server
and a deferq with the console and passes their ports).

One phase per call, at Q queues: one job published to each queue (and a dead one with a reason
to each of the first 100), the stats poller left to read them all, then per page kind
(the overview, a queue's page, a job's page) page loads in a row through HTTP for 3 s, each for a queue
picked at random, as a browser that is logged in would. Per page kind: Redis's time inside
commands (INFO commandstats, CONFIG RESETSTAT before the phase) and its CPU (INFO cpu) per page
load, and deferq's CPU per page load (/proc), over the loads and the 2.5 s after them (the stats
poller's reads of the queues they touched count), each less what the 5.5 s just before cost with no
page loaded (deferq's background work: at 100,000 queues it is most of the noise), and the page
loads per second. Prints one line of JSON; console.sh runs the sizes three times and prints the
medians and the ratios against one queue."""

import argparse
import http.client
import json
import os
import random
import re
import sys
import time
import urllib.parse

import redis

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from redis_cost import check_replies, pipelined, proc_cpu_s  # noqa: E402

PAGES = ('overview', 'queue', 'job')


def get(port, method, path, body=None, cookie=None):
    c = http.client.HTTPConnection('127.0.0.1', port, timeout=30)
    headers = {}
    if body is not None:
        body = urllib.parse.urlencode(body)
        headers['Content-Type'] = 'application/x-www-form-urlencoded'
    if cookie:
        headers['Cookie'] = cookie
    c.request(method, path, body=body, headers=headers)
    r = c.getresponse()
    out = r.status, dict((k.lower(), v) for k, v in r.getheaders()), r.read()
    c.close()
    return out


def commands_usec(r):
    """Time inside commands and the calls since CONFIG RESETSTAT, INFO and CONFIG left out."""
    stats = r.info('commandstats')
    keep = {k: v for k, v in stats.items() if k not in ('cmdstat_info', 'cmdstat_config')}
    return sum(v['usec'] for v in keep.values()), sum(v['calls'] for v in keep.values())


def redis_cpu_s(r):
    info = r.info('cpu')
    return info['used_cpu_sys'] + info['used_cpu_user']


def window(r, pid, seconds_or_fn):
    """(commands µs, calls, Redis CPU µs, seconds, deferq CPU µs) over a sleep or a function's
    run."""
    r.config_resetstat()
    cpu0, dcpu0, t0 = redis_cpu_s(r), proc_cpu_s(pid), time.monotonic()
    if callable(seconds_or_fn):
        seconds_or_fn()
    else:
        time.sleep(seconds_or_fn)
    t1 = time.monotonic()
    usec, calls = commands_usec(r)
    return usec, calls, (redis_cpu_s(r) - cpu0) * 1e6, t1 - t0, (proc_cpu_s(pid) - dcpu0) * 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--deferq', type=int, required=True)
    ap.add_argument('--deferq-pid', type=int, required=True)
    ap.add_argument('--redis', type=int, required=True)
    ap.add_argument('--http', type=int, required=True)
    ap.add_argument('--password', required=True)
    ap.add_argument('--queues', type=int, default=1000)
    args = ap.parse_args()
    d = redis.Redis(port=args.deferq)
    r = redis.Redis(port=args.redis)
    names = ['console%d' % i for i in range(args.queues)]
    # Dead letters with a reason in the first 100 queues (each queue's page lists them).
    for q in names[:100]:
        jid = d.execute_command('PUBLISH', q, 'to-fail')
        d.execute_command('CONSUME', q)
        d.execute_command('NACK', q, jid, 'REASON', 'smtp down: 421 try later')
    ids = pipelined(d, names, lambda p, q: p.execute_command('PUBLISH', q, 'payload-' + q))
    check_replies('publish', ids)
    ids = [i.decode() for i in ids]
    status, headers, _ = get(args.http, 'POST', '/console/login', {'password': args.password})
    if status != 303:
        sys.exit('login failed: %d' % status)
    cookie = headers['set-cookie'].split(';')[0]
    # The overview lists every queue once the poller read them.
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        _, _, body = get(args.http, 'GET', '/console', cookie=cookie)
        m = re.search(rb'(\d+) queues?;', body)
        if m and int(m.group(1)) >= args.queues:
            break
        time.sleep(0.5)
    else:
        sys.exit('the overview never listed %d queues' % args.queues)
    # Steady idle before the first window: the stats poller reads a queue on its rounds for ~7 s
    # after its last job command, and every queue it keeps once more within 10 s of a round that
    # left activity unread (100,000 publishes do). 20 s after the last publish it reads nothing.
    time.sleep(20)
    def path(kind):
        i = random.randrange(args.queues)
        if kind == 'overview':
            return '/console?page=%d' % random.randrange(max(1, args.queues // 100))
        if kind == 'queue':
            return '/console/queue?ns=default&q=' + names[i]
        return '/console/job?ns=default&q=%s&id=%s' % (names[i], ids[i])

    out = {'queues': args.queues}
    for kind in PAGES:
        loads = [0]
        bytes_ = [0]

        def load():
            # 3 s of page loads (at most 20,000): the stats poller reads every 2 s, so a shorter
            # window would catch it or not by chance.
            t0 = time.monotonic()
            while time.monotonic() - t0 < 3 and loads[0] < 20000:
                status, _, body = get(args.http, 'GET', path(kind), cookie=cookie)
                if status != 200:
                    sys.exit('%s page answered %d: %r' % (kind, status, body[:200]))
                loads[0] += 1
                bytes_[0] += len(body)

        def load_and_trail():
            load()
            time.sleep(2.5)  # the poller's reads of queues the pages touched count too

        # The same 5.5 s with no page loaded, just before: what deferq's background work (the
        # stats poller, the pump) costs then is left out of the pages' figures.
        idle = window(r, args.deferq_pid, 5.5)
        busy = window(r, args.deferq_pid, load_and_trail)
        n = loads[0]
        out[kind] = {
            'commands_us_per_page': max(0.0, busy[0] - idle[0] * busy[3] / idle[3]) / n,
            'calls_per_page': max(0.0, busy[1] - idle[1] * busy[3] / idle[3]) / n,
            'cpu_us_per_page': max(0.0, busy[2] - idle[2] * busy[3] / idle[3]) / n,
            'deferq_cpu_us_per_page': max(0.0, busy[4] - idle[4] * busy[3] / idle[3]) / n,
            'pages_per_s': n / (busy[3] - 2.5),
            'bytes_per_page': bytes_[0] / n,
            'idle_commands_us_per_s': idle[0] / idle[3],
            'idle_redis_cpu_pct': 100 * idle[2] / 1e6 / idle[3],
            'idle_deferq_cpu_pct': 100 * idle[4] / 1e6 / idle[3],
        }
    print(json.dumps(out), flush=True)


if __name__ == '__main__':
    main()
