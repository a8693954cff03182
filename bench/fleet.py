#!/usr/bin/python3
"""bench/fleet.py: deferq in the shapes a real fleet has (issue 21), side by side in one run, each
figure as a ratio against (a) the same probe on one queue and (b) BullMQ 6 on the same work.
Run through bench/fleet.sh, which builds deferq and installs BullMQ; see there for the shapes.

Every shape starts its own redis-server (pinned to the last core) and deferq instances (pinned
to core 0) on free loopback ports, and stops them after. Runs are interleaved (shape after shape,
RUNS times) and the median of the runs is printed, with the raw figures of every run.
"""

import argparse
import asyncio
import collections
import os
import random
import re
import resource
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import redis

CPUS = os.cpu_count() or 1
REDIS_CPU = str(CPUS - 1)
DEFERQ_CPU = "0"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def proc_cpu_s(pid):
    f = open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def redis_cpu_s(r):
    c = r.info("cpu")
    return c["used_cpu_sys"] + c["used_cpu_user"]


def script_commands():
    """The commands the storage scripts run (redis.call and batched in src/persist/scripts)."""
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src", "persist",
                        "scripts")
    names = set()
    for d, _, files in os.walk(root):
        for f in files:
            if f.endswith(".lua"):
                with open(os.path.join(d, f)) as src:
                    names |= set(re.findall(r"(?:redis\.p?call|batched)\('([A-Za-z]+)'",
                                            src.read()))
    return {"cmdstat_" + n.lower() for n in names}


SCRIPT_COMMANDS = script_commands()


def redis_usec(r):
    """µs spent in commands since CONFIG RESETSTAT (INFO commandstats), INFO/CONFIG left out.
    Redis counts a command a function runs twice: in the FCALL's µs and in its own line. So the
    commands the scripts run are left out (their time is in the FCALL's), and so are deferq's
    few direct calls of the same commands (the metrics poller's dq:active reads every 2 s)."""
    return sum(v["usec"] for k, v in r.info("commandstats").items()
               if k not in ("cmdstat_info", "cmdstat_config") and k not in SCRIPT_COMMANDS)


class Fleet:
    """One redis-server and `instances` deferq processes; stop() kills them all."""

    def __init__(self, args, instances=2, config="", maxclients=10000, threads=1):
        self.dir = tempfile.mkdtemp(prefix="deferq-fleet.")
        self.procs = []
        self.rport = free_port()
        self.redis_proc = self.spawn(["taskset", "-c", REDIS_CPU, "redis-server", "--port",
                                      str(self.rport), "--bind", "127.0.0.1", "--save", "",
                                      "--appendonly", "no", "--dir", self.dir,
                                      "--maxclients", str(maxclients)], "redis")
        self.r = redis.Redis(port=self.rport, socket_timeout=60)
        self.wait_ping(self.r)
        self.ports, self.pids = [], []
        conf = os.path.join(self.dir, "deferq.toml")
        with open(conf, "w") as f:
            f.write("[server]\nmax_clients = %d\n%s" % (maxclients, config))
        for i in range(instances):
            port = free_port()
            p = self.spawn(["taskset", "-c", DEFERQ_CPU, args.deferq, "--config", conf, "--port",
                            str(port), "--threads", str(threads), "--pool",
                            "default=redis://127.0.0.1:%d" % self.rport], "deferq%d" % i)
            c = redis.Redis(port=port, socket_timeout=60)
            self.wait_ping(c)
            deadline = time.time() + 10
            while True:  # its job commands reach Redis (the storage library is loaded)
                try:
                    c.execute_command("QSTAT", "fleet-warmup")
                    break
                except redis.RedisError:
                    if time.time() > deadline:
                        raise
                    time.sleep(0.05)
            c.close()
            self.ports.append(port)
            self.pids.append(p.pid)

    def spawn(self, argv, name):
        log = open(os.path.join(self.dir, name + ".log"), "w")
        p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        self.procs.append(p)
        return p

    @staticmethod
    def wait_ping(c):
        deadline = time.time() + 10
        while True:
            try:
                c.ping()
                return
            except redis.RedisError:
                if time.time() > deadline:
                    raise
                time.sleep(0.05)

    def cpu(self):
        """(Redis CPU s, [deferq CPU s per instance])"""
        return redis_cpu_s(self.r), [proc_cpu_s(p) for p in self.pids]

    def stop(self):
        self.r.close()
        for p in self.procs:
            p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        subprocess.run(["rm", "-rf", self.dir])


