#!/usr/bin/python3
"""bench/fcall_profile.py: where Redis's time per job goes, function by function, in a fleet
shape (issue 21). Run through bench/fcall_profile.sh.

The shape is bench/fleet.sh's: 2 deferq instances, 4 consumers blocked in CONSUME (2 per
instance), JOBS delayed jobs falling due over WINDOW ms (bench/lateness), over QUEUES queues,
COUNT per reply, an ACK per job. While it runs, Redis logs every call (SLOWLOG with threshold 0;
its own timing, the same clock as INFO commandstats) and MONITOR records one second in the middle
of the window, which tells which commands each function call ran.

Printed, per deferq function (and per plain command): calls per job, µs per call (median and
mean), µs per job, commands per call and the commonest of them; then, as the reference measured
in the same invocation on the same redis-server, the µs of a trivial function (one HGET) and of
a function running ten HINCRBYs: the cost of a call and of a command inside one on this machine
at this moment, which the figures above are read against (ratios). Last, for each function, its
commonest command sequences in MONITOR's second and the share of its calls that ran exactly that
one: what tells one call from another (a consume that found nothing, a pump that staged a bucket).
"""

import argparse
import collections
import os
import re
import statistics
import subprocess
import sys
import time


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fleet  # noqa: E402

SEQUENCES = 4  # the commonest command sequences printed per function

TRIVIAL = """#!lua name=fcall_profile_reference
redis.register_function('ref_one', function(KEYS, ARGV) return redis.call('HGET', KEYS[1], 'f') end)
redis.register_function('ref_ten', function(KEYS, ARGV)
  for i = 1, 10 do redis.call('HINCRBY', KEYS[1], 'f', '1') end
  return 1
end)
"""


def reference(r, calls=2000):
    """µs per call of the trivial functions (commandstats), in this redis-server, one round trip
    each as deferq's calls mostly come in the shapes measured here."""
    r.function_load(TRIVIAL, replace=True)
    out = {}
    for name in ("ref_one", "ref_ten"):
        r.config_resetstat()
        for _ in range(calls):
            r.fcall(name, 1, "fcall-profile-ref")
        out[name] = r.info("commandstats")["cmdstat_fcall"]["usec_per_call"]
    r.delete("fcall-profile-ref")
    r.function_delete("fcall_profile_reference")
    return out


def function_name(words):
    """A SLOWLOG or MONITOR command's name: deferq's function (dq_<version>_<name> -> name; a
    batch names its script: batch:publish), or the command."""
    if not words:
        return "?"
    cmd = words[0].upper()
    if cmd != "FCALL" or len(words) < 2:
        return cmd
    name = words[1].rsplit("_", 1)[-1]
    if name == "batch" and len(words) > 3:
        try:
            keys = int(words[2])
            return "batch:" + words[3 + keys]
        except (ValueError, IndexError):
            pass
    return name


