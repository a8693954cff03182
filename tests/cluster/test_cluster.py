#!/usr/bin/python3
"""deferq on a real Redis Cluster (issue 12 item 1, docs/operations.md), against the real binary.

    /usr/bin/python3 tests/cluster/test_cluster.py /path/to/deferq [-v] [-k NAME]

One 3-master, 3-replica cluster (redis-server --cluster-enabled yes, redis-cli --cluster create
--cluster-replicas 1) on loopback serves the whole suite; two deferq instances use it as their
pool `default` (`cluster = [...]` with every node as a seed, `wait_replicas = 1`), each with its
metrics endpoint on a free port. 200 queues q000..q199 span all three
masters. The tests run in the order written; the failover test comes last because it changes
the cluster.

test_1_traffic_across_masters_while_resharding
    Publishers on both instances PUBLISH rounds of one job to each of the 200 queues and 40 jobs
    to one 8-shard queue (config [shards.default]; its name is picked so that its shards lie on
    all three masters and some in the slots that move) (at least 6 rounds, and on until the
    resharding is over; a third of the jobs delayed by 200-700 ms, so the per-slot due index and
    the pump work), while consumers on both instances CONSUME (TTR 60, COUNT 20, blocking; the
    sharded queue last in each one's list) and ACK. Meanwhile 1500 slots move from one master to
    another with redis-cli --cluster reshard. Clients must never see an error (no
    MOVED, ASK, TRYAGAIN, CROSSSLOT); every published job is delivered exactly once (the TTR is
    longer than the test, so a second delivery would be a job handed to two consumers while
    leased) with its payload; every ACK counts 1; QUEUES lists exactly the queues still holding
    jobs; and queues really moved (their slots are served by the other master afterwards), shards
    of the sharded queue among them; QSTAT of the sharded queue sums its 8 shards on both
    instances.

test_2_queues_and_lease_expiry_across_nodes
    QUEUES on a cluster gathers every master's per-slot registry; a lease that runs out (TTR 1)
    on a queue of each master is delivered again by the pump owner, which finds it through the
    per-slot due indexes.

test_2b_job_metrics_of_queues_on_every_master_are_exact
    Known traffic through both instances on queues of every master (5 published, 3 consumed,
    2 acked each) and on the 8-shard queue (24 published, consumed and acked): the per-queue job
    series of both /metrics endpoints, summed as Prometheus's sum() would, equal the truth within
    10 s (published, acked, ready and leased per queue and summed; the sharded queue as one
    series per shard, `queue="hot#3"`, adding up to its QSTAT); exactly one instance exports
    them, with figures under 5 s old. On a cluster the poller reads them with one qstats call per
    slot (a call across slots is refused).

test_3_pumping_of_a_sharded_queue_is_shared_per_shard
    Pump ownership is per shard (docs/operations.md "Sharded queues"): both instances own some of
    the 8 shards (INFO stats pump_shards, summing to 8), each shard the one the roster in Redis
    names. Leases (TTR 1) taken through instance 0 on every shard end and come back on time, and
    jobs NACKed through instance 0 with DELAY 1 come back on time, each moved by its shard's owner
    (its lateness is recorded there and nowhere else), whichever instance owns the pool's pump.
    Then the instance that owns the pool's pump is SIGKILLed with delayed jobs it published and
    leases it handed out on every shard: the other owns all 8 shards within 2.5 s, delivers every
    one of those jobs (those on its own shards on time, through its own due index reads), and
    once the killed one is started again the shards are split again.

test_4_failover_loses_no_acknowledged_publish
    Both instances run with wait_replicas = 1. Publishers send rounds over the 200 queues while
    a master is SIGKILLed (the one that took no part in test_1's resharding: a Redis 7.0 replica
    learns the slots its master imported only from its master's pings, and one failed over with
    a slot missing from its view left that slot unserved, the cluster down, in a CI run), its
    replica takes over, and the killed node is started again (it rejoins as the new master's
    replica); the test goes on once every node agrees about the slots and says ok. Clients may
    see -TRYAGAIN (not applied), -TIMEOUT (may have been applied) and -NOREPLICAS (applied, not
    replicated: the promoted master has no replica until the old one rejoins), never a
    redirection; they send the job again. Every job whose PUBLISH returned an id, before, during
    or after the failover, must be delivered, and the failed-over queues take acknowledged
    publishes again.

Prints its numbers, ends with "N passed, M failed" and exits non-zero on any failure. Needs
redis-py (Debian's python3-redis), hence /usr/bin/python3.
"""

import collections
import itertools
import os
import sys
import threading
import time
import unittest

import redis
from redis.crc import key_slot

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))

from dqtest import cluster, ids, procs, promtext, runner  # noqa: E402

DEFERQ = None  # path of the deferq binary, from argv[1]
QUEUES = ["q%03d" % i for i in range(200)]
PER_QUEUE = 6
TTR = 60
HOT_SHARDS = 8
HOT_PER_ROUND = 40  # PUBLISHes to the sharded queue in each round over the 200 queues
RESHARD_SLOTS = 1500
# A killed instance's shards are taken over when its roster membership ends (2 s after its last
# renewal, src/queue/delivery/pump.h kPumpLeaseMs) at the survivor's next renewal (every 500 ms).
SHARD_TAKEOVER_S = 2.5
ON_TIME_MS = 100  # lease ends and delayed jobs come back this soon after their due time


def slot_of(queue):
    return key_slot(("dq:{default/%s}:" % queue).encode())


