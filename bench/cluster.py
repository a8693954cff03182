#!/usr/bin/python3
"""deferq on a 3-master Redis Cluster against deferq on one redis-server, in the same run
(issue 12 item 3). bench/cluster.sh runs this; see there for what is measured and how.

    /usr/bin/python3 bench/cluster.py DEFERQ_BIN LATENESS_BIN
"""

import os
import re
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "lib"))

from dqtest import cluster, procs  # noqa: E402

RUNS = int(os.environ.get("RUNS", "3"))
PUBLISH_N = int(os.environ.get("PUBLISH_JOBS", "100000"))
QUEUES = int(os.environ.get("QUEUES", "200"))
LATENESS_JOBS = int(os.environ.get("LATENESS_JOBS", "5000"))
IDLE_QUEUES = int(os.environ.get("IDLE_QUEUES", "2000"))
CLIENT_CPU = os.environ.get("CLIENT_CPU", "0")
SERVER_CPU = os.environ.get("SERVER_CPU", "1")
SHARD_JOBS = int(os.environ.get("SHARD_JOBS", "50000"))
# "shards": only the 8-shard against 1-shard comparison (on the cluster), not the rest.
ONLY = os.environ.get("BENCH_ONLY", "")
SHARDED, UNSHARDED = "hot8", "hot1"  # [shards.default] hot8 = 8 in the cluster's config


def pin(pid, cpu):
    subprocess.run(["taskset", "-a", "-p", "-c", cpu, str(pid)], capture_output=True)


def publish_rate(port):
    """PUBLISH q<0..QUEUES-1> <64 bytes> through deferq: redis-benchmark -c 50 -P 16, jobs/s."""
    out = subprocess.run(
        ["taskset", "-c", CLIENT_CPU, "redis-benchmark", "-h", "127.0.0.1", "-p", str(port),
         "-c", "50", "-P", "16", "-n", str(PUBLISH_N), "-r", str(QUEUES), "--csv",
         "PUBLISH", "q__rand_int__", "x" * 64],
        capture_output=True, text=True, timeout=600)
    row = out.stdout.strip().splitlines()[-1]
    try:
        return float(row.split(",")[1].strip('"'))
    except (IndexError, ValueError):
        raise RuntimeError("redis-benchmark:\n" + out.stdout[-2000:] + out.stderr[-2000:])


def publish_one_queue_rate(port, queue, n):
    """PUBLISH <queue> <64 bytes>: redis-benchmark -c 50 -P 16, jobs/s."""
    out = subprocess.run(
        ["taskset", "-c", CLIENT_CPU, "redis-benchmark", "-h", "127.0.0.1", "-p", str(port),
         "-c", "50", "-P", "16", "-n", str(n), "--csv", "PUBLISH", queue, "x" * 64],
        capture_output=True, text=True, timeout=600)
    try:
        return float(out.stdout.strip().splitlines()[-1].split(",")[1].strip('"'))
    except (IndexError, ValueError):
        raise RuntimeError("redis-benchmark:\n" + out.stdout[-2000:] + out.stderr[-2000:])


def consume_ack_rate(port, jobs, names=None):
    """Consumers (8 connections) CONSUME ... COUNT 50 from all queues (or `names`; each
    connection takes its share, or all of them when there are fewer than 8) and ACK each batch
    per queue, until `jobs` were ACKed; jobs/s."""
    import redis
    # redis-benchmark's __rand_int__
    names = names or ["q%012d" % i for i in range(QUEUES)]
    done = [0]
    lock = threading.Lock()

    def worker(part):
        c = redis.Redis(port=port, socket_timeout=30)
        mine = names[part::8] or names
        while True:
            with lock:
                if done[0] >= jobs:
                    return
            got = c.execute_command("CONSUME", *mine, "TTR", 120, "COUNT", 50)
            if not got:
                return
            by_q = {}
            for j in got:
                by_q.setdefault(j[0], []).append(j[1])
            p = c.pipeline(transaction=False)
            for q, ids in by_q.items():
                p.execute_command("ACK", q, *ids)
            n = sum(p.execute())
            with lock:
                done[0] += n

    os.sched_setaffinity(0, {int(CLIENT_CPU)})
    t0 = time.monotonic()
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    os.sched_setaffinity(0, set(range(os.cpu_count())))
    return done[0] / (time.monotonic() - t0), done[0]


