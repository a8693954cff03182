#!/usr/bin/python3
"""Idle cost and memory of waiting schedules against plain delayed jobs (driven by
bench/schedules.sh, which starts the servers and passes their ports).

One phase per call: N jobs published through deferq into Q queues, either CRON schedules
("m h * * *" TZ Europe/Paris, the minute and hour spread so that they fall due over the next
day) or one-off delayed jobs (PAT, due over the same day); then, after the settle time, Redis CPU
(INFO cpu) and deferq CPU (/proc) over the idle seconds, as % of a core, and Redis memory per job
(used_memory before and after publishing). Prints one line of figures; schedules.sh interleaves
the phases, runs them three times and prints the medians and ratios."""

import argparse
import json
import os
import sys
import time

import redis

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from redis_cost import check_replies, idle_cpu, now_ms, pipelined  # noqa: E402

PAYLOAD = b'x' * 64


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('kind', choices=['cron', 'delayed'])
    ap.add_argument('--deferq', type=int, required=True)
    ap.add_argument('--deferq-pid', type=int, required=True)
    ap.add_argument('--redis', type=int, required=True)
    ap.add_argument('--jobs', type=int, default=100000)
    ap.add_argument('--queues', type=int, default=1000)
    ap.add_argument('--settle', type=float, default=5.0)
    ap.add_argument('--seconds', type=float, default=10.0)
    args = ap.parse_args()
    d = redis.Redis(port=args.deferq)
    r = redis.Redis(port=args.redis)
    mem0 = r.info('memory')['used_memory']
    t = now_ms()
    jobs = list(range(args.jobs))

    def add(pipe, i):
        q = 'sched%d' % (i % args.queues)
        minute, hour = (i * 7) % 60, (i // 60) % 24
        if args.kind == 'cron':
            pipe.execute_command('PUBLISH', q, PAYLOAD, 'CRON', '%d %d * * *' % (minute, hour),
                                 'TZ', 'Europe/Paris')
        else:
            # due somewhere in the coming day, at least an hour out (never due while measured)
            due = t + 3_600_000 + ((hour * 60 + minute) * 60_000) % 82_800_000
            pipe.execute_command('PUBLISH', q, PAYLOAD, 'PAT', due)

    t0 = time.monotonic()
    check_replies(args.kind + ' PUBLISH', pipelined(d, jobs, add))
    publish_s = time.monotonic() - t0
    mem1 = r.info('memory')['used_memory']
    time.sleep(args.settle)
    redis_pct, deferq_pct = idle_cpu(r, args.deferq_pid, args.seconds)
    print(json.dumps({'kind': args.kind, 'jobs': args.jobs, 'queues': args.queues,
                      'redis_pct': redis_pct, 'deferq_pct': deferq_pct,
                      'bytes_per_job': (mem1 - mem0) / args.jobs,
                      'publish_per_s': args.jobs / publish_s}), flush=True)


if __name__ == '__main__':
    main()