def shard_slots(queue):
    """The slots of a sharded queue's shards: shard 0 is the queue, shard i "queue#i"."""
    return [slot_of(queue if i == 0 else "%s#%d" % (queue, i)) for i in range(HOT_SHARDS)]


def shard_name(queue, i):
    return queue if i == 0 else "%s#%d" % (queue, i)


def shard_of_generated(job_id):
    return ids.shard_of_generated(job_id, HOT_SHARDS)


def fnv1a(data):
    h = 2166136261
    for b in data:
        h = ((h ^ b) * 16777619) & 0xFFFFFFFF
    return h


def shard_owners(queue, members):
    """The owner of each shard: the member at (FNV-1a(tag) + i) mod n of the sorted roster
    (src/queue/delivery/shard_pump.h ShardOwnerIndex)."""
    rot = fnv1a(("default/" + queue).encode())
    return [members[(rot + i) % len(members)] for i in range(HOT_SHARDS)]


def pick_hot_queue(cluster_):
    """A name for the 8-shard queue whose shards lie on every master, some of them in the slots
    test_1 moves (the lowest RESHARD_SLOTS of q000's master), so the reshard moves shards too."""
    owner = {}
    for start, end, master, *_ in redis.Redis(port=cluster_.masters()[0]).execute_command(
            "CLUSTER", "SLOTS"):
        for slot in range(start, end + 1):
            owner[slot] = int(master[1])
    src = owner[slot_of("q000")]
    moving = set(sorted(s for s, p in owner.items() if p == src)[:RESHARD_SLOTS])
    for k in itertools.count():
        name = "hot%d" % k
        slots = shard_slots(name)
        if len({owner[s] for s in slots}) == 3 and any(s in moving for s in slots):
            return name


class Env:
    """The cluster and the two deferq instances shared by the suite."""

    dir = None
    cluster = None
    hot = None  # the 8-shard queue (pick_hot_queue)
    resharded = ()  # the masters test_1's resharding moved slots between
    instances = []
    metrics_ports = []  # each instance's metrics endpoint (test_2b)

    @classmethod
    def start(cls):
        cls.dir = procs.make_tmpdir("cluster")
        cls.cluster = cluster.RedisCluster(cls.dir, masters=3, replicas=1).start()
        cls.hot = pick_hot_queue(cls.cluster)
        seeds = ", ".join('"%s"' % s for s in cls.cluster.seeds())
        config = ('[pools.default]\ncluster = [%s]\n'
                  'timeout_ms = 2000\nwait_replicas = 1\nwait_timeout_ms = 500\n'
                  '[shards.default]\n%s = %d\n' % (seeds, cls.hot, HOT_SHARDS))
        for i in range(2):
            cls.instances.append(
                procs.Deferq(DEFERQ, cls.dir, None, config_text=cls.metrics_server() + config,
                             threads=2).start())

    @classmethod
    def metrics_server(cls):
        """A [server] section with the metrics endpoint on a free port of its own."""
        port = procs.free_port()
        while port in cls.metrics_ports:
            port = procs.free_port()
        cls.metrics_ports.append(port)
        return '[server]\nmetrics_listen = "127.0.0.1:%d"\n' % port

    @classmethod
    def stop(cls):
        for d in cls.instances:
            d.stop()
        if cls.cluster:
            cls.cluster.stop()
        procs.remove_tmpdir(cls.dir)

    @classmethod
    def client(cls, i, timeout=10):
        return redis.Redis(host="127.0.0.1", port=cls.instances[i].port, socket_timeout=timeout)

    @classmethod
    def diagnose(cls, reasons=None):
        """What a failed failover test needs to be understood from CI's output alone: each
        instance's log tail and pool state, then the cluster as each node sees it and the most
        common tolerated errors, last, since CI shows the end of the output."""
        print("\n--- diagnostics")
        for i, d in enumerate(cls.instances):
            print("  instance %d log:\n    %s" % (i, d.log_tail(25).replace("\n", "\n    ")))
            try:
                pools = cls.client(i, timeout=2).info("pools")
                print("  instance %d INFO pools: %s" % (i, pools))
            except Exception as e:  # noqa: BLE001 -- diagnostics only
                print("  instance %d INFO pools: %r" % (i, e))
        for n in cls.cluster.alive():
            print("  node %d, CLUSTER NODES:" % n.port)
            for line in cls.cluster.cli(n.port, "CLUSTER", "NODES").splitlines():
                print("    " + " ".join(line.split()[1:3] + line.split()[7:]))
        print("  roles, states, slot views: %s" % cls.cluster.describe())
        for reason, n in (reasons or collections.Counter()).most_common(4):
            print("  %5d x %s" % (n, reason))

    @classmethod
    def pumped_shards(cls, i):
        return int(cls.client(i).info("stats")["pump_shards"])

    @classmethod
    def run_id(cls, i):
        v = cls.client(i).info("server")["run_id"]  # 32 hex digits; redis-py makes digits an int
        return v if isinstance(v, str) else str(v).zfill(32)

    @classmethod
    def lateness_counts(cls, i, queue):
        """Delayed jobs each shard of `queue` had made ready by instance i (INFO queues)."""
        info = cls.client(i).info("queues")
        return [info.get("queue_default/" + shard_name(queue, k), {}).get("lateness_count", 0)
                for k in range(HOT_SHARDS)]


def setUpModule():
    Env.start()


def tearDownModule():
    Env.stop()


