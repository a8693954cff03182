#!/usr/bin/python3
"""The soak (issue 13): mixed traffic through two deferq instances on one redis-server for a
bounded time, one line per minute.

    /usr/bin/python3 bench/soak.py /path/to/deferq [SECONDS]        (bench/soak.sh runs it)

Traffic, spread over both instances (each client picks one):
  - 4 producers publish to queue "work": half now, half with PDELAY 0-3000 ms, TRIES 3; every
    10th time they also schedule a job an hour ahead on queue "sched" with ID, replace it
    (REPLACE, new payload) and cancel it (an order timeout updated, then the order paid);
  - 4 consumers CONSUME work TTR 2 COUNT 10 TIMEOUT 0.5: ACK 90%, NACK 5%, abandon 5% (the lease
    expires and the job comes back; after 3 deliveries it is dead);
  - a recurring job per 10 s on queue "tick" (EVERY 1), consumed and ACKed by one consumer;
  - every 10 s the dead letter of "work" is respawned (DEADLETTER RESPAWN work COUNT 1000), so
    the population of "work" reaches a steady state instead of growing with its dead jobs.
Each minute prints: operations per second by kind, deferq VmRSS of both instances, Redis
used_memory, the queue population (ready + delayed + leased + dead), and the lateness
percentiles of delayed jobs as consumers see it (consume time - due time, ms; includes the
consumer's own queueing, an upper bound of deferq's).

At the end, after the producers stop and the consumers drain, counted in Redis: for "work",
published = acked + cancelled + expired + ready + delayed + leased + dead; for "sched",
published = replaced + cancelled + delayed (each REPLACE drops the job it replaces); and the
recurring population of "tick" equals the recurring publishes. RSS "flat after warm-up" means the last
minutes' values within 10% of the second minute's; both checks are printed as PASS/FAIL.
"""

import os
import random
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "lib"))

from dqtest import procs, resp  # noqa: E402
from dqtest.procs import rss_kib  # noqa: E402


def pct(values, p):
    if not values:
        return 0
    v = sorted(values)
    return v[min(len(v) - 1, int(len(v) * p / 100))]


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.ops = {}
        self.lateness = []
        self.replaced = 0  # answered REPLACE publishes on "sched" (each drops a live job)
        self.recurring = 0

    def add(self, kind, n=1):
        with self.lock:
            self.ops[kind] = self.ops.get(kind, 0) + n

    def take(self):
        with self.lock:
            ops, late = self.ops, self.lateness
            self.ops, self.lateness = {}, []
        return ops, late


class Client:
    def __init__(self, port):
        self.raw = resp.Raw(port, timeout=30)

    def call(self, *args):
        return self.raw.call(*args)


def producer(port, i, stats, halt):
    c = Client(port)
    rng = random.Random(i)
    k = 0
    while not halt.is_set():
        k += 1
        now_ms = int(time.time() * 1000)
        args = ["PUBLISH", "work", "", "TRIES", 3]
        delay = rng.randrange(3000) if rng.random() < 0.5 else 0
        if delay:
            args += ["PDELAY", delay]
        due = now_ms + delay
        args[2] = ("d%d" if delay else "n%d") % due
        r = c.call(*args)
        stats.add("publish" if isinstance(r, bytes) else "error")
        if k % 10 == 0:
            key = "order-%d-%d" % (i, k)
            first = c.call("PUBLISH", "sched", "v1", "ID", key, "DELAY", 3600)
            again = c.call("PUBLISH", "sched", "v2", "ID", key, "DELAY", 3600, "REPLACE")
            if isinstance(first, bytes) and isinstance(again, bytes):
                with stats.lock:
                    stats.replaced += 1
            else:
                stats.add("error")
            if c.call("CANCEL", "sched", key) != 1:
                stats.add("error")
        time.sleep(0.002)


def consumer(port, i, stats, halt):
    c = Client(port)
    rng = random.Random(100 + i)
    while not halt.is_set():
        jobs = c.call("CONSUME", "work", "TTR", 2, "COUNT", 10, "TIMEOUT", "0.5")
        if not isinstance(jobs, list):
            if jobs is not None:
                stats.add("error")
            continue
        now_ms = int(time.time() * 1000)
        stats.add("consume", len(jobs))
        acks = []
        for job in jobs:
            # A delayed job's first delivery (TRIES 3: 2 left): how late after its due time.
            if job[2].startswith(b"d") and job[3] == 2:
                with stats.lock:
                    stats.lateness.append(max(0, now_ms - int(job[2][1:])))
            roll = rng.random()
            if roll < 0.90:
                acks.append(job[1])
            elif roll < 0.95:
                c.call("NACK", "work", job[1])
                stats.add("nack")
        if acks:
            n = c.call("ACK", "work", *acks)
            stats.add("ack", n if isinstance(n, int) else 0)


def ticker(port, stats, halt):
    c = Client(port)
    last_pub = 0
    last_respawn = time.monotonic()
    n = 0
    while not halt.is_set():
        if time.monotonic() - last_respawn > 10:
            r = c.call("DEADLETTER", "RESPAWN", "work", "COUNT", 1000)
            stats.add("respawn", r if isinstance(r, int) else 0)
            last_respawn = time.monotonic()
        if time.monotonic() - last_pub > 10 and n < 1000:
            if isinstance(c.call("PUBLISH", "tick", "t%d" % n, "EVERY", 1), bytes):
                n += 1
                stats.add("recurring_publish")
            last_pub = time.monotonic()
        job = c.call("CONSUME", "tick", "TIMEOUT", "0.2")
        if isinstance(job, list):
            c.call("ACK", "tick", job[1])
            stats.add("tick_ack")
    with stats.lock:
        stats.recurring = n


