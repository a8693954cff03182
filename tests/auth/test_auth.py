#!/usr/bin/python3
"""Namespaces, tokens, the admin connection and several pools (docs/commands.md; issue 10 item 1).

    /usr/bin/python3 tests/auth/test_auth.py /path/to/deferq [unittest args, e.g. -k revoked]

Two redis-servers (pools "default" and "other") and two deferq instances with
auth.required = true and auth.cache_seconds = CACHE_S, all on free loopback ports. The admin
password reaches deferq only through the environment variable the config names. Every test
asserts replies and what Redis holds.
"""

import hashlib
import os
import select
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))

from dqtest import procs, runner  # noqa: E402
from dqtest.resp import Err, Raw, RMap  # noqa: E402

DEFERQ = None  # set by runner.main_with_deferq
CACHE_S = 2
PASSWORD_ENV = "DQ_AUTH_TEST_ADMIN_PASSWORD"
PASSWORD = "adm1n-" + os.urandom(12).hex()  # random per run, so a find is never a coincidence
NOAUTH = "NOAUTH Authentication required."
WRONGPASS = "WRONGPASS invalid username-password pair or user is disabled."

CONFIG = """\
[auth]
required = true
admin_password_env = "%s"
cache_seconds = %d

[pools.other]
addr = "redis://127.0.0.1:%d"
"""


class Env:
    tmp = None
    redis_a = None  # pool "default" (namespace metadata and namespaces created without POOL)
    redis_b = None  # pool "other"
    dq = None       # instance 1
    dq2 = None      # instance 2


def admin(port):
    c = Raw(port)
    assert c.call("AUTH", "admin", PASSWORD) == b"OK"
    return c


def wait_ready(d):
    """Until both pools of instance `d` answer: an admin command on each pool."""
    deadline = time.monotonic() + procs.START_BOUND_S
    last = None
    while time.monotonic() < deadline:
        c = admin(d.port)
        try:
            last = c.call("NAMESPACE", "LIST")
            info = c.call("POOL", "INFO", "other")
            if isinstance(last, list) and isinstance(info, list) and b"up" in info:
                return
        finally:
            c.close()
        time.sleep(0.05)
    raise RuntimeError("deferq on port %d not ready: %r" % (d.port, last))


def start_deferq(name):
    d = procs.Deferq(DEFERQ, Env.tmp, Env.redis_a.port,
                     config_text=CONFIG % (PASSWORD_ENV, CACHE_S, Env.redis_b.port), name=name,
                     wait_pool=False)
    d.start()
    wait_ready(d)
    return d


def setUpModule():
    Env.tmp = procs.make_tmpdir("auth")
    Env.redis_a = procs.Redis(Env.tmp, name="redis-default").start()
    Env.redis_b = procs.Redis(Env.tmp, name="redis-other").start()
    # The only way the password reaches deferq: the environment it inherits.
    os.environ[PASSWORD_ENV] = PASSWORD
    try:
        Env.dq = start_deferq("deferq-1")
        Env.dq2 = start_deferq("deferq-2")
    finally:
        del os.environ[PASSWORD_ENV]


def tearDownModule():
    for p in (Env.dq, Env.dq2, Env.redis_a, Env.redis_b):
        if p is not None:
            p.stop()
    procs.remove_tmpdir(Env.tmp)


_seq = [0]


def fresh(prefix):
    _seq[0] += 1
    return "%s%d-%d" % (prefix, os.getpid() % 1000, _seq[0])


class AuthCase(unittest.TestCase):
    def setUp(self):
        self.conns = []

    def tearDown(self):
        for c in self.conns:
            c.close()

    def raw(self, port=None):
        c = Raw(port or Env.dq.port)
        self.conns.append(c)
        return c

    def admin(self, port=None):
        c = admin(port or Env.dq.port)
        self.conns.append(c)
        return c

    def namespace(self, pool=None):
        """A new namespace (on `pool`) and a token of it."""
        ns = fresh("team")
        a = self.admin()
        args = ["NAMESPACE", "CREATE", ns] + (["POOL", pool] if pool else [])
        self.assertEqual(a.call(*args), b"OK")
        token = a.call("TOKEN", "CREATE", ns, "DESCRIPTION", "test token")
        self.assertIsInstance(token, bytes)
        return ns, token.decode()

    def assertAuthRefusedWithinCache(self, ns, token, port=None):
        """A new connection's AUTH with the token is refused within cache_seconds + 1 s (another
        thread of the instance may have the namespace cached until then)."""
        deadline = time.monotonic() + CACHE_S + 1.0
        while True:
            got = self.raw(port).call("AUTH", ns, token)
            if got == WRONGPASS or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        self.assertEqual(got, WRONGPASS)

    def bound(self, ns, token, port=None):
        c = self.raw(port)
        self.assertEqual(c.call("AUTH", ns, token), b"OK")
        return c


