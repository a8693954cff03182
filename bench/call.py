#!/usr/bin/python3
"""bench/call.py: request/reply three ways in one run (issue 26), run through bench/call.sh.

    call      CALL q payload: the requester on one deferq instance, the worker (CONSUME, ACK ...
              RESULT) on another, one Redis
    twoqueue  the pattern before CALL: PUBLISH q payload, then CONSUME a reply queue named after
              the job id; the worker PUBLISHes its answer there and ACKs; the requester ACKs the
              answer
    bullmq    BullMQ 6: Queue.add + job.waitUntilFinished, a Worker returning the result
              (bench/call/bullmq.js), on its own redis-server

Each phase: N round trips by R requesters in parallel (each one after the other), a fresh
redis-server pinned to the last core and deferq (2 instances, 1 thread each) and the driver on
core 0. Figures: round trip p50/p99 (ms), Redis CPU per round trip (INFO cpu, µs) and Redis's
own accounting (INFO commandstats µs per round trip, after CONFIG RESETSTAT), deferq CPU per
round trip. Phases interleave, RUNS times; the medians and the ratios against CALL are printed,
then the raw figures of every run.
"""

import argparse
import os
import statistics
import subprocess
import sys
import threading
import time

import redis

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fleet import DEFERQ_CPU, Fleet, proc_cpu_s, redis_cpu_s, redis_usec, result_fields  # noqa


def worker(port, q, n, stop, two_queue):
    c = redis.Redis(port=port, socket_timeout=60)
    done = 0
    while done < n and not stop.is_set():
        jobs = c.execute_command("CONSUME", q, "TIMEOUT", 1, "COUNT", 20)
        if not jobs:
            continue
        p = c.pipeline(transaction=False)
        for job in jobs:
            result = b"result of " + job[2]
            if two_queue:
                p.execute_command("PUBLISH", b"r." + job[1], result)
                p.execute_command("ACK", q, job[1])
            else:
                p.execute_command("ACK", q, job[1], "RESULT", result)
        p.execute()
        done += len(jobs)
    c.close()


def requester(port, q, count, trips, errors, two_queue):
    c = redis.Redis(port=port, socket_timeout=60)
    try:
        for i in range(count):
            payload = b"p%d" % i
            t0 = time.perf_counter()
            if two_queue:
                jid = c.execute_command("PUBLISH", q, payload)
                reply = c.execute_command("CONSUME", b"r." + jid, "TIMEOUT", 30)
                c.execute_command("ACK", b"r." + jid, reply[1])
                got = reply[2]
            else:
                got = c.execute_command("CALL", q, payload, "TIMEOUT", 30)
            trips.append((time.perf_counter() - t0) * 1000)
            if got != b"result of " + payload:
                raise AssertionError("%r answered %r" % (payload, got))
    except Exception as e:
        errors.append(e)
    finally:
        c.close()


def deferq_phase(args, two_queue):
    fl = Fleet(args, instances=2)
    try:
        q = "calls"
        stop = threading.Event()
        w = threading.Thread(target=worker, args=(fl.ports[1], q, args.n, stop, two_queue))
        trips, errors = [], []
        per = args.n // args.requesters
        reqs = [threading.Thread(target=requester,
                                 args=(fl.ports[0], q, per, trips, errors, two_queue))
                for _ in range(args.requesters)]
        fl.r.config_resetstat()
        r0, d0 = redis_cpu_s(fl.r), [proc_cpu_s(p) for p in fl.pids]
        w.start()
        for t in reqs:
            t.start()
        for t in reqs:
            t.join(300)
        stop.set()
        w.join(10)
        r1, d1 = redis_cpu_s(fl.r), [proc_cpu_s(p) for p in fl.pids]
        if errors or len(trips) != per * args.requesters:
            sys.exit("round trips failed: %r (%d done)" % (errors[:3], len(trips)))
        n = len(trips)
        trips.sort()
        return {"p50": trips[n // 2], "p99": trips[min(n - 1, int(n * 0.99))],
                "redis_us": (r1 - r0) * 1e6 / n, "redis_cmd_us": redis_usec(fl.r) / n,
                "deferq_us": sum(b - a for a, b in zip(d0, d1)) * 1e6 / n,
                "keys_after": fl.r.dbsize()}
    finally:
        fl.stop()


def bullmq_phase(args):
    fl = Fleet(args, instances=0)
    try:
        fl.r.config_resetstat()
        env = dict(os.environ, NODE_PATH=args.node_modules)
        out = subprocess.run(["taskset", "-c", DEFERQ_CPU, "node", args.bullmq_js,
                              str(fl.rport), str(args.n), str(args.requesters)],
                             capture_output=True, text=True, timeout=600, env=env)
        f = result_fields(out.stdout + out.stderr)
        return {"p50": float(f["p50"]), "p99": float(f["p99"]),
                "redis_us": float(f["redis_us_per_call"]),
                "redis_cmd_us": redis_usec(fl.r) / args.n, "deferq_us": 0.0,
                "keys_after": fl.r.dbsize()}
    finally:
        fl.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--deferq", required=True)
    ap.add_argument("--bullmq-js", required=True)
    ap.add_argument("--node-modules", required=True)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--n", type=int, default=4000)
    ap.add_argument("--requesters", type=int, default=8)
    args = ap.parse_args()
    phases = {"call": lambda: deferq_phase(args, False),
              "twoqueue": lambda: deferq_phase(args, True),
              "bullmq": lambda: bullmq_phase(args)}
    results = {k: [] for k in phases}
    for run in range(args.runs):
        order = list(phases) if run % 2 == 0 else list(phases)[::-1]
        for name in order:
            res = phases[name]()
            results[name].append(res)
            print("run %d %-9s %s" % (run + 1, name, " ".join(
                "%s=%.2f" % (k, v) if isinstance(v, float) else "%s=%s" % (k, v)
                for k, v in res.items())), flush=True)
    med = {k: {f: statistics.median(r[f] for r in v) for f in v[0]} for k, v in results.items()}
    c = med["call"]
    print("\n%d round trips by %d requesters, medians of %d runs; ratio = figure / CALL's"
          % (args.n, args.requesters, args.runs))
    print("%-9s %9s %9s %14s %17s %14s" % ("", "p50 ms", "p99 ms", "Redis CPU us",
                                           "Redis cmd us", "deferq CPU us"))
    for name in phases:
        m = med[name]
        print("%-9s %9.2f %9.2f %14.1f %17.1f %14.1f" % (name, m["p50"], m["p99"], m["redis_us"],
                                                          m["redis_cmd_us"], m["deferq_us"]))
        if name != "call":
            print("%-9s %8.2fx %8.2fx %13.2fx %16.2fx" % (
                "  ratio", m["p50"] / c["p50"], m["p99"] / c["p99"],
                m["redis_us"] / c["redis_us"], m["redis_cmd_us"] / c["redis_cmd_us"]))


if __name__ == "__main__":
    main()