def monitor_calls(path):
    """{name: [[commands of one call], ...]} from a MONITOR capture."""
    by = collections.defaultdict(list)
    cur = None
    with open(path, errors="replace") as f:
        for line in f:
            m = re.match(r"^[\d.]+ \[\d+ ([^\]]+)\] (.*)$", line.strip())
            if not m:
                continue
            words = re.findall(r'"((?:[^"\\]|\\.)*)"', m.group(2))
            if not words:
                continue
            if m.group(1) != "lua":
                cur = []
                by[function_name(words)].append(cur)
            elif cur is not None:
                cur.append(words[0].upper())
    return by


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--deferq", required=True)
    ap.add_argument("--lateness", required=True)
    ap.add_argument("--jobs", type=int, default=6000)
    ap.add_argument("--window-ms", type=int, default=6000)
    ap.add_argument("--queues", type=int, default=1)
    ap.add_argument("--count", type=int, default=1)
    args = ap.parse_args()

    fl = fleet.Fleet(args)
    try:
        ref = reference(fl.r)
        fl.r.config_set("slowlog-log-slower-than", 0)
        fl.r.config_set("slowlog-max-len", 1000000)
        fl.r.slowlog_reset()
        fl.r.config_resetstat()
        r0, d0 = fl.cpu()
        cmd = [args.lateness, "--jobs", str(args.jobs), "--pat", "--delay-min", "2500",
               "--delay-max", str(2500 + args.window_ms), "--queues", str(args.queues),
               "--consumers", "2", "--count", str(args.count), "--grace-s", "5"]
        for p in fl.ports:
            cmd += ["--port", str(p)]
        lat = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        mon = os.path.join(fl.dir, "monitor.txt")
        time.sleep(2.5 + args.window_ms / 2000.0)
        subprocess.run("timeout 1 redis-cli -p %d monitor > %s" % (fl.rport, mon), shell=True)
        out = lat.communicate(timeout=300)[0]
        r1, d1 = fl.cpu()
        fl.r.config_set("slowlog-log-slower-than", 10000)
        result = fleet.result_fields(out)
        # Raw entries: [id, time, µs, [argv], client, name]; a command a function ran has the
        # client "?:0" and is part of its function's µs.
        log = [e for e in fl.r.execute_command("SLOWLOG", "GET", 1000000)
               if len(e) > 4 and e[4] != b"?:0"]
        calls = monitor_calls(mon)
    finally:
        fl.stop()

    jobs = args.jobs
    print("shape: %d jobs over %d queue(s) falling due in %d ms, 4 consumers (COUNT %d), "
          "2 instances" % (jobs, args.queues, args.window_ms, args.count))
    print("lateness p50 %s ms, p99 %s ms; Redis CPU %.0f µs/job, deferq CPU %.0f µs/job" % (
        result["p50"], result["p99"], (r1 - r0) * 1e6 / jobs,
        sum(b - a for a, b in zip(d0, d1)) * 1e6 / jobs))
    print("reference (same redis-server, this run): a trivial function (1 HGET) %.1f µs, "
          "one with 10 HINCRBYs %.1f µs (%.1f µs per command inside a call)" % (
              ref["ref_one"], ref["ref_ten"], (ref["ref_ten"] - ref["ref_one"]) / 9))
    agg = collections.defaultdict(list)
    for e in log:
        name = function_name([w.decode(errors="replace") for w in e[3]])
        if name in ("SLOWLOG", "CONFIG", "INFO"):
            continue
        agg[name].append(e[2])
    total = sum(sum(v) for v in agg.values())
    print("%-16s %9s %8s %8s %8s %9s %7s  %s" % ("call", "calls/job", "µs p50", "µs mean",
                                                "µs/job", "x trivial", "cmds", "commands per call"))
    for name, d in sorted(agg.items(), key=lambda kv: -sum(kv[1])):
        if sum(d) < 0.005 * total:
            continue
        mine = calls.get(name, [])
        cmds = statistics.mean(len(c) for c in mine) if mine else 0
        common = collections.Counter(x for c in mine for x in c)
        top = ", ".join("%s %.2f" % (k, v / len(mine)) for k, v in common.most_common(8))
        print("%-16s %9.3f %8.0f %8.1f %8.1f %8.1fx %7.1f  %s" % (
            name, len(d) / jobs, statistics.median(d), statistics.mean(d), sum(d) / jobs,
            statistics.mean(d) / ref["ref_one"], cmds, top))
    print("all calls: %.1f µs/job (SLOWLOG; Redis CPU beyond it is reading, parsing and "
          "writing the calls)" % (total / jobs))
    print("commonest command sequences per call (MONITOR's second; a queue's keys are not shown)")
    for name, mine in sorted(calls.items(), key=lambda kv: -len(kv[1])):
        if not name.islower() or len(mine) < 10:
            continue  # plain commands, and functions called too seldom to say
        print("%s, %d calls:" % (name, len(mine)))
        for seq, n in collections.Counter(" ".join(c) for c in mine).most_common(SEQUENCES):
            print("  %5.1f%%  %s" % (100.0 * n / len(mine), seq if len(seq) <= 200 else
                                     seq[:197] + "..."))


if __name__ == "__main__":
    main()