class AuthenticationTests(AuthCase):
    def test_every_job_command_before_auth_answers_noauth(self):
        c = self.raw()
        for cmd in (["PUBLISH", "q", "x"], ["CONSUME", "q"], ["ACK", "q", "a"],
                    ["NACK", "q", "a"], ["TOUCH", "q", "a"], ["CANCEL", "q", "a"],
                    ["JOB", "q", "a"], ["PEEK", "q"], ["QSTAT", "q"], ["QUEUES"], ["PURGE", "q"],
                    ["DEADLETTER", "SIZE", "q"], ["QPAUSE", "q"], ["QRESUME", "q"]):
            self.assertEqual(c.call(*cmd), NOAUTH, cmd)
        self.assertEqual(c.call("PING"), b"PONG")

    def test_wrong_token_unknown_namespace_and_wrong_admin_password_answer_wrongpass(self):
        ns, token = self.namespace()
        c = self.raw()
        self.assertEqual(c.call("AUTH", ns, token + "0"), WRONGPASS)
        self.assertEqual(c.call("AUTH", ns, "x" * len(token)), WRONGPASS)
        self.assertEqual(c.call("AUTH", fresh("nosuch"), token), WRONGPASS)
        self.assertEqual(c.call("AUTH", "admin", PASSWORD + "x"), WRONGPASS)
        self.assertEqual(c.call("HELLO", "3", "AUTH", ns, "nope"), WRONGPASS)
        self.assertEqual(c.call("PUBLISH", "q", "x"), NOAUTH)
        self.assertEqual(c.call("AUTH", "bad/name", token), "ERR invalid namespace name")

    def test_hello_auth_binds_and_answers_resp3(self):
        ns, token = self.namespace()
        c = self.raw()
        hello = c.call("HELLO", "3", "AUTH", ns, token, "SETNAME", "w1")
        self.assertIsInstance(hello, RMap)
        self.assertEqual(hello.as_dict()[b"proto"], 3)
        jid = c.call("PUBLISH", "q", "hello")
        self.assertIsInstance(jid, bytes)
        self.assertEqual(c.call("CLIENT", "GETNAME"), b"w1")

    def test_reset_unbinds_the_connection(self):
        ns, token = self.namespace()
        c = self.bound(ns, token)
        self.assertIsInstance(c.call("PUBLISH", "q", "x"), bytes)
        self.assertEqual(c.call("RESET"), b"RESET")
        self.assertEqual(c.call("PUBLISH", "q", "x"), NOAUTH)
        self.assertEqual(c.call("QSTAT", "q"), NOAUTH)

    def test_tokens_are_stored_only_as_sha256_digests(self):
        ns, token = self.namespace()
        r = Env.redis_a.client()
        stored = r.hgetall("dq:{auth}:tokens:" + ns)
        digest = hashlib.sha256(token.encode()).hexdigest().encode()
        self.assertEqual(list(stored.keys()), [digest])
        self.assertGreaterEqual(len(token), 32)  # >= 128 random bits in hex
        for key in r.keys("dq:{auth}:*"):
            kind = r.type(key)
            blob = repr(r.hgetall(key) if kind == b"hash" else r.dump(key))
            self.assertNotIn(token, blob, key)

    def test_multi_exec_runs_in_the_bound_namespace(self):
        ns, token = self.namespace()
        c = self.bound(ns, token)
        self.assertEqual(c.call("MULTI"), b"OK")
        self.assertEqual(c.call("PUBLISH", "q", "a"), b"QUEUED")
        self.assertEqual(c.call("QSTAT", "q"), b"QUEUED")
        out = c.call("EXEC")
        self.assertIsInstance(out[0], bytes)
        self.assertEqual(out[1][1], 1)  # ready
        self.assertTrue(Env.redis_a.client().exists("dq:{%s/q}:s" % ns))


def info_stats(c):
    text = c.call("INFO", "stats").decode()
    return dict(line.split(":", 1) for line in text.split("\r\n") if ":" in line)