def counts(rc, queue):
    prefix = "dq:{default/%s}:" % queue
    s = {k.decode(): int(v) for k, v in rc.hgetall(prefix + "s").items()
         if v.lstrip(b"-").isdigit()}
    # Delayed publishes are one field, pd, in both the delayed gauge and published_total.
    pd = s.pop("pd", 0)
    s["delayed"] = s.get("delayed", 0) + pd
    s["published_total"] = s.get("published_total", 0) + pd
    s["leased"] = rc.zcard(prefix + "l")
    return s


def main():
    if len(sys.argv) < 2:
        print("usage: soak.py /path/to/deferq [SECONDS]", file=sys.stderr)
        return 2
    binary = os.path.abspath(sys.argv[1])
    seconds = int(sys.argv[2]) if len(sys.argv) > 2 else 600
    tmp = procs.make_tmpdir("soak")
    servers = []
    try:
        rd = procs.Redis(tmp, appendonly=True).start()
        servers.append(rd)
        a = procs.Deferq(binary, tmp, rd.port, threads=1).start()
        servers.append(a)
        b = procs.Deferq(binary, tmp, rd.port, threads=1).start()
        servers.append(b)
        rc = rd.client()
        stats = Stats()
        halt_prod, halt_cons = threading.Event(), threading.Event()
        ports = [a.port, b.port]
        threads = [threading.Thread(target=producer, args=(ports[i % 2], i, stats, halt_prod))
                   for i in range(4)]
        threads += [threading.Thread(target=ticker, args=(a.port, stats, halt_prod))]
        consumers = [threading.Thread(target=consumer, args=(ports[i % 2], i, stats, halt_cons))
                     for i in range(4)]
        for t in threads + consumers:
            t.daemon = True
            t.start()
        print("minute  publish/s  consume/s  ack/s  errors  rss_a_KiB  rss_b_KiB  redis_KiB  "
              "population  late_p50  late_p99  late_max")
        rows = []
        start = time.monotonic()
        minute = 0
        while time.monotonic() - start < seconds:
            t0 = time.monotonic()
            time.sleep(min(60, seconds - (t0 - start)))
            minute += 1
            ops, late = stats.take()
            el = time.monotonic() - t0
            s = counts(rc, "work")
            pop = s.get("ready", 0) + s.get("delayed", 0) + s["leased"] + s.get("dead", 0)
            row = (minute, ops.get("publish", 0) / el, ops.get("consume", 0) / el,
                   ops.get("ack", 0) / el, ops.get("error", 0), rss_kib(a.proc.pid),
                   rss_kib(b.proc.pid), rc.info("memory")["used_memory"] // 1024, pop,
                   pct(late, 50), pct(late, 99), max(late) if late else 0)
            rows.append(row)
            print("%6d  %9.0f  %9.0f  %5.0f  %6d  %9d  %9d  %9d  %10d  %8d  %8d  %8d" % row)
            sys.stdout.flush()
        halt_prod.set()
        time.sleep(6)  # delayed jobs fall due, abandoned leases expire, consumers drain
        halt_cons.set()
        for t in threads + consumers:
            t.join(30)
        s = counts(rc, "work")
        finished = (s.get("acked_total", 0) + s.get("cancelled_total", 0) +
                    s.get("expired_total", 0))
        live = s.get("ready", 0) + s.get("delayed", 0) + s["leased"] + s.get("dead", 0)
        print("work: published %d, acked %d, cancelled %d, expired %d, live %d (ready %d, "
              "delayed %d, leased %d, dead %d)" % (
                  s.get("published_total", 0), s.get("acked_total", 0),
                  s.get("cancelled_total", 0), s.get("expired_total", 0), live,
                  s.get("ready", 0), s.get("delayed", 0), s["leased"], s.get("dead", 0)))
        ok = s.get("published_total", 0) == finished + live
        print("work balance: %s" % ("PASS" if ok else "FAIL"))
        d = counts(rc, "sched")
        d_live = d.get("ready", 0) + d.get("delayed", 0) + d["leased"] + d.get("dead", 0)
        d_ok = d.get("published_total", 0) == stats.replaced + d.get("cancelled_total", 0) + d_live
        print("sched: published %d, replaced %d, cancelled %d, live %d: %s"
              % (d.get("published_total", 0), stats.replaced, d.get("cancelled_total", 0), d_live,
                 "PASS" if d_ok else "FAIL"))
        t = counts(rc, "tick")
        tick_live = t.get("ready", 0) + t.get("delayed", 0) + t["leased"] + t.get("dead", 0)
        print("tick: %d recurring jobs published, %d live: %s"
              % (stats.recurring, tick_live, "PASS" if stats.recurring == tick_live else "FAIL"))
        if len(rows) >= 3:
            ref = rows[1]
            flat = all(abs(r[5] - ref[5]) <= ref[5] * 0.10 + 1024 and
                       abs(r[6] - ref[6]) <= ref[6] * 0.10 + 1024 for r in rows[2:])
            print("deferq RSS flat after the first minute (within 10%% + 1 MiB): %s"
                  % ("PASS" if flat else "FAIL"))
        return 0
    finally:
        for srv in reversed(servers):
            srv.stop()
        procs.remove_tmpdir(tmp)


if __name__ == "__main__":
    sys.exit(main())