def result_fields(text):
    line = [l for l in text.splitlines() if l.startswith("RESULT ")]
    if not line:
        sys.exit("no RESULT line in:\n" + text[-2000:])
    return {k: v for k, v in (f.split("=", 1) for f in line[-1].split()[1:])}


def lateness(args, queues, jobs, window_ms, count):
    """Consumers (2 per instance, 2 instances) blocked in CONSUME over `queues` queues; `jobs`
    jobs falling due at a steady rate over `window_ms`: lateness and CPU per job."""
    fl = Fleet(args)
    try:
        r0, d0 = fl.cpu()
        lead = 2500
        cmd = [args.lateness, "--jobs", str(jobs), "--pat", "--delay-min", str(lead),
               "--delay-max", str(lead + window_ms), "--queues", str(queues), "--consumers", "2",
               "--count", str(count), "--grace-s", "5", "--label", "q%d" % queues]
        for p in fl.ports:
            cmd += ["--port", str(p)]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=300).stdout
        r1, d1 = fl.cpu()
        f = result_fields(out)
        return {"p50": float(f["p50"]), "p99": float(f["p99"]),
                "missing": int(f["missing"]), "probe_p99": float(f["probe_p99"]),
                "redis_us": (r1 - r0) * 1e6 / jobs,
                "deferq_us": sum(b - a for a, b in zip(d0, d1)) * 1e6 / jobs}
    finally:
        fl.stop()


def bullmq(args, jobs, window_ms):
    """BullMQ 6 on the same work: `jobs` delayed jobs falling due over `window_ms`, one queue, a
    Worker of concurrency 50 (bench/fleet/bullmq.js)."""
    fl = Fleet(args, instances=0)
    try:
        env = dict(os.environ, NODE_PATH=args.node_modules)
        out = subprocess.run(["taskset", "-c", DEFERQ_CPU, "node", args.bullmq_js,
                              str(fl.rport), str(jobs), str(window_ms), "2500"],
                             capture_output=True, text=True, timeout=300, env=env)
        f = result_fields(out.stdout + out.stderr)
        return {"p50": float(f["p50"]), "p99": float(f["p99"]),
                "missing": jobs - int(f["received"]), "redis_us": float(f["redis_us_per_job"])}
    finally:
        fl.stop()


# ---- idle consumers and the cross-instance wake-up ----

def resp(*a):
    out = b"*%d\r\n" % len(a)
    for x in a:
        x = x if isinstance(x, bytes) else str(x).encode()
        out += b"$%d\r\n%s\r\n" % (len(x), x)
    return out


async def read_reply(r):
    line = await r.readline()
    t = line[:1]
    if t in (b"*", b"%", b"~", b">"):
        n = int(line[1:-2])
        n = n * 2 if t == b"%" else n
        return [await read_reply(r) for _ in range(max(n, 0))]
    if t == b"$":
        n = int(line[1:-2])
        if n < 0:
            return None
        return (await r.readexactly(n + 2))[:-2]
    return line