class HardeningTests(AuthCase):
    """Issue 20: before AUTH only AUTH, HELLO, PING, QUIT, RESET; failed AUTHs slowed, counted,
    logged, a repeated wrong token costs no lookup; one-argument AUTH <token>; no AUTH in MULTI;
    unauthenticated connections closed after auth.timeout and kept to a share of max_clients."""

    def test_before_auth_only_auth_hello_ping_quit_and_reset_answer(self):
        c = self.raw()
        for cmd in (["ECHO", "x" * 100], ["COMMAND"], ["COMMAND", "COUNT"], ["INFO"],
                    ["CLIENT", "LIST"], ["SELECT", "0"], ["TIME"], ["MULTI"]):
            self.assertEqual(c.call(*cmd), NOAUTH, cmd)
        self.assertEqual(c.call("PING"), b"PONG")
        self.assertIsInstance(c.call("HELLO", "2"), list)
        self.assertEqual(c.call("RESET"), b"RESET")
        self.assertEqual(c.call("QUIT"), b"OK")

    def test_failed_auths_are_slowed_counted_and_logged(self):
        ns, token = self.namespace()
        adm = self.admin()
        before = int(info_stats(adm)["auth_failures"])
        c = self.raw()
        took = []
        for i in range(4):
            t0 = time.monotonic()
            self.assertEqual(c.call("AUTH", ns, "wrong-%d" % i), WRONGPASS)
            took.append(time.monotonic() - t0)
        # 50, 100, 200, 400 ms (and more when the address failed a lot lately).
        self.assertGreater(took[3], 0.35, took)
        self.assertGreater(took[3], took[0], took)
        # Pipelined guesses wait behind the delayed reply: no faster than one by one.
        t0 = time.monotonic()
        c.send_bytes(b"".join(b"*3\r\n$4\r\nAUTH\r\n$%d\r\n%s\r\n$5\r\nguess\r\n"
                              % (len(ns), ns.encode()) for _ in range(2)))
        self.assertEqual([c.read(), c.read()], [WRONGPASS, WRONGPASS])
        self.assertGreater(time.monotonic() - t0, 0.8 + 1.6 - 0.3)
        self.assertGreaterEqual(int(info_stats(adm)["auth_failures"]), before + 6)
        with open(Env.dq.log, "rb") as f:
            self.assertIn(b"AUTH failed: client id=", f.read())
        # The right token still works on the same connection, at once.
        self.assertEqual(c.call("AUTH", ns, token), b"OK")

    def test_a_wrong_token_sent_again_costs_no_lookup(self):
        ns, token = self.namespace()
        r = Env.redis_a.client()
        r.config_set("slowlog-log-slower-than", 0)
        r.config_set("slowlog-max-len", 100000)
        r.slowlog_reset()
        try:
            for _ in range(4):
                self.assertEqual(self.raw().call("AUTH", ns, "the-same-guess"), WRONGPASS)
            lookups = [e for e in r.slowlog_get(100000)
                       if b"lookup" in e["command"] and ns.encode() in e["command"]]
        finally:
            r.config_set("slowlog-log-slower-than", 10000)
        # The first refusal (from a cache older than the token) is confirmed by one lookup; the
        # same guess again is refused from the cache.
        self.assertLessEqual(len(lookups), 2, [e["command"] for e in lookups])

    def test_one_argument_auth_binds_the_namespace_of_its_token(self):
        ns, token = self.namespace()
        c = self.raw()
        self.assertEqual(c.call("AUTH", token), b"OK")
        self.assertIsInstance(c.call("PUBLISH", "q1", "by token alone"), bytes)
        self.assertTrue(Env.redis_a.client().exists("dq:{%s/q1}:s" % ns))
        # redis://:token@host with a RESP3 client: HELLO 3 AUTH default <token>.
        h = self.raw(Env.dq2.port)
        self.assertIsInstance(h.call("HELLO", "3", "AUTH", "default", token), RMap)
        self.assertEqual(h.call("QSTAT", "q1").as_dict()[b"ready"], 1)
        # Real clients with a password only: redis-cli's REDISCLI_AUTH, redis-py's password=.
        env = dict(os.environ, REDISCLI_AUTH=token)
        out = subprocess.run(["redis-cli", "-p", str(Env.dq.port), "QSTAT", "q1"], env=env,
                             capture_output=True, timeout=10).stdout
        self.assertEqual(out.split(b"\n")[:2], [b"ready", b"1"])
        import redis
        py = redis.Redis(port=Env.dq.port, password=token)
        try:
            self.assertEqual(py.execute_command("QSTAT", "q1")[:2], [b"ready", 1])
        finally:
            py.close()
        # A token of no namespace, and a revoked one, are refused.
        self.assertEqual(self.raw().call("AUTH", "f" * 48), WRONGPASS)
        a = self.admin()
        self.assertEqual(a.call("TOKEN", "REVOKE", ns, token), b"OK")
        deadline = time.monotonic() + CACHE_S + 1.0
        while self.raw().call("AUTH", token) != WRONGPASS:
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.1)

    def test_auth_inside_multi_is_refused_and_dooms_the_transaction(self):
        ns, token = self.namespace()
        c = self.bound(ns, token)
        self.assertEqual(c.call("MULTI"), b"OK")
        self.assertEqual(c.call("AUTH", ns, "guess"), "ERR Command not allowed inside a transaction")
        self.assertEqual(c.call("HELLO", "3", "AUTH", ns, "guess"),
                         "ERR Command not allowed inside a transaction")
        self.assertTrue(c.call("EXEC").startswith("EXECABORT"))

    def test_unauthenticated_connections_are_closed_after_the_deadline_and_kept_to_a_share(self):
        # An instance of its own: auth.timeout = 1, max_clients = 16, one thread (a share of 4).
        d = procs.Deferq(DEFERQ, Env.tmp, Env.redis_a.port,
                         config_text=(CONFIG % (PASSWORD_ENV, CACHE_S, Env.redis_b.port)).replace(
                             "[pools.other]", "timeout = 1\n\n[server]\nmax_clients = 16\n\n"
                             "[pools.other]"),
                         name="deferq-tight", threads=1, wait_pool=False)
        os.environ[PASSWORD_ENV] = PASSWORD
        try:
            d.start()
        finally:
            del os.environ[PASSWORD_ENV]
        try:
            ns, token = self.namespace()
            idle = [Raw(d.port) for _ in range(12)]
            for c in idle:
                c.sock.settimeout(3)
            # Only 4 stay: each new one closed the oldest unauthenticated connection.
            time.sleep(0.3)
            good = Raw(d.port)
            self.assertEqual(good.call("AUTH", ns, token), b"OK")
            self.assertEqual(good.call("PING"), b"PONG")

            def closed(c):
                try:
                    return c.sock.recv(1) == b""
                except (OSError, ConnectionError):
                    return True
            evicted = [closed(c) for c in idle[:8]]
            self.assertEqual(evicted, [True] * 8)
            # The deadline: the rest are closed after about a second; the authenticated one stays.
            t0 = time.monotonic()
            self.assertTrue(closed(idle[-1]))
            self.assertLess(time.monotonic() - t0, 2.5)
            self.assertEqual(good.call("PING"), b"PONG")
            a = admin(d.port)
            stats = info_stats(a)
            self.assertGreaterEqual(int(stats["unauthenticated_evictions"]), 8)
            self.assertGreaterEqual(int(stats["auth_timeout_disconnections"]), 1)
            for c in idle + [good, a]:
                c.close()
        finally:
            d.stop()