class Traffic:
    """Publishers and consumers on both instances; records every reply."""

    def __init__(self, queues, per_queue, delayed_every=3, tolerate=()):
        self.queues = queues
        self.per_queue = per_queue
        self.delayed_every = delayed_every
        self.tolerate = tolerate  # error prefixes a publisher may see and retry
        self.lock = threading.Lock()
        self.published = {}  # id -> (queue, payload)
        self.delivered = collections.Counter()
        self.payload_mismatch = []
        self.errors = []
        self.tolerated = collections.Counter()
        self.reasons = collections.Counter()  # the whole text of each tolerated error
        self.acked = 0
        self.publishing_done = threading.Event()
        self.keep_going = threading.Event()
        self.stop = threading.Event()
        self.abandon = threading.Event()  # a failing test: publishers return at once

    def call(self, c, what, *args):
        """One command; errors in `tolerate` (not applied, or may have been) are counted and the
        command sent again (at most 60 times, 0.1 s apart); any other error is recorded. Returns
        (ok, reply)."""
        for _attempt in range(60):
            if self.abandon.is_set():
                return False, None
            try:
                return True, c.execute_command(*args)
            except redis.ResponseError as e:
                if str(e).startswith(self.tolerate):
                    with self.lock:
                        self.tolerated[str(e).split()[0]] += 1
                        self.reasons[str(e)[:160]] += 1
                    time.sleep(0.1)
                    continue
                with self.lock:
                    self.errors.append("%s: %s" % (what, e))
                return False, None
            except (redis.ConnectionError, redis.TimeoutError) as e:
                with self.lock:
                    self.errors.append("%s: %r" % (what, e))
                return False, None
        return False, None

    def publisher(self, instance, part, parts):
        c = Env.client(instance)
        n = 0
        # Rounds over the queues: at least per_queue, and on while `keep_going` is set (the
        # traffic then spans the whole resharding).
        for k in itertools.count():
            if k >= self.per_queue and not self.keep_going.is_set():
                break
            for q in self.queues[part::parts]:
                if self.abandon.is_set():
                    return
                payload = ("%s/%d/%d" % (q, instance, k)).encode()
                args = ["PUBLISH", q, payload]
                if self.delayed_every and n % self.delayed_every == 0:
                    args += ["PDELAY", str(200 + (n * 37) % 500)]
                n += 1
                ok, job_id = self.call(c, "PUBLISH " + q, *args)
                if ok:
                    with self.lock:
                        self.published[job_id] = (q, payload)
                else:
                    c = Env.client(instance)

    def consumer(self, instance, part, parts):
        c = Env.client(instance)
        mine = list(dict.fromkeys(self.queues[part::parts]))  # a queue may be listed many times
        idle_after_done = 0
        while not self.stop.is_set():
            ok, jobs = self.call(c, "CONSUME", "CONSUME", *mine, "TTR", TTR, "TIMEOUT", "0.5",
                                 "COUNT", 20)
            if not ok:
                c = Env.client(instance)
                time.sleep(0.1)
                continue
            if not jobs:
                if self.publishing_done.is_set():
                    idle_after_done += 1
                    if idle_after_done >= 4:
                        return
                continue
            idle_after_done = 0
            by_queue = collections.defaultdict(list)
            with self.lock:
                for job in jobs:
                    q, job_id, payload = job[0].decode(), job[1], job[2]
                    self.delivered[job_id] += 1
                    want = self.published.get(job_id)
                    if want is not None and want[1] != payload:
                        self.payload_mismatch.append(job_id)
                    by_queue[q].append(job_id)
            for q, ids in by_queue.items():
                ok, n = self.call(c, "ACK " + q, "ACK", q, *ids)
                if ok:
                    with self.lock:
                        self.acked += n

    def run(self, during=None, publishers_per_instance=2, consumers_per_instance=3,
            bound_s=90):
        pubs = [threading.Thread(target=self.publisher, args=(i, p, 2 * publishers_per_instance))
                for i in range(2) for p in
                range(i * publishers_per_instance, (i + 1) * publishers_per_instance)]
        cons = [threading.Thread(target=self.consumer, args=(i, p, 2 * consumers_per_instance))
                for i in range(2) for p in
                range(i * consumers_per_instance, (i + 1) * consumers_per_instance)]
        for t in cons + pubs:
            t.start()
        if during:
            self.keep_going.set()
            during()
            self.keep_going.clear()
        deadline = time.monotonic() + bound_s
        for t in pubs:
            t.join(max(0.1, deadline - time.monotonic()))
        self.publishing_done.set()
        # Consumers return after 2 s without jobs once publishing is over.
        for t in cons:
            t.join(max(0.1, deadline - time.monotonic()))
        self.stop.set()
        for t in cons + pubs:
            t.join(10)

    def lost(self):
        return [i for i in self.published if self.delivered[i] == 0]

    def twice(self):
        return [i for i, n in self.delivered.items() if n > 1]


def job_metrics_qstat(client, queue):
    """QSTAT as a dict (a sharded queue's: its shards summed)."""
    return dict(zip(*[iter(client.execute_command("QSTAT", queue))] * 2))