async def idle_probe(fl, consumers, wakes, settle_s, measure_s):
    conns = []
    for i in range(consumers):
        port = fl.ports[i % len(fl.ports)]
        rd, wr = await asyncio.open_connection("127.0.0.1", port)
        wr.write(resp("CONSUME", "idle_%d" % i, "TIMEOUT", 600))
        conns.append((rd, wr, port))
        if i % 500 == 499:
            await wr.drain()
            await asyncio.sleep(0.02)
    await asyncio.sleep(settle_s)
    r0, d0 = fl.cpu()
    t0 = time.time()
    await asyncio.sleep(measure_s)
    r1, d1 = fl.cpu()
    span = time.time() - t0
    out = {"redis_pct": (r1 - r0) / span * 100}
    for i, (a, b) in enumerate(zip(d0, d1)):
        out["deferq%d_pct" % i] = (b - a) / span * 100
    # A job published through the other instance reaches the consumer blocked on its queue.
    pubs = {}
    for p in fl.ports:
        pubs[p] = await asyncio.open_connection("127.0.0.1", p)
    lat, lost = [], 0
    for i in random.Random(1).sample(range(consumers), wakes):
        rd, _, port = conns[i]
        other = [p for p in fl.ports if p != port][0]
        pr, pw = pubs[other]
        t = time.perf_counter()
        pw.write(resp("PUBLISH", "idle_%d" % i, "x"))
        await read_reply(pr)
        try:
            await asyncio.wait_for(read_reply(rd), 2.0)
        except asyncio.TimeoutError:
            lost += 1
            continue
        lat.append((time.perf_counter() - t) * 1000)
        await asyncio.sleep(0.005)
    lat.sort()
    out.update(wake_p50=lat[len(lat) // 2], wake_p99=lat[min(len(lat) - 1, int(len(lat) * 0.99))],
               lost=lost)
    for _, wr, _ in conns:
        wr.close()
    for _, pw in pubs.values():
        pw.close()
    return out


def idle(args, consumers):
    """`consumers` consumers each blocked on its own empty queue, spread over 2 instances."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, consumers + 4096)), hard))
    fl = Fleet(args, maxclients=consumers + 1000)
    try:
        return asyncio.run(idle_probe(fl, consumers, args.wakes, 8.0, args.idle_seconds))
    finally:
        fl.stop()


# ---- whole life per job, and request/reply ----

def pipelined(c, items, add, page=200):
    out = []
    for i in range(0, len(items), page):
        p = c.pipeline(transaction=False)
        for it in items[i:i + page]:
            add(p, it)
        out.extend(p.execute(raise_on_error=False))
    return out


def whole_life(args, queues, jobs):
    """`jobs` jobs spread over `queues` queues: delayed publish, due within a 2 s window, consumed
    (non-blocking CONSUME, COUNT 100), acked one by one: Redis per job (INFO commandstats µs and
    INFO cpu) over the whole life."""
    fl = Fleet(args, instances=1)
    c = redis.Redis(port=fl.ports[0], socket_timeout=60)
    try:
        names = ["life_%d" % (i % queues) for i in range(jobs)]
        fl.r.config_resetstat()
        cpu0 = redis_cpu_s(fl.r)
        start = int(time.time() * 1000) + args.life_lead_ms
        replies = pipelined(c, list(enumerate(names)), lambda p, x: p.execute_command(
            "PUBLISH", x[1], b"x" * 64, "PAT", start + x[0] * 2000 // jobs))
        bad = [x for x in replies if isinstance(x, Exception)]
        if bad:
            sys.exit("publish failed: %r" % bad[:3])
        if time.time() * 1000 > start:
            sys.exit("publishing took longer than the lead time; raise --life-lead-ms")
        time.sleep(max(0, (start + 2000) / 1000 - time.time()) + 0.5)
        # Each queue is consumed until it gave every job published to it: a queue is asked again
        # while jobs of it are missing, and a drained one is not polled on (that would be the
        # bench's cost, not a job's).
        owed = collections.Counter(names)
        left = sorted(owed)
        got = 0
        deadline = time.time() + 60
        while left and time.time() < deadline:
            replies = pipelined(c, left, lambda p, q: p.execute_command("CONSUME", q, "COUNT", 100))
            acks, again = [], []
            for q, rep in zip(left, replies):
                if isinstance(rep, Exception) or not rep:
                    again.append(q)
                    continue
                jobs_of = rep if isinstance(rep[0], list) else [rep]
                acks.extend((q, j[1]) for j in jobs_of)
                owed[q] -= len(jobs_of)
                if owed[q] > 0:
                    again.append(q)
            pipelined(c, acks, lambda p, qi: p.execute_command("ACK", qi[0], qi[1]))
            got += len(acks)
            left = again
            # A round that got nothing waits before asking again (jobs not moved yet); one that
            # got jobs goes on at once: sleeping after each full reply made one queue's 100,000
            # jobs take 1,000 sleeps of 50 ms, and a slow run hit the 60 s deadline (missing).
            if again and not acks:
                time.sleep(0.05)
        usec = redis_usec(fl.r)
        cpu = redis_cpu_s(fl.r) - cpu0
        return {"usec": usec / jobs, "cpu_us": cpu * 1e6 / jobs, "missing": jobs - got}
    finally:
        c.close()
        fl.stop()


def request_reply(args, trips):
    """Two rounds of `trips` request/reply round trips, a reply queue each (server.retain_seconds
    = 3), on a Redis holding 20,000 waiting jobs: Redis keys, used_memory and /metrics series for
    those queues once the retention has passed. used_memory is measured against the start of the
    second round: the first one is also the first time this Redis runs some commands (LPOP, ZREM,
    ZUNIONSTORE...), and Redis 7 then allocates that command's latency histogram for good (~25 KB
    each, INFO latencystats), which says nothing of what a round trip leaves. The first round's
    figure against the very start is printed too."""
    mport = free_port()
    fl = Fleet(args, instances=1, config='retain_seconds = 3\nmetrics_listen = "127.0.0.1:%d"\n'
               % mport)
    c = redis.Redis(port=fl.ports[0], socket_timeout=60)
    indexes = ("dq:due", "dq:queues", "dq:active")

    def used_memory():
        """The least of a few samples: what is left, not a client's buffers of the moment."""
        samples = []
        for _ in range(5):
            samples.append(fl.r.info("memory")["used_memory"])
            time.sleep(0.2)
        return min(samples)

    def round_trips(tag, keys0, later):
        names = ["reply.%s.%d" % (tag, i) for i in range(trips)]
        pipelined(c, names, lambda p, q: p.execute_command("PUBLISH", q, b"answer"))
        jobs = pipelined(c, names, lambda p, q: p.execute_command("CONSUME", q))
        pipelined(c, list(zip(names, jobs)), lambda p, qj: p.execute_command("ACK", qj[0], qj[1][1]))
        keys1 = fl.r.dbsize()
        # Until the keys and the series are gone and the pump owner has copied the pool-wide
        # indexes onto themselves (every 10 s once mostly empty, queue/delivery/pump.h), or 60 s.
        t0 = time.time()
        series = -1
        while time.time() - t0 < 60:
            c.execute_command("PUBLISH", "waiting", b"y", "PAT", later)  # the fleet goes on
            body = subprocess.run(["curl", "-s", "http://127.0.0.1:%d/metrics" % mport],
                                  capture_output=True, text=True).stdout
            series = len(re.findall(r'queue="reply\.', body))
            if (series == 0 and fl.r.dbsize() == keys0
                    and all((fl.r.memory_usage(k) or 0) < 8192 for k in indexes)):
                break
            time.sleep(0.5)
        return keys1, series, time.time() - t0

    try:
        later = int(time.time() * 1000) + 3600 * 1000  # one due time: one bucket
        pipelined(c, list(range(20000)), lambda p, _: p.execute_command(
            "PUBLISH", "waiting", b"x" * 64, "PAT", later))
        time.sleep(2.5)
        keys0, mem0 = fl.r.dbsize(), used_memory()
        round_trips("first", keys0, later)
        mem1 = used_memory()
        keys1, series, seconds = round_trips("second", keys0, later)
        mem2 = used_memory()
        return {"keys_before": keys0, "keys_served": keys1, "keys_after": fl.r.dbsize(),
                "mem_pct": (mem2 - mem1) * 100 / mem1, "first_pct": (mem1 - mem0) * 100 / mem0,
                "series_after": series, "seconds": seconds}
    finally:
        c.close()
        fl.stop()