class AdminTests(AuthCase):
    def test_admin_commands_answer_noperm_to_a_namespace_connection(self):
        ns, token = self.namespace()
        c = self.bound(ns, token)
        for cmd, name in ((["NAMESPACE", "CREATE", "x"], "namespace|create"),
                          (["NAMESPACE", "LIST"], "namespace|list"),
                          (["TOKEN", "CREATE", ns], "token|create"),
                          (["TOKEN", "LIST", ns], "token|list"),
                          (["POOL", "LIST"], "pool|list")):
            self.assertEqual(c.call(*cmd),
                             "NOPERM this user has no permissions to run the '%s' command" % name)
        # Before AUTH nothing but AUTH, HELLO, PING, QUIT and RESET answers (issue 20).
        unbound = self.raw()
        self.assertEqual(unbound.call("NAMESPACE", "LIST"), "NOAUTH Authentication required.")

    def test_namespace_delete_leaves_nothing_and_a_recreated_namespace_starts_empty(self):
        ns, token = self.namespace()
        c = self.bound(ns, token)
        a = self.admin()
        r = Env.redis_a.client()
        c.call("PUBLISH", "held", "job")                   # a queue holding a job
        jid = c.call("PUBLISH", "done", "job")             # one whose counters are retained
        self.assertEqual(c.call("ACK", "done", c.call("CONSUME", "done")[1]), 1)
        self.assertEqual(c.call("QPAUSE", "paused"), b"OK")  # a paused queue that never had one
        self.assertEqual(c.call("QPAUSE", "held"), b"OK")
        self.assertEqual(a.call("LIMIT", "SET", ns, "PUBLISH", 1000), b"OK")
        self.assertEqual(sorted(c.call("QUEUES")), [b"held", b"paused"])
        self.assertTrue(r.keys("dq:{%s/*" % ns))
        self.assertTrue(a.call("NAMESPACE", "DELETE", ns).startswith("ERR namespace has jobs"))
        self.assertEqual(a.call("NAMESPACE", "DELETE", ns, "FORCE"), b"OK")
        # Nothing of it is left: queues (jobs, counters, pause marks), limits, tokens.
        self.assertEqual(r.keys("dq:{%s/*" % ns), [])
        self.assertEqual(r.keys("dq:limit:{%s}" % ns), [])
        self.assertEqual(r.keys("dq:{auth}:*%s*" % ns), [])
        self.assertNotIn(ns.encode(), r.hvals("dq:{auth}:owners"))
        self.assertFalse([t for t in r.smembers("dq:queues") if t.startswith(ns.encode() + b"/")])
        self.assertFalse([t for t in r.zrange("dq:due", 0, -1) if t.startswith(ns.encode() + b"/")])
        # A team given the name again starts with nothing of the old one.
        self.assertEqual(a.call("NAMESPACE", "CREATE", ns), b"OK")
        token2 = a.call("TOKEN", "CREATE", ns).decode()
        # The old token is gone (an instance trusts what it looked up for cache_seconds).
        self.assertAuthRefusedWithinCache(ns, token)
        d = self.bound(ns, token2)
        self.assertEqual(d.call("QUEUES"), [])
        for q in ("held", "done", "paused"):
            st = d.call("QSTAT", q)
            self.assertEqual(set(st[1::2]), {0}, (q, st))
        self.assertEqual(a.call("LIMIT", "GET", ns), [b"publish", 0, b"consume", 0])
        jid = d.call("PUBLISH", "paused", "first job of the new team")
        self.assertEqual(d.call("CONSUME", "paused")[1], jid)

    def test_namespace_create_list_info_and_duplicates(self):
        a = self.admin()
        ns = fresh("ops")
        self.assertEqual(a.call("NAMESPACE", "CREATE", ns, "POOL", "other", "DESCRIPTION",
                                "the ops team"), b"OK")
        self.assertEqual(a.call("NAMESPACE", "CREATE", ns), "ERR namespace already exists")
        self.assertEqual(a.call("NAMESPACE", "CREATE", "admin"), "ERR invalid namespace name")
        self.assertEqual(a.call("NAMESPACE", "CREATE", fresh("x"), "POOL", "nope"),
                         "ERR no such pool 'nope'")
        self.assertIn(ns.encode(), a.call("NAMESPACE", "LIST"))
        info = dict(zip(*[iter(a.call("NAMESPACE", "INFO", ns))] * 2))
        self.assertEqual(info[b"pool"], b"other")
        self.assertEqual(info[b"description"], b"the ops team")
        self.assertEqual(info[b"tokens"], 0)
        self.assertEqual(info[b"queues"], 0)
        self.assertEqual(a.call("NAMESPACE", "INFO", fresh("none")), "ERR no such namespace")
        self.assertEqual(sorted(a.call("POOL", "LIST")), [b"default", b"other"])
        pool = dict(zip(*[iter(a.call("POOL", "INFO", "other"))] * 2))
        self.assertEqual(pool[b"addr"], b"127.0.0.1:%d" % Env.redis_b.port)
        self.assertEqual(pool[b"state"], b"up")
        self.assertGreaterEqual(pool[b"namespaces"], 1)

    def test_token_list_shows_ids_and_descriptions_never_tokens_and_revoke_by_id(self):
        ns, token = self.namespace()
        a = self.admin()
        listed = a.call("TOKEN", "LIST", ns)
        self.assertEqual(len(listed), 1)
        entry = dict(zip(*[iter(listed[0])] * 2))
        self.assertEqual(entry[b"description"], b"test token")
        self.assertEqual(entry[b"id"], hashlib.sha256(token.encode()).hexdigest()[:16].encode())
        self.assertNotIn(token.encode(), repr(listed).encode())
        self.assertAlmostEqual(entry[b"created_ms"], time.time() * 1000, delta=60000)
        c = self.bound(ns, token)
        self.assertEqual(a.call("TOKEN", "REVOKE", ns, entry[b"id"].decode()), b"OK")
        self.assertEqual(a.call("TOKEN", "REVOKE", ns, token), "ERR no such token")
        self.assertEqual(a.call("TOKEN", "LIST", ns), [])
        self.assertAuthRefusedWithinCache(ns, token)
        del c

    def test_namespace_delete_refused_while_it_has_jobs_unless_force(self):
        ns, token = self.namespace(pool="other")
        c = self.bound(ns, token)
        c.call("PUBLISH", "q1", "x")
        c.call("PUBLISH", "q2", "y", "DELAY", "100")
        a = self.admin()
        err = a.call("NAMESPACE", "DELETE", ns)
        self.assertIsInstance(err, Err)
        self.assertIn("namespace has jobs in 2 queue(s)", err)
        self.assertEqual(a.call("NAMESPACE", "DELETE", ns, "FORCE"), b"OK")
        rb = Env.redis_b.client()
        self.assertEqual(rb.keys("dq:{%s/*" % ns), [])
        self.assertEqual(Env.redis_a.client().keys("dq:{auth}:*:" + ns), [])
        self.assertNotIn(ns.encode(), a.call("NAMESPACE", "LIST"))
        self.assertAuthRefusedWithinCache(ns, token)
        empty, _ = self.namespace()
        self.assertEqual(a.call("NAMESPACE", "DELETE", empty), b"OK")
        self.assertEqual(a.call("NAMESPACE", "DELETE", empty), "ERR no such namespace")

    def test_admin_runs_job_commands_after_namespace_use(self):
        ns, token = self.namespace(pool="other")
        a = self.admin()
        self.assertEqual(a.call("PUBLISH", "q", "x"),
                         "NOPERM an admin connection names its namespace first: "
                         "NAMESPACE USE <namespace>")
        self.assertEqual(a.call("NAMESPACE", "USE", fresh("none")), "ERR no such namespace")
        self.assertEqual(a.call("NAMESPACE", "USE", ns), b"OK")
        jid = a.call("PUBLISH", "q", "from-admin")
        self.assertIsInstance(jid, bytes)
        self.assertTrue(Env.redis_b.client().exists("dq:{%s/q}:s" % ns))
        # The namespace's own connection sees the job; admin commands still work.
        job = self.bound(ns, token).call("CONSUME", "q")
        self.assertEqual(job[1], jid)
        self.assertIn(ns.encode(), a.call("NAMESPACE", "LIST"))