def lateness(lateness_bin, port):
    out = subprocess.run(
        ["taskset", "-c", CLIENT_CPU, lateness_bin, "--port", str(port), "--jobs",
         str(LATENESS_JOBS), "--delay-min", "1000", "--delay-max", "5000", "--queue", "late"],
        capture_output=True, text=True, timeout=300)
    m = re.search(r"lateness ms: min ([\d.-]+)\s+p50 ([\d.-]+)\s+p90 ([\d.-]+)\s+p99 ([\d.-]+)\s+"
                  r"max ([\d.-]+)", out.stdout)
    missing = re.search(r"missing (\d+)", out.stdout)
    if not m:
        raise RuntimeError("lateness tool:\n" + out.stdout + out.stderr)
    return float(m.group(2)), float(m.group(4)), float(m.group(5)), int(missing.group(1))


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def idle_cost(deferq, redises):
    """IDLE_QUEUES queues holding one job due in an hour: CPU of deferq and of the Redis
    processes over 10 s, in % of a core (the pump owner's due-index reads, discovery included)."""
    import redis
    c = redis.Redis(port=deferq.port)
    p = c.pipeline(transaction=False)
    for i in range(IDLE_QUEUES):
        p.execute_command("PUBLISH", "idle%d" % i, "x", "DELAY", 3600)
    p.execute()
    time.sleep(4)  # every slot discovered (3.2 s at sweep_ms 100)
    pids = [r.proc.pid for r in redises]
    d0, r0 = cpu_seconds(deferq.proc.pid), sum(cpu_seconds(x) for x in pids)
    time.sleep(10)
    d1, r1 = cpu_seconds(deferq.proc.pid), sum(cpu_seconds(x) for x in pids)
    for i in range(IDLE_QUEUES):
        p.execute_command("PURGE", "idle%d" % i)
    p.execute()
    return 100 * (d1 - d0) / 10, 100 * (r1 - r0) / 10


def shard_comparison(setup):
    """On the cluster: one queue of 8 shards (spread over the masters) against one of 1 shard
    (one master), publish and consume+ack, RUNS runs alternating; prints medians and ratio."""
    port = setup.deferq.port
    res = {SHARDED: {"publish": [], "consume_ack": []},
           UNSHARDED: {"publish": [], "consume_ack": []}}
    for run in range(RUNS):
        for q in ((SHARDED, UNSHARDED) if run % 2 == 0 else (UNSHARDED, SHARDED)):
            pub = publish_one_queue_rate(port, q, SHARD_JOBS)
            rate, n = consume_ack_rate(port, SHARD_JOBS, [q])
            res[q]["publish"].append(pub)
            res[q]["consume_ack"].append(rate)
            print("run %d %-5s publish %8.0f/s  consume+ack %8.0f/s (%d jobs)"
                  % (run + 1, q, pub, rate, n), flush=True)
    print()
    print("one hot queue on the 3-master cluster, medians of %d runs; ratio = 8 shards / 1" % RUNS)
    print("%-22s %12s %12s %8s" % ("", "1 shard", "8 shards", "ratio"))
    for key, label in (("publish", "publish jobs/s"), ("consume_ack", "consume+ack jobs/s")):
        one = statistics.median(res[UNSHARDED][key])
        eight = statistics.median(res[SHARDED][key])
        print("%-22s %12.0f %12.0f %8.2f" % (label, one, eight, eight / one))


