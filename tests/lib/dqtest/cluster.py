"""A real Redis Cluster on loopback for the tests and benchmarks: N masters with R replicas each
(redis-server --cluster-enabled yes, then redis-cli --cluster create ... --cluster-yes), plus the
operations the cluster tests need: wait until every node agrees the cluster is ok, reshard slots
with redis-cli --cluster reshard, kill a master and wait until its replica has taken over.

    c = cluster.RedisCluster(tmpdir, masters=3, replicas=1).start()
    ...
    c.stop()      # every node, whatever happened

Each node logs to a file in tmpdir; every wait is bounded.
"""

import subprocess
import time

from . import procs

CREATE_BOUND_S = 60.0


class RedisCluster:
    def __init__(self, tmpdir, masters=3, replicas=1, node_timeout_ms=1000, extra=()):
        self.tmpdir = tmpdir
        self.masters_wanted = masters
        self.replicas = replicas
        self.nodes = []
        self.extra = ["--cluster-node-timeout", str(node_timeout_ms)] + list(extra)

    def start(self):
        try:
            for _ in range(self.masters_wanted * (1 + self.replicas)):
                self.nodes.append(procs.Redis(self.tmpdir, self.extra, cluster=True).start())
            addrs = ["127.0.0.1:%d" % n.port for n in self.nodes]
            out = subprocess.run(
                ["redis-cli", "--cluster", "create"] + addrs +
                ["--cluster-replicas", str(self.replicas), "--cluster-yes"],
                capture_output=True, text=True, timeout=CREATE_BOUND_S)
            if out.returncode != 0:
                raise RuntimeError("redis-cli --cluster create failed:\n" + out.stdout + out.stderr)
            self.wait_ok()
            self.wait_replicas_synced()
        except Exception:
            self.stop()
            raise
        return self

    def stop(self):
        for n in self.nodes:
            n.kill9()

    def node(self, port):
        for n in self.nodes:
            if n.port == port:
                return n
        return None

    def seeds(self):
        """The redis:// URLs of every node, for a pool's `cluster = [...]`."""
        return ["redis://127.0.0.1:%d" % n.port for n in self.nodes]

    def alive(self):
        return [n for n in self.nodes if n.alive()]

    def cli(self, port, *args, timeout=10):
        out = subprocess.run(["redis-cli", "-p", str(port)] + [str(a) for a in args],
                             capture_output=True, text=True, timeout=timeout)
        return out.stdout.strip()

    def info_field(self, port, section, field):
        for line in self.cli(port, "INFO", section).splitlines():
            if line.startswith(field + ":"):
                return line.split(":", 1)[1].strip()
        return None

    def masters(self):
        """Ports of the live masters that serve slots (their own CLUSTER NODES line lists ranges)."""
        out = []
        for n in self.alive():
            if self.info_field(n.port, "replication", "role") == "master":
                myself = [line for line in self.cli(n.port, "CLUSTER", "NODES").splitlines()
                          if "myself" in line]
                if myself and len(myself[0].split()) > 8:  # serves at least one slot range
                    out.append(n.port)
        return sorted(out)

    def slot_owner(self, slot):
        """Port of the master serving `slot`, as a live node sees it."""
        import redis
        for n in self.alive():
            try:
                for start, end, master, *_ in redis.Redis(port=n.port).execute_command(
                        "CLUSTER", "SLOTS"):
                    if start <= slot <= end:
                        return int(master[1])
            except redis.RedisError:
                continue
        return None

    def slot_views(self):
        """Each live node's map of the slots, as (start, end, master port) ranges (CLUSTER SLOTS);
        None for a node that did not answer."""
        import redis
        views = {}
        for n in self.alive():
            try:
                views[n.port] = tuple(sorted(
                    (start, end, int(master[1])) for start, end, master, *_ in
                    redis.Redis(port=n.port, socket_timeout=5).execute_command("CLUSTER", "SLOTS")))
            except redis.RedisError:
                views[n.port] = None
        return views

    def wait_slots_agree(self, bump=None, bound=30.0, ok=False):
        """Until every live node, replicas included, maps every slot to the same master (and,
        with `ok`, says cluster_state:ok).

        A replica learns the slots its master took in a resharding from its master's pings, and
        can miss the last ones: seen once in 24 runs, the target's replica kept 0-1498 of the
        0-1499 its master served; failed over, it then saw slot 1499 unserved, put itself in
        cluster_state:fail and answered every command CLUSTERDOWN. A cluster in that state
        cannot be failed over cleanly, whatever its clients do. When the views still differ
        after 5 s, the master on port `bump` (the resharding's target) gets CLUSTER BUMPEPOCH:
        its claims then carry the greatest epoch and win on every node. Returns whether that
        was needed."""
        deadline = time.monotonic() + bound
        bump_at = time.monotonic() + 5.0
        bumped = False
        while time.monotonic() < deadline:
            views = self.slot_views()
            if None not in views.values() and len(set(views.values())) == 1 and (
                    not ok or all(self.info_field_cluster(p) == "ok" for p in views)):
                return bumped
            if bump is not None and not bumped and time.monotonic() >= bump_at:
                self.cli(bump, "CLUSTER", "BUMPEPOCH")
                bumped = True
            time.sleep(0.2)
        raise RuntimeError("the nodes do not agree about the slots%s within %.0f s: %s"
                           % (" or are not all ok" if ok else "", bound,
                              self.describe()))

    def describe(self):
        """Each live node's role, cluster_state and slot view, one line each."""
        views = self.slot_views()
        return "; ".join("%d %s %s %s" % (p, self.info_field(p, "replication", "role"),
                                           self.info_field_cluster(p), v)
                         for p, v in views.items())

    def first_slot(self, port):
        """The lowest slot the master on `port` serves."""
        import redis
        for start, _end, master, *_ in redis.Redis(port=port).execute_command("CLUSTER", "SLOTS"):
            if int(master[1]) == port:
                return start
        return None

    def wait_ok(self, bound=CREATE_BOUND_S):
        """Until every live node says cluster_state:ok and they agree on the epoch config."""
        deadline = time.monotonic() + bound
        while time.monotonic() < deadline:
            states = [self.info_field_cluster(n.port) for n in self.alive()]
            if states and all(s == "ok" for s in states):
                out = subprocess.run(
                    ["redis-cli", "--cluster", "check", "127.0.0.1:%d" % self.alive()[0].port],
                    capture_output=True, text=True, timeout=30)
                if out.returncode == 0 and "[OK] All 16384 slots covered" in out.stdout:
                    return
            time.sleep(0.2)
        raise RuntimeError("the cluster did not become ok within %.0f s" % bound)

    def info_field_cluster(self, port):
        for line in self.cli(port, "CLUSTER", "INFO").splitlines():
            if line.startswith("cluster_state:"):
                return line.split(":", 1)[1].strip()
        return None

    def wait_replicas_synced(self, bound=30.0):
        deadline = time.monotonic() + bound
        while time.monotonic() < deadline:
            links = [self.info_field(n.port, "replication", "master_link_status")
                     for n in self.alive()
                     if self.info_field(n.port, "replication", "role") == "slave"]
            if len(links) == self.masters_wanted * self.replicas and all(
                    s == "up" for s in links):
                return
            time.sleep(0.2)
        raise RuntimeError("replicas did not sync within %.0f s" % bound)

    def reshard(self, from_port, to_port, slots, timeout=120):
        """Moves `slots` slots from one master to another with redis-cli --cluster reshard."""
        ids = {}
        for line in self.cli(from_port, "CLUSTER", "NODES").splitlines():
            f = line.split()
            ids[int(f[1].split(":")[1].split("@")[0])] = f[0]
        return subprocess.run(
            ["redis-cli", "--cluster", "reshard", "127.0.0.1:%d" % from_port,
             "--cluster-from", ids[from_port], "--cluster-to", ids[to_port],
             "--cluster-slots", str(slots), "--cluster-yes", "--cluster-pipeline", "20"],
            capture_output=True, text=True, timeout=timeout)

    def kill_master(self, port, bound=30.0):
        """SIGKILLs the master on `port`; returns the port of the replica that took over, once it
        serves the slots and every node agrees and is ok (cluster-node-timeout plus the
        election)."""
        victim = self.node(port)
        slot = self.first_slot(port)
        victim.kill9()
        deadline = time.monotonic() + bound
        while time.monotonic() < deadline:
            owner = self.slot_owner(slot)
            states = [self.info_field_cluster(n.port) for n in self.alive()]
            if owner not in (None, port) and states and all(s == "ok" for s in states):
                self.wait_slots_agree(bump=owner, ok=True,
                                      bound=max(1.0, deadline - time.monotonic()))
                return owner
            time.sleep(0.2)
        raise RuntimeError("no replica took over from %d within %.0f s" % (port, bound))