class IsolationTests(AuthCase):
    def test_a_namespace_can_neither_see_nor_touch_another_namespaces_jobs(self):
        ns_a, tok_a = self.namespace()
        ns_b, tok_b = self.namespace()
        a = self.bound(ns_a, tok_a)
        b = self.bound(ns_b, tok_b)
        jid = a.call("PUBLISH", "secret", "payload-a", "ID", "order-1")
        dead = a.call("PUBLISH", "secret-dl", "d", "TRIES", "1")
        self.assertEqual(a.call("CONSUME", "secret-dl", "TTR", "1")[1], dead)
        time.sleep(1.5)  # the lease ends; out of tries, the job goes to the dead letter
        self.assertEqual(a.call("DEADLETTER", "SIZE", "secret-dl"), 1)
        # B knows the queue names and ids, and still sees and touches nothing.
        self.assertIsNone(b.call("CONSUME", "secret", "secret-dl"))
        self.assertEqual(b.call("ACK", "secret", jid), 0)
        self.assertEqual(b.call("CANCEL", "secret", jid), 0)
        self.assertIsNone(b.call("JOB", "secret", jid))
        self.assertEqual(b.call("PEEK", "secret"), [])
        self.assertEqual(b.call("QSTAT", "secret")[1], 0)
        self.assertEqual(b.call("QUEUES"), [])
        self.assertEqual(b.call("DEADLETTER", "SIZE", "secret-dl"), 0)
        self.assertEqual(b.call("DEADLETTER", "PEEK", "secret-dl"), [])
        self.assertEqual(b.call("DEADLETTER", "RESPAWN", "secret-dl"), 0)
        self.assertEqual(b.call("PURGE", "secret"), 0)
        # A's jobs are untouched.
        job = dict(zip(*[iter(a.call("JOB", "secret", jid))] * 2))
        self.assertEqual(job[b"state"], b"ready")
        self.assertEqual(job[b"payload"], b"payload-a")
        self.assertEqual(sorted(a.call("QUEUES")), [b"secret", b"secret-dl"])
        self.assertEqual(a.call("DEADLETTER", "SIZE", "secret-dl"), 1)