# ---- the report ----

def med(runs, key):
    return statistics.median(r[key] for r in runs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--deferq", required=True)
    ap.add_argument("--lateness", required=True)
    ap.add_argument("--bullmq-js", required=True)
    ap.add_argument("--node-modules", required=True)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--queues", type=int, default=1000)
    ap.add_argument("--idle-consumers", type=int, default=10000)
    ap.add_argument("--idle-seconds", type=float, default=15.0)
    ap.add_argument("--wakes", type=int, default=200)
    ap.add_argument("--life-jobs", type=int, default=100000)
    ap.add_argument("--life-lead-ms", type=int, default=15000)
    ap.add_argument("--trips", type=int, default=10000)
    ap.add_argument("--shapes", default="many,fast,waiting,idle,life,reply")
    args = ap.parse_args()
    shapes = args.shapes.split(",")
    Q = args.queues
    # name -> (function, what it compares against)
    probes = {}
    if "many" in shapes:
        probes["many_1250"] = lambda: lateness(args, Q, 7500, 6000, 100)
        probes["one_1250"] = lambda: lateness(args, 1, 7500, 6000, 100)
        probes["bull_1250"] = lambda: bullmq(args, 7500, 6000)
    if "fast" in shapes:
        probes["many_10k"] = lambda: lateness(args, Q, 30000, 3000, 100)
        probes["one_10k"] = lambda: lateness(args, 1, 30000, 3000, 100)
    if "waiting" in shapes:
        probes["wait_1000"] = lambda: lateness(args, 1, 6000, 6000, 1)
        probes["bull_1000"] = lambda: bullmq(args, 6000, 6000)
    if "idle" in shapes:
        probes["idle"] = lambda: idle(args, args.idle_consumers)
    if "life" in shapes:
        probes["life_1"] = lambda: whole_life(args, 1, args.life_jobs)
        probes["life_many"] = lambda: whole_life(args, Q, args.life_jobs)
        probes["life_each"] = lambda: whole_life(args, args.life_jobs, args.life_jobs)
    if "reply" in shapes:
        probes["reply"] = lambda: request_reply(args, args.trips)
    results = {k: [] for k in probes}
    names = list(probes)
    for run in range(args.runs):
        order = names if run % 2 == 0 else names[::-1]
        for name in order:
            res = probes[name]()
            results[name].append(res)
            print("run %d %-10s %s" % (run + 1, name, " ".join(
                "%s=%.2f" % (k, v) if isinstance(v, float) else "%s=%s" % (k, v)
                for k, v in res.items())), flush=True)

    print("\nmedians of %d runs; ratios: (a) against one queue, (b) against BullMQ 6" % args.runs)

    def row(title, value, unit, a=None, b=None, target=""):
        ra = "%6.2fx" % (value / a) if a else "%7s" % "-"
        rb = "%6.2fx" % (value / b) if b else "%7s" % "-"
        print("%-58s %9.2f %-6s (a) %s (b) %s  %s" % (title, value, unit, ra, rb, target))

    if "many" in shapes:
        m, o, b = results["many_1250"], results["one_1250"], results["bull_1250"]
        row("%d queues, 1,250 jobs/s: lateness p99" % Q, med(m, "p99"), "ms", med(o, "p99"),
            med(b, "p99"), "target <= 3 ms")
        row("  Redis CPU per job", med(m, "redis_us"), "us", med(o, "redis_us"),
            med(b, "redis_us"), "target (a) <= 1.3x")
        row("  deferq CPU per job (both instances)", med(m, "deferq_us"), "us",
            med(o, "deferq_us"))
        row("1 queue, 1,250 jobs/s: lateness p99", med(o, "p99"), "ms", None, med(b, "p99"),
            "target <= 2.5 ms")
    if "fast" in shapes:
        m, o = results["many_10k"], results["one_10k"]
        row("%d queues, 10,000 jobs/s: lateness p99" % Q, med(m, "p99"), "ms", med(o, "p99"))
        row("  Redis CPU per job", med(m, "redis_us"), "us", med(o, "redis_us"))
        row("1 queue, 10,000 jobs/s: lateness p99", med(o, "p99"), "ms", None, None,
            "target <= 5 ms (waiting), <= 6 ms")
    if "waiting" in shapes:
        w, b = results["wait_1000"], results["bull_1000"]
        row("1,000 jobs/s, 4 consumers waiting (COUNT 1): lateness p99", med(w, "p99"), "ms",
            None, med(b, "p99"), "target <= 2 ms")
        row("  Redis CPU per job", med(w, "redis_us"), "us", None, med(b, "redis_us"),
            "target <= 50 us")
        row("  deferq CPU per job (both instances)", med(w, "deferq_us"), "us", None, None,
            "target <= 30 us")
    if "idle" in shapes:
        i = results["idle"]
        row("%d consumers idle on own queues: Redis CPU" % args.idle_consumers,
            med(i, "redis_pct"), "%core", None, None, "target <= 1%")
        for k in sorted(x for x in i[0] if x.startswith("deferq")):
            row("  %s CPU" % k[:-4], med(i, k), "%core", None, None, "target <= 1%")
        row("  cross-instance wake-up p99", med(i, "wake_p99"), "ms", None, None,
            "target <= 5 ms")
    if "life" in shapes:
        one = med(results["life_1"], "usec")
        row("whole life, %d jobs on 1 queue: Redis us/job" % args.life_jobs, one, "us")
        row("  over %d queues" % Q, med(results["life_many"], "usec"), "us", one, None,
            "target (a) <= 1.3x")
        row("  over %d queues (one job each)" % args.life_jobs, med(results["life_each"], "usec"),
            "us", one, None, "target (a) <= 2x")
        row("  (Redis CPU, INFO cpu) 1 queue", med(results["life_1"], "cpu_us"), "us")
        row("  (Redis CPU, INFO cpu) %d queues" % Q, med(results["life_many"], "cpu_us"), "us",
            med(results["life_1"], "cpu_us"))
        row("  (Redis CPU, INFO cpu) %d queues" % args.life_jobs,
            med(results["life_each"], "cpu_us"), "us", med(results["life_1"], "cpu_us"))
    if "reply" in shapes:
        rr = results["reply"][-1]
        print("%d request/reply round trips: keys %d before, %d served, %d after %.0f s; "
              "used_memory %+.2f%% (runs: %s; the first round on a fresh Redis %+.2f%%, its "
              "latency histograms); /metrics series of reply queues after: %d (target: same "
              "keys, within 1%%, 0 series)" % (
                  args.trips, rr["keys_before"], rr["keys_served"], rr["keys_after"],
                  rr["seconds"], med(results["reply"], "mem_pct"),
                  ", ".join("%+.2f%%" % x["mem_pct"] for x in results["reply"]),
                  med(results["reply"], "first_pct"), rr["series_after"]))


if __name__ == "__main__":
    main()