def job_metrics_scrape(names, hot):
    """Both instances' /metrics summed (what Prometheus's sum() gives): the samples, {queue:
    (published, acked, ready, leased)} for `names` and for `hot` (its shard series added up),
    and the queue labels of hot's series."""
    scrapes = []
    for port in Env.metrics_ports:
        status, _, body = promtext.get(port, "/metrics")
        assert status == 200, status
        scrapes.append(promtext.parse(body.decode()))
    total = promtext.summed(scrapes)
    wanted = ("deferq_jobs_published_total", "deferq_jobs_acked_total",
              ("deferq_queue_jobs", "ready"), ("deferq_queue_jobs", "leased"))
    figures = {q: [0, 0, 0, 0] for q in names + [hot]}
    hot_series = set()
    for (name, labels), v in total.items():
        labels = dict(labels)
        if labels.get("namespace") != "default" or "queue" not in labels:
            continue
        queue = labels["queue"]
        if queue == hot or queue.startswith(hot + "#"):
            hot_series.add(queue)
            queue = hot
        if queue not in figures:
            continue
        key = (name, labels["state"]) if "state" in labels else name
        if key in wanted:
            figures[queue][wanted.index(key)] += int(v)
    return total, {q: tuple(f) for q, f in figures.items()}, hot_series