def client_ids(listing):
    """The id= of every CLIENT LIST line."""
    return {int(field[3:]) for line in listing.decode().splitlines()
            for field in line.split(" ") if field.startswith("id=")}


def info_queue_keys(text):
    return {line.split(":", 1)[0] for line in text.decode().split("\r\n")
            if line.startswith("queue_")}


class VisibilityTests(AuthCase):
    """INFO queues and CLIENT LIST show a namespace only its own (docs/commands.md); the admin sees all."""

    def test_info_queues_shows_a_namespace_only_its_queues_and_nothing_before_auth(self):
        ns_a, tok_a = self.namespace()
        ns_b, tok_b = self.namespace(pool="other")
        a = self.bound(ns_a, tok_a)
        b = self.bound(ns_b, tok_b)
        a.call("PUBLISH", "secret", "x")
        b.call("PUBLISH", "mine", "y")
        key_a, key_b = "queue_%s/secret" % ns_a, "queue_%s/mine" % ns_b
        # The job figures are read from Redis every 2 s: until the admin sees both queues.
        adm = self.admin()
        deadline = time.monotonic() + 8
        while time.monotonic() < deadline:
            seen = info_queue_keys(adm.call("INFO", "queues"))
            if {key_a, key_b} <= seen:
                break
            time.sleep(0.1)
        self.assertLessEqual({key_a, key_b}, seen)
        for section in ("queues", "everything"):
            self.assertEqual(info_queue_keys(b.call("INFO", section)), {key_b}, section)
            self.assertEqual(info_queue_keys(a.call("INFO", section)), {key_a}, section)
        self.assertEqual(info_queue_keys(b.call("INFO")), {key_b})
        # Before AUTH, INFO answers NOAUTH, as Redis with requirepass does (issue 20: it showed
        # the upstream addresses, the config path and the fleet's job totals).
        unbound = self.raw()
        for args in (["INFO"], ["INFO", "queues"], ["INFO", "everything"]):
            self.assertEqual(unbound.call(*args), "NOAUTH Authentication required.", args)
        # A tenant sees its own job totals, no upstream address and no file of the host.
        text = a.call("INFO", "everything").decode()
        self.assertNotIn("pool_default:", text)
        self.assertNotIn("config_file:", text)
        self.assertNotIn("executable:", text)
        self.assertIn("total_jobs_published:1\r\n", text)
        self.assertIn("pool_default:", adm.call("INFO", "pools").decode())

    def test_client_list_shows_a_namespace_only_its_connections_and_unbound_only_itself(self):
        ns_a, tok_a = self.namespace()
        ns_b, tok_b = self.namespace()
        a1, a2 = self.bound(ns_a, tok_a), self.bound(ns_a, tok_a)
        b = self.bound(ns_b, tok_b)
        unbound = self.raw()
        adm = self.admin()
        for c, name in ((a1, "a-worker"), (b, "b-worker")):
            self.assertEqual(c.call("CLIENT", "SETNAME", name), b"OK")
        # Before AUTH: NOAUTH (issue 20), CLIENT included; HELLO still names the connection.
        self.assertEqual(unbound.call("CLIENT", "SETNAME", "anon"), "NOAUTH Authentication required.")
        self.assertIsInstance(unbound.call("HELLO", "2", "SETNAME", "anon"), list)
        ids = {c: c.call("CLIENT", "ID") for c in (a1, a2, b, adm)}
        listing = a1.call("CLIENT", "LIST")
        self.assertEqual(client_ids(listing), {ids[a1], ids[a2]})
        self.assertNotIn(b"b-worker", listing)
        self.assertNotIn(b"anon", listing)
        self.assertNotIn(b"user=admin", listing)
        for line in listing.decode().splitlines():
            self.assertIn(" user=%s " % ns_a, line + " ")
        self.assertEqual(client_ids(b.call("CLIENT", "LIST")), {ids[b]})
        self.assertEqual(client_ids(b.call("CLIENT", "LIST", "TYPE", "normal")), {ids[b]})
        self.assertEqual(unbound.call("CLIENT", "LIST"), "NOAUTH Authentication required.")
        self.assertLessEqual(set(ids.values()), client_ids(adm.call("CLIENT", "LIST")))
        # Closing another connection stays the admin's.
        self.assertEqual(b.call("CLIENT", "KILL", "ID", str(ids[a1])),
                         "NOPERM this user has no permissions to run the 'client|kill' command")
        self.assertEqual(a1.call("PING"), b"PONG")