class Setup:
    def __init__(self, name, tmpdir, deferq_bin):
        self.name = name
        self.redises = []
        if name == "cluster":
            # Redis's default node timeout: three masters sharing one busy core must not time
            # each other out (the tests use 1 s to fail over quickly).
            self.cluster = cluster.RedisCluster(tmpdir, masters=3, replicas=0,
                                                node_timeout_ms=15000).start()
            self.redises = self.cluster.nodes
            seeds = ", ".join('"%s"' % s for s in self.cluster.seeds())
            cfg = ('[server]\nmetrics_listen = "off"\n[pools.default]\ncluster = [%s]\n'
                   'timeout_ms = 5000\n[shards.default]\n%s = 8\n' % (seeds, SHARDED))
            self.deferq = procs.Deferq(deferq_bin, tmpdir, None, config_text=cfg, threads=1)
        else:
            self.cluster = None
            self.redises = [procs.Redis(tmpdir).start()]
            cfg = ('[server]\nmetrics_listen = "off"\n[pools.default]\n'
                   'addr = "redis://127.0.0.1:%d"\ntimeout_ms = 5000\n' % self.redises[0].port)
            self.deferq = procs.Deferq(deferq_bin, tmpdir, None, config_text=cfg, threads=1)
        try:
            self.deferq.start()
        except Exception:
            self.stop()
            raise
        for r in self.redises:
            pin(r.proc.pid, SERVER_CPU)
        pin(self.deferq.proc.pid, CLIENT_CPU)
        # Warm-up: every node's connections open and pass their handshake before the clock runs.
        subprocess.run(["redis-benchmark", "-h", "127.0.0.1", "-p", str(self.deferq.port), "-c",
                        "50", "-n", "5000", "-r", str(QUEUES), "PUBLISH", "q__rand_int__", "w"],
                       capture_output=True, timeout=120)

    def stop(self):
        self.deferq.stop()
        for r in self.redises:
            r.kill9()


def main():
    deferq_bin, lateness_bin = sys.argv[1], sys.argv[2]
    tmp = procs.make_tmpdir("bench-cluster")
    setups = []
    try:
        for name in ("single", "cluster") if ONLY != "shards" else ("cluster",):
            setups.append(Setup(name, tmp, deferq_bin))
        if ONLY == "shards":
            return shard_comparison(setups[0])
        res = {s.name: {"publish": [], "consume_ack": [], "p50": [], "p99": [], "max": [],
                        "missing": 0} for s in setups}
        for run in range(RUNS):
            order = setups if run % 2 == 0 else list(reversed(setups))
            for s in order:
                r = res[s.name]
                r["publish"].append(publish_rate(s.deferq.port))
                rate, n = consume_ack_rate(s.deferq.port, PUBLISH_N)
                r["consume_ack"].append(rate)
                p50, p99, mx, missing = lateness(lateness_bin, s.deferq.port)
                r["p50"].append(p50)
                r["p99"].append(p99)
                r["max"].append(mx)
                r["missing"] += missing
                print("run %d %-7s publish %8.0f/s  consume+ack %8.0f/s (%d jobs)  lateness "
                      "p50 %.1f p99 %.1f max %.1f ms missing %d"
                      % (run + 1, s.name, r["publish"][-1], rate, n, p50, p99, mx, missing),
                      flush=True)
        idle = {s.name: idle_cost(s.deferq, s.redises) for s in setups}
        med = {n: {k: statistics.median(v) for k, v in r.items() if isinstance(v, list)}
               for n, r in res.items()}
        s, c = med["single"], med["cluster"]
        print()
        print("medians of %d runs; ratio = cluster / single" % RUNS)
        print("%-22s %12s %12s %8s" % ("", "single", "cluster", "ratio"))
        for key, label in (("publish", "publish jobs/s"), ("consume_ack", "consume+ack jobs/s")):
            print("%-22s %12.0f %12.0f %8.2f" % (label, s[key], c[key], c[key] / s[key]))
        for key in ("p50", "p99", "max"):
            print("%-22s %12.1f %12.1f" % ("lateness %s ms" % key, s[key], c[key]))
        print("%-22s %12d %12d" % ("lateness missing", res["single"]["missing"],
                                    res["cluster"]["missing"]))
        print("%-22s %12.1f %12.1f" % ("idle %d queues: deferq %%" % IDLE_QUEUES,
                                       idle["single"][0], idle["cluster"][0]))
        print("%-22s %12.1f %12.1f" % ("idle: redis % (all)", idle["single"][1],
                                       idle["cluster"][1]))
        print()
        shard_comparison(setups[1])
    finally:
        for s in setups:
            s.stop()
        procs.remove_tmpdir(tmp)


if __name__ == "__main__":
    main()