class ClusterTest(unittest.TestCase):
    def setUp(self):
        # A test that failed after killing an instance leaves it to the next one to start: its
        # own failure, not a cascade.
        for d in Env.instances:
            if not d.alive():
                d.start()

    def test_1_traffic_across_masters_while_resharding(self):
        masters = Env.cluster.masters()
        self.assertEqual(len(masters), 3)
        owners = {q: Env.cluster.slot_owner(slot_of(q)) for q in QUEUES}
        self.assertEqual(set(owners.values()), set(masters), "200 queues span every master")
        hot = Env.hot
        hot_owners = [Env.cluster.slot_owner(s) for s in shard_slots(hot)]
        self.assertEqual(set(hot_owners), set(masters), "the 8 shards lie on every master")
        # The master of q000 gives 1500 slots (its lowest) to the next master.
        src = owners["q000"]
        dst = [m for m in masters if m != src][0]
        Env.resharded = (src, dst)
        reshard = {}

        def during():
            time.sleep(0.5)
            t0 = time.monotonic()
            reshard["out"] = Env.cluster.reshard(src, dst, 1500)
            reshard["s"] = time.monotonic() - t0

        # The sharded queue is published to HOT_PER_ROUND times per round, by every publisher,
        # and consumed (last in priority) by every consumer of both instances.
        traffic = Traffic(QUEUES + [hot] * HOT_PER_ROUND, PER_QUEUE)
        traffic.run(during=during)
        out = reshard["out"]
        self.assertEqual(out.returncode, 0, out.stdout[-2000:] + out.stderr[-2000:])
        Env.cluster.wait_ok()
        # Before any failover: the target's replica must know every slot its master took.
        if Env.cluster.wait_slots_agree(bump=dst):
            print("\n  (the nodes disagreed about the slots 5 s after the resharding: the "
                  "target's epoch was bumped)")
        moved = [q for q in QUEUES if owners[q] == src and
                 Env.cluster.slot_owner(slot_of(q)) == dst]
        print("\n  reshard of 1500 slots took %.1f s; %d of the 200 queues moved; %d jobs "
              "published, %d delivered, %d acked; errors: %d"
              % (reshard["s"], len(moved), len(traffic.published), sum(traffic.delivered.values()),
                 traffic.acked, len(traffic.errors)))
        self.assertGreater(len(moved), 0, "some queues changed master")
        hot_moved = [i for i, s in enumerate(shard_slots(hot))
                     if hot_owners[i] == src and Env.cluster.slot_owner(s) == dst]
        hot_jobs = sum(1 for q, _ in traffic.published.values() if q == hot)
        print("  8-shard queue %s: %d jobs; shards %s moved" % (hot, hot_jobs, hot_moved))
        self.assertGreater(len(hot_moved), 0, "shards of %s changed master" % hot)
        self.assertEqual(traffic.errors, [], "clients never see MOVED/ASK/TRYAGAIN")
        self.assertGreaterEqual(len(traffic.published), len(QUEUES) * PER_QUEUE)
        self.assertEqual(traffic.lost(), [], "every published job is delivered")
        self.assertEqual(traffic.twice(), [], "no job is handed to two consumers while leased")
        self.assertEqual(traffic.payload_mismatch, [])
        self.assertEqual(traffic.acked, len(traffic.published), "every ACK counts 1")
        # Nothing is left: every queue is gone from the registry (QUEUES gathers every slot).
        self.assertEqual(Env.client(0).execute_command("QUEUES"), [])
        per_queue = collections.Counter(q for q, _ in traffic.published.values())
        self.assertGreaterEqual(per_queue[hot], HOT_PER_ROUND * PER_QUEUE)
        for c in (Env.client(0), Env.client(1)):  # both instances sum the 8 shards
            stat = dict(zip(*[iter(c.execute_command("QSTAT", hot))] * 2))
            self.assertEqual((stat[b"published_total"], stat[b"acked_total"], stat[b"ready"]),
                             (per_queue[hot], per_queue[hot], 0))
        for q in moved[:5]:
            stat = dict(zip(*[iter(Env.client(1).execute_command("QSTAT", q))] * 2))
            self.assertEqual(stat[b"published_total"], per_queue[q])
            self.assertEqual(stat[b"acked_total"], per_queue[q])

    def test_2_queues_and_lease_expiry_across_nodes(self):
        masters = Env.cluster.masters()
        picked = {}
        for q in QUEUES:
            picked.setdefault(Env.cluster.slot_owner(slot_of(q)), q)
        self.assertEqual(len(picked), len(masters))
        c0, c1 = Env.client(0), Env.client(1)
        names = sorted(picked.values())
        for q in names:
            c0.execute_command("PUBLISH", "lease-" + q, "x", "TRIES", 2)
        listed = sorted(x.decode() for x in c1.execute_command("QUEUES"))
        self.assertEqual(listed, ["lease-" + q for q in names])
        self.assertEqual(sorted(x.decode() for x in c1.execute_command("QUEUES", "MATCH", "*q0*")),
                         sorted("lease-" + q for q in names if q.startswith("q0")))
        first = {}
        for q in names:
            job = c0.execute_command("CONSUME", "lease-" + q, "TTR", 1)
            self.assertIsNotNone(job)
            first[q] = job[1]
        # The lease ends after 1 s; the pump owner (either instance) finds the lease end in the
        # slot's due index and makes the job ready again; a blocked consumer gets it.
        t0 = time.monotonic()
        for q in names:
            job = c1.execute_command("CONSUME", "lease-" + q, "TIMEOUT", 5)
            self.assertIsNotNone(job, "the expired lease of lease-%s came back" % q)
            self.assertEqual(job[1], first[q])
            self.assertEqual(job[5], 2)  # second delivery
            self.assertEqual(c1.execute_command("ACK", "lease-" + q, job[1]), 1)
        print("\n  leases of %d queues on %d masters came back within %.2f s"
              % (len(names), len(masters), time.monotonic() - t0))
        self.assertEqual(c0.execute_command("QUEUES"), [])
        # A recurring job's failed occurrence, on every master: NACKed through instance 1, it
        # dies as a job of its own (a new id, the reason with it) in the queue's slot, found
        # through instance 0, while the schedule goes on.
        for q in names:
            rq = "every-" + q
            jid = c0.execute_command("PUBLISH", rq, "tick", "EVERY", 3600, "ID", "cron")
            self.assertEqual(c1.execute_command("CONSUME", rq)[1], jid)
            self.assertEqual(c1.execute_command("NACK", rq, jid, "REASON", "down"), 1)
            dead = c0.execute_command("DEADLETTER", "PEEK", rq, "WITHERRORS")
            self.assertEqual(len(dead), 1)
            self.assertNotEqual(dead[0][1], jid)
            self.assertEqual((dead[0][2], dead[0][7]), (b"tick", b"down"))
            info = c0.execute_command("JOB", rq, jid)
            self.assertEqual(dict(zip(info[0::2], info[1::2]))[b"state"], b"delayed")
            self.assertEqual(c0.execute_command("DEADLETTER", "DELETE", rq, "ID", dead[0][1]), 1)
            self.assertEqual(c0.execute_command("CANCEL", rq, jid), 1)
            # A CRON job in a zone (generated id), delivered through instance 1 on the second
            # it is due, rescheduled by its ACK to the next whole second.
            cq = "cron-" + q
            jid = c0.execute_command("PUBLISH", cq, "tick", "CRON", "* * * * * *", "TZ",
                                     "Europe/Paris")
            job = c1.execute_command("CONSUME", cq, "TIMEOUT", 3)
            self.assertEqual(job[1], jid)
            self.assertEqual(c1.execute_command("ACK", cq, jid), 1)
            info = c0.execute_command("JOB", cq, jid)
            info = dict(zip(info[0::2], info[1::2]))
            self.assertEqual((info[b"state"], info[b"tz"], info[b"due_ms"] % 1000),
                             (b"delayed", b"Europe/Paris", 0))
            self.assertEqual(c0.execute_command("CANCEL", cq, jid), 1)
            # A fenced ACK through the other instance: a stale attempt changes nothing.
            fq = "fence-" + q
            jid = c0.execute_command("PUBLISH", fq, "x")
            self.assertEqual(c1.execute_command("CONSUME", fq)[5], 1)
            with self.assertRaisesRegex(redis.ResponseError, "^STALE"):
                c0.execute_command("ACK", fq, jid, "ATTEMPT", 2)
            self.assertEqual(c0.execute_command("ACK", fq, jid, "ATTEMPT", 1), 1)
            # PRIORITY: the later job with a level comes first, through either instance.
            c0.execute_command("PUBLISH", fq, "plain")
            c1.execute_command("PUBLISH", fq, "urgent", "PRIORITY", 7)
            jobs = c1.execute_command("CONSUME", fq, "COUNT", 2)
            self.assertEqual([j[2] for j in jobs], [b"urgent", b"plain"])
            self.assertEqual(c0.execute_command("ACK", fq, jobs[0][1], jobs[1][1]), 2)
            # ID KEEP held across instances after the job finished; a snooze through instance 1
            # spends no try (a job with BACKOFF MAX JITTER, in its long record form).
            kq = "keep-" + q
            self.assertEqual(c0.execute_command("PUBLISH", kq, "a", "ID", "k1", "KEEP", 60,
                                                "BACKOFF", 100, "MAX", 2, "JITTER"), b"k1")
            self.assertEqual(c1.execute_command("CONSUME", kq)[1], b"k1")
            self.assertEqual(c1.execute_command("NACK", kq, "k1", "KEEPTRY"), 1)
            job = c0.execute_command("CONSUME", kq)
            self.assertEqual((job[1], job[3], job[5]), (b"k1", 0, 2), "the try was kept")
            self.assertEqual(c0.execute_command("ACK", kq, "k1"), 1)
            self.assertEqual(c1.execute_command("PUBLISH", kq, "b", "ID", "k1", "KEEP", 60), b"k1")
            self.assertIsNone(c0.execute_command("JOB", kq, "k1"), "held: no second job")
            # CALL through instance 0, answered by a worker on instance 1: the news of the
            # finished job crosses the masters (the job lives in q's slot); then WAITJOB through
            # instance 1 reads the kept result.
            callq = "call-" + q
            got = {}

            def call(callq=callq):
                got[callq] = Env.client(0, timeout=15).execute_command(
                    "CALL", callq, "ask", "ID", "c1", "TIMEOUT", 10)

            t = threading.Thread(target=call, daemon=True)
            t.start()
            job = c1.execute_command("CONSUME", callq, "TIMEOUT", 5)
            self.assertEqual(job[1], b"c1")
            self.assertEqual(c1.execute_command("ACK", callq, "c1", "RESULT", "answer " + q), 1)
            t.join(10)
            self.assertEqual(got.get(callq), ("answer " + q).encode())
            self.assertEqual(c1.execute_command("WAITJOB", callq, "c1", "TIMEOUT", 5),
                             ("answer " + q).encode())

    def test_2b_job_metrics_of_queues_on_every_master_are_exact(self):
        masters = Env.cluster.masters()
        # Queues until every master serves at least four of them.
        names, per_master = [], collections.Counter()
        for i in itertools.count():
            if len(per_master) == len(masters) and min(per_master.values()) >= 4:
                break
            names.append("jm%03d" % i)
            per_master[Env.cluster.slot_owner(slot_of(names[-1]))] += 1
        self.assertEqual(set(per_master), set(masters))
        c = [Env.client(0), Env.client(1)]
        for q in names:
            self.addCleanup(c[0].execute_command, "PURGE", q)
        hot = Env.hot
        hot_before = job_metrics_qstat(c[0], hot)
        # Each queue: 5 published through both instances, 3 consumed (TTR 60: still leased at
        # the end), 2 of them acked; so 2 ready and 1 leased.
        for q in names:
            for i in range(5):
                c[i % 2].execute_command("PUBLISH", q, "m%d" % i)
            jobs = c[1].execute_command("CONSUME", q, "TTR", TTR, "COUNT", 3)
            self.assertEqual(len(jobs), 3)
            self.assertEqual(c[0].execute_command("ACK", q, jobs[0][1], jobs[1][1]), 2)
        # The sharded queue: 24 published, consumed and acked, over its shards.
        for i in range(24):
            c[i % 2].execute_command("PUBLISH", hot, "h%d" % i)
        got, deadline = 0, time.monotonic() + 10
        while got < 24 and time.monotonic() < deadline:
            jobs = c[got % 2].execute_command("CONSUME", hot, "TTR", TTR, "COUNT", 24 - got,
                                              "TIMEOUT", 1) or []
            if jobs:
                self.assertEqual(c[1].execute_command("ACK", hot, *[j[1] for j in jobs]),
                                 len(jobs))
            got += len(jobs)
        self.assertEqual(got, 24)
        t_done = time.monotonic()
        truth = {q: (5, 2, 2, 1) for q in names}  # published, acked, ready, leased
        truth[hot] = (hot_before[b"published_total"] + 24, hot_before[b"acked_total"] + 24,
                      hot_before[b"ready"], hot_before[b"leased"])
        # The figures are read every 2 s; on a loaded machine allow a few reads.
        while True:
            total, figures, hot_series = job_metrics_scrape(names, hot)
            if figures == truth or time.monotonic() - t_done > 10:
                break
            time.sleep(0.3)
        waited = time.monotonic() - t_done
        print("\n  job figures of %d queues on %d masters and the %d-shard queue exact on "
              "/metrics %.1f s after the traffic; %d shard series" % (
                  len(names), len(masters), HOT_SHARDS, waited, len(hot_series)))
        self.assertEqual(figures, truth)
        n = len(names)
        self.assertEqual(tuple(sum(figures[q][k] for q in names) for k in range(3)),
                         (5 * n, 2 * n, 2 * n), "summed published, acked, ready")
        # docs/metrics.md: a sharded queue's figures are per shard ("hot#3"), as in INFO queues.
        self.assertGreater(len(hot_series), 1)
        self.assertLessEqual(hot_series, {hot} | {"%s#%d" % (hot, i) for i in range(1, HOT_SHARDS)})
        self.assertEqual(truth[hot][:2], (job_metrics_qstat(c[1], hot)[b"published_total"],
                                          job_metrics_qstat(c[1], hot)[b"acked_total"]))
        # One exporter (the pump owner), its figures fresher than 5 s.
        self.assertEqual(promtext.value(total, "deferq_queue_stats_exporter"), 1)
        ages = [promtext.value(promtext.parse(promtext.get(p, "/metrics")[2].decode()),
                               "deferq_queue_stats_age_seconds") for p in Env.metrics_ports]
        self.assertTrue(all(0 <= a < 5 for a in ages), ages)

    def wait_for_split(self, bound_s=5.0):
        """Both instances own some shards of the hot queue, and they own all 8 between them."""
        deadline = time.monotonic() + bound_s
        while True:
            counts = [Env.pumped_shards(0), Env.pumped_shards(1)]
            if sum(counts) == HOT_SHARDS and min(counts) > 0:
                return counts
            self.assertLess(time.monotonic(), deadline, "shards not split: %s" % counts)
            time.sleep(0.1)

    def take(self, c, queue, n, *args):
        """n jobs of `queue` through c (non-blocking CONSUMEs); returns their ids."""
        got = []
        deadline = time.monotonic() + 5
        while len(got) < n and time.monotonic() < deadline:
            jobs = c.execute_command("CONSUME", queue, "COUNT", n - len(got), *args)
            got += [j[1] for j in jobs or []]
        self.assertEqual(len(got), n)
        return got

    @staticmethod
    def due_ms(c, queue, job_id):
        reply = c.execute_command("JOB", queue, job_id)
        return dict(zip(reply[0::2], reply[1::2]))[b"due_ms"]

    def collect(self, c, queue, due, bound_s, ack=True):
        """Consumes through c (TTR 60) until every job of `due` (id -> due ms) came, ACKing
        them unless told not to; returns id -> lateness in ms (when it came, as this client saw
        it, minus its due time)."""
        late = {}
        deadline = time.monotonic() + bound_s
        while len(late) < len(due) and time.monotonic() < deadline:
            jobs = c.execute_command("CONSUME", queue, "TTR", 60, "TIMEOUT", 0.5, "COUNT", 50)
            now = time.time() * 1000
            for j in jobs or []:
                self.assertIn(j[1], due, "only the jobs of this test are in the queue")
                late[j[1]] = now - due[j[1]]
                if ack:
                    self.assertEqual(c.execute_command("ACK", queue, j[1]), 1)
        self.assertEqual(sorted(set(due) - set(late)), [], "every job came back")
        return late

    def test_3_pumping_of_a_sharded_queue_is_shared_per_shard(self):
        hot = Env.hot
        c0 = Env.client(0)
        counts = self.wait_for_split()
        # Each shard is owned where the roster in Redis (shard 0's slot) says.
        roster = redis.Redis(port=Env.cluster.slot_owner(slot_of(hot)))
        members = sorted(m.decode() for m in roster.smembers("dq:{default/%s}:pumpers" % hot))
        ids = [Env.run_id(0), Env.run_id(1)]
        self.assertEqual(members, sorted(ids))
        owner = [ids.index(m) for m in shard_owners(hot, members)]
        self.assertEqual([owner.count(0), owner.count(1)], counts)
        pool_owner = [int(Env.client(i).info("stats")["pump_owner"]) for i in range(2)]

        # Leases taken through instance 0 on every shard end (TTR 1): each shard's owner finds
        # the lease end through the shard's due index entry and makes the job ready again.
        jobs = [c0.execute_command("PUBLISH", hot, b"s%d" % k, "TRIES", 3)
                for k in range(2 * HOT_SHARDS)]
        self.assertEqual({shard_of_generated(j) for j in jobs}, set(range(HOT_SHARDS)))
        self.assertEqual(sorted(self.take(c0, hot, len(jobs), "TTR", 1)), sorted(jobs))
        due = {j: self.due_ms(c0, hot, j) for j in jobs}
        lease_late = self.collect(c0, hot, due, 5, ack=False)
        # NACKed through instance 0 with DELAY 1, which no instance schedules itself: each
        # shard's owner moves them (and records their lateness), nobody else.
        before = [Env.lateness_counts(i, hot) for i in range(2)]
        for j in jobs:
            self.assertEqual(c0.execute_command("NACK", hot, j, "DELAY", 1, "REASON", "later"), 1)
            # The failure stays with the job in its shard's slot (its attempt: the second).
            info = c0.execute_command("JOB", hot, j)
            info = dict(zip(info[0::2], info[1::2]))
            self.assertEqual((info[b"last_error"], info[b"last_error_attempt"]), (b"later", 2))
        due = {j: self.due_ms(c0, hot, j) for j in jobs}
        nack_late = self.collect(c0, hot, due, 5)
        moved = [[a - b for a, b in zip(Env.lateness_counts(i, hot), before[i])]
                 for i in range(2)]
        per_shard = collections.Counter(shard_of_generated(j) for j in jobs)
        for k in range(HOT_SHARDS):
            self.assertEqual((moved[owner[k]][k], moved[1 - owner[k]][k]), (per_shard[k], 0),
                             "shard %d: moved by its owner, instance %d" % (k, owner[k]))
        print("\n  shards owned %s (pool's pump owner: instance %d); 16 lease ends late by "
              "%.0f ms at most (median %.0f), 16 NACK DELAYs by %.0f ms at most (median %.0f)"
              % (counts, pool_owner.index(1) if 1 in pool_owner else -1,
                 max(lease_late.values()), sorted(lease_late.values())[8],
                 max(nack_late.values()), sorted(nack_late.values())[8]))
        for what, late in (("lease end", lease_late), ("NACK DELAY", nack_late)):
            for j, ms in late.items():
                self.assertGreater(ms, -5, "%s %s came before its due time" % (what, j))
                self.assertLess(ms, ON_TIME_MS, "%s %s on shard %d (owner: instance %d) late"
                                % (what, j, shard_of_generated(j), owner[shard_of_generated(j)]))

        # The pool's pump owner dies with delayed jobs it published and leases it handed out on
        # every shard, which nobody else scheduled. Until the survivor has the pool's lease too,
        # only its own due index reads cover its shards: those jobs come on time. It takes the
        # dead instance's shards over when that one's roster membership ends, and delivers all.
        victim = pool_owner.index(1) if 1 in pool_owner else 1
        survivor = 1 - victim
        cv, cs = Env.client(victim), Env.client(survivor)
        delayed = [cv.execute_command("PUBLISH", hot, b"d%d" % k, "PDELAY", 1000 + 60 * k)
                   for k in range(3 * HOT_SHARDS)]
        leased = [cv.execute_command("PUBLISH", hot, b"l%d" % k, "TRIES", 2)
                  for k in range(HOT_SHARDS)]
        self.assertEqual(sorted(self.take(cv, hot, len(leased), "TTR", 1)), sorted(leased))
        due = {j: self.due_ms(cs, hot, j) for j in delayed + leased}
        killed_ms = time.time() * 1000
        t0 = time.monotonic()
        Env.instances[victim].kill9()
        late = {}
        collector = threading.Thread(
            target=lambda: late.update(self.collect(cs, hot, due, 10)), daemon=True)
        collector.start()
        while Env.pumped_shards(survivor) < HOT_SHARDS:
            self.assertLess(time.monotonic() - t0, SHARD_TAKEOVER_S + 1.0,
                            "the survivor did not take the dead instance's shards over")
            time.sleep(0.05)
        took = time.monotonic() - t0
        collector.join(15)
        self.assertEqual(sorted(set(due) - set(late)), [], "every job is delivered")
        own = [j for j in due if owner[shard_of_generated(j)] == survivor]
        print("  instance %d (the pool's pump owner) killed: instance %d owned all 8 shards "
              "%.2f s later; %d jobs of the dead instance delivered, those on the survivor's "
              "shards late by %.0f ms at most, the others by %.0f ms (due while nobody owned "
              "their shard)" % (victim, survivor, took, len(late), max(late[j] for j in own),
                                max(late[j] for j in due if j not in own)))
        # The bound plus one loop tick (renewals are checked every 100 ms) and the INFO polls.
        self.assertLessEqual(took, SHARD_TAKEOVER_S + 0.4)
        for j in own:
            self.assertLess(late[j], ON_TIME_MS, "job %s on the survivor's shard" % j)
        for j in due:
            self.assertLess(late[j] + due[j], max(due[j], killed_ms + took * 1000) + ON_TIME_MS,
                            "job %s on the dead instance's shard" % j)

        # Started again, the killed instance joins the roster and gets its share back.
        Env.instances[victim].start()
        counts = self.wait_for_split()
        print("  instance %d restarted: shards owned %s" % (victim, counts))

    def test_4_failover_loses_no_acknowledged_publish(self):
        counts = collections.Counter(Env.cluster.slot_owner(slot_of(q)) for q in QUEUES)
        victim = [m for m, _ in counts.most_common() if m not in Env.resharded][0]
        moved_queues = [q for q in QUEUES if Env.cluster.slot_owner(slot_of(q)) == victim]
        # Publishers run before, during and after the failover. With wait_replicas = 1 a PUBLISH
        # returns an id only once the master's replica has it; -TRYAGAIN (not applied),
        # -TIMEOUT (may have been applied) and -NOREPLICAS (applied, not replicated) are not
        # acknowledgements: the publisher counts them and sends the job again.
        tolerate = ("TRYAGAIN", "TIMEOUT", "NOREPLICAS")
        traffic = Traffic(QUEUES, 2, delayed_every=0, tolerate=tolerate)
        traffic.keep_going.set()
        pubs = [threading.Thread(target=traffic.publisher, args=(p % 2, p, 4), daemon=True)
                for p in range(4)]
        for t in pubs:
            t.start()
        try:
            time.sleep(1.0)
            acked_before_kill = len(traffic.published)
            t0 = time.monotonic()
            new_master = Env.cluster.kill_master(victim)
            took = time.monotonic() - t0
            self.assertNotIn(victim, Env.cluster.masters())
            # The promoted replica has no replica of its own until the old master comes back as
            # one: meanwhile its queues' publishes answer -NOREPLICAS. Then they are acknowledged
            # again, once the old master knows it lost its slots (every node agrees, all ok).
            Env.cluster.node(victim).start()
            Env.cluster.wait_replicas_synced()
            if Env.cluster.wait_slots_agree(bump=new_master, ok=True):
                print("\n  (the nodes disagreed about the slots 5 s after the old master came "
                      "back: the new master's epoch was bumped)")
            with traffic.lock:
                after_restart = len(traffic.published)
            time.sleep(1.5)
            traffic.keep_going.clear()
            # A round over the queues is short unless publishes keep failing.
            for t in pubs:
                t.join(max(0.1, t0 + took + 60 - time.monotonic()))
            self.assertFalse(any(t.is_alive() for t in pubs),
                             "publishers still retrying a minute after the failover")
        except (AssertionError, RuntimeError):
            traffic.abandon.set()
            Env.diagnose(traffic.reasons)
            raise
        with traffic.lock:
            late = [i for i, (q, _) in list(traffic.published.items())[after_restart:]
                    if q in moved_queues]
        # Everything acknowledged, before, during and after the failover, is consumed.
        traffic.publishing_done.set()
        traffic.run(publishers_per_instance=0)
        redirections = [e for e in traffic.errors
                        if "MOVED" in e or "ASK" in e or "CROSSSLOT" in e]
        print("\n  failover of %d (%d queues) took %.1f s; %d publishes acknowledged (%d before "
              "the kill, %d on its queues after it rejoined as a replica); tolerated %s; %d "
              "delivered" % (victim, counts[victim], took, len(traffic.published),
                             acked_before_kill, len(late), dict(traffic.tolerated),
                             sum(traffic.delivered.values())))
        try:
            self.assertEqual(redirections, [])
            self.assertEqual(traffic.errors[:5], [])
            self.assertGreater(acked_before_kill, 0)
            self.assertGreater(len(late), 0, "the failed-over master's queues are served again")
            self.assertEqual(traffic.lost(), [], "every acknowledged publish is delivered")
            self.assertEqual(traffic.payload_mismatch, [])
        except AssertionError:
            Env.diagnose(traffic.reasons)
            raise


if __name__ == "__main__":
    sys.exit(runner.main_with_deferq(__name__, sys.argv,
                                     "test_cluster.py /path/to/deferq [unittest options]"))