class PoolTests(AuthCase):
    def test_jobs_of_namespaces_on_different_pools_land_in_their_redis_server(self):
        ns_d, tok_d = self.namespace()
        ns_o, tok_o = self.namespace(pool="other")
        d = self.bound(ns_d, tok_d)
        o = self.bound(ns_o, tok_o)
        d.call("PUBLISH", "jobs", "to-default")
        o.call("PUBLISH", "jobs", "to-other")
        ra, rb = Env.redis_a.client(), Env.redis_b.client()
        self.assertTrue(ra.exists("dq:{%s/jobs}:j" % ns_d))
        self.assertFalse(rb.exists("dq:{%s/jobs}:j" % ns_d))
        self.assertTrue(rb.exists("dq:{%s/jobs}:j" % ns_o))
        self.assertFalse(ra.exists("dq:{%s/jobs}:j" % ns_o))
        self.assertIn(("%s/jobs" % ns_o).encode(), rb.smembers("dq:queues"))
        self.assertNotIn(("%s/jobs" % ns_o).encode(), ra.smembers("dq:queues"))
        self.assertEqual(o.call("CONSUME", "jobs")[2], b"to-other")
        self.assertEqual(d.call("CONSUME", "jobs")[2], b"to-default")

    def test_delayed_jobs_and_lease_expiries_on_the_second_pool_are_pumped(self):
        ns, tok = self.namespace(pool="other")
        # Published through instance 2, consumed through instance 1: the pump of pool "other"
        # (whichever instance owns it) moves the job and ends the lease.
        p = self.bound(ns, tok, port=Env.dq2.port)
        c = self.bound(ns, tok)
        jid = p.call("PUBLISH", "later", "x", "PDELAY", "300", "TRIES", "2")
        t0 = time.monotonic()
        job = c.call("CONSUME", "later", "TTR", "1", "TIMEOUT", "5")
        self.assertEqual(job[1], jid)
        self.assertGreaterEqual(time.monotonic() - t0, 0.25)
        again = c.call("CONSUME", "later", "TIMEOUT", "5")
        self.assertEqual(again[1], jid)
        self.assertEqual(again[5], 2)  # attempt 2: the lease ended and it was delivered again
        self.assertEqual(c.call("ACK", "later", jid), 1)


class RevocationTests(AuthCase):
    def test_revoked_token_fails_on_a_second_instance_within_cache_seconds_plus_1(self):
        ns, token = self.namespace()
        # Authenticated on instance 2 before the revocation, and in use.
        early = self.bound(ns, token, port=Env.dq2.port)
        self.assertIsInstance(early.call("PUBLISH", "q", "before"), bytes)
        self.assertEqual(self.admin().call("TOKEN", "REVOKE", ns, token), b"OK")
        revoked = time.monotonic()
        bound = CACHE_S + 1.0
        got = None
        while time.monotonic() - revoked < bound + 1.0:
            got = early.call("PUBLISH", "q", "after")
            if got == NOAUTH:
                break
            time.sleep(0.05)
        took = time.monotonic() - revoked
        self.assertEqual(got, NOAUTH)
        self.assertLessEqual(took, bound, "refused %.2f s after the revocation" % took)
        # Unbound now, and a new connection cannot bind with it either.
        self.assertEqual(early.call("QSTAT", "q"), NOAUTH)
        self.assertEqual(self.raw(Env.dq2.port).call("AUTH", ns, token), WRONGPASS)

    def test_a_consumer_blocked_before_a_revocation_gets_noauth_not_the_job(self):
        ns, token = self.namespace()
        a = self.admin()
        kept = a.call("TOKEN", "CREATE", ns, "DESCRIPTION", "kept").decode()
        # Both parked on instance 2 before the revocation, on different queues (TIMEOUT 0 does
        # not block in deferq: a long one does).
        revoked_c = self.bound(ns, token, port=Env.dq2.port)
        kept_c = self.bound(ns, kept, port=Env.dq2.port)
        revoked_c.send("CONSUME", "q", "TIMEOUT", "60")
        kept_c.send("CONSUME", "q-live", "TIMEOUT", "60")
        time.sleep(0.2)
        self.assertEqual(a.call("TOKEN", "REVOKE", ns, token), b"OK")
        revoked = time.monotonic()
        bound = CACHE_S + 1.0
        # Told without any job coming, within cache_seconds + 1 s.
        readable, _, _ = select.select([revoked_c.sock], [], [], bound)
        took = time.monotonic() - revoked
        self.assertTrue(readable, "no reply %.2f s after the revocation" % took)
        time.sleep(max(0.0, bound - (time.monotonic() - revoked)))
        publisher = self.bound(ns, kept)  # instance 1
        jid = publisher.call("PUBLISH", "q", "after")
        self.assertEqual(revoked_c.read(), NOAUTH)
        self.assertEqual(revoked_c.call("QSTAT", "q"), NOAUTH)
        # The job stayed in the queue, for a valid consumer.
        self.assertEqual(publisher.call("QSTAT", "q")[1], 1)  # ready
        self.assertEqual(publisher.call("CONSUME", "q")[1], jid)
        # The consumer whose token is still valid was re-checked too, and still gets its job.
        live = publisher.call("PUBLISH", "q-live", "still-served")
        kept_c.sock.settimeout(5.0)
        job = kept_c.read()
        self.assertEqual(job[1], live)
        self.assertEqual(job[2], b"still-served")

    def test_new_token_works_at_once_and_old_one_stops_after_rotation(self):
        ns, old = self.namespace()
        a = self.admin()
        # Instance 2 caches the namespace with the old token only.
        self.assertEqual(self.raw(Env.dq2.port).call("AUTH", ns, old), b"OK")
        new = a.call("TOKEN", "CREATE", ns, "DESCRIPTION", "rotated").decode()
        self.assertEqual(self.raw(Env.dq2.port).call("AUTH", ns, new), b"OK")
        self.assertEqual(a.call("TOKEN", "REVOKE", ns, old), b"OK")
        time.sleep(CACHE_S + 0.2)
        self.assertEqual(self.raw(Env.dq2.port).call("AUTH", ns, old), WRONGPASS)
        self.assertEqual(self.raw(Env.dq2.port).call("AUTH", ns, new), b"OK")


class PasswordTests(AuthCase):
    def test_admin_password_never_appears_in_ps_logs_info_or_client_list(self):
        a = self.admin()
        a.call("CLIENT", "SETNAME", "operator")
        texts = {}
        for d in (Env.dq, Env.dq2):
            pid = d.proc.pid
            texts["ps %d" % pid] = subprocess.run(
                ["ps", "eww", "-o", "pid,args", "-p", str(pid)], capture_output=True,
                text=True, check=True).stdout
            for f in ("environ", "cmdline"):
                with open("/proc/%d/%s" % (pid, f), "rb") as fh:
                    texts["/proc/%d/%s" % (pid, f)] = fh.read().decode("utf-8", "replace")
            with open(d.log, "rb") as fh:
                texts["log " + d.name] = fh.read().decode("utf-8", "replace")
        texts["INFO"] = a.call("INFO", "everything").decode()
        texts["CLIENT LIST"] = a.call("CLIENT", "LIST").decode()
        texts["CLIENT INFO"] = a.call("CLIENT", "INFO").decode()
        self.assertIn("user=admin", texts["CLIENT INFO"])
        self.assertIn(PASSWORD_ENV, texts["/proc/%d/environ" % Env.dq.proc.pid])
        for where, text in texts.items():
            self.assertNotIn(PASSWORD, text, where)
            self.assertNotIn(PASSWORD[6:], text, where)


if __name__ == "__main__":
    sys.exit(runner.main_with_deferq(__name__, sys.argv,
                                     "test_auth.py /path/to/deferq [unittest args]"))
