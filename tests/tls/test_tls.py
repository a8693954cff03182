#!/usr/bin/python3
"""TLS to clients and to Redis (docs/operations.md "TLS"; issue 27).

    /usr/bin/python3 tests/tls/test_tls.py /path/to/deferq [unittest args, e.g. -k cluster]

Certificates are made for the run with the openssl command: a CA, a server certificate for
127.0.0.1/localhost, a client certificate, and a second CA with a client certificate of its own
(the ones deferq must refuse). Redis is a real redis-server that speaks only TLS (--port 0
--tls-port) and asks its clients for a certificate; deferq serves RESP on server.listen and over
TLS on tls.listen. Clients: redis-py with ssl=True (its defaults: the server's certificate is
verified) and redis-cli --tls.
"""

import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))

from dqtest import procs, runner  # noqa: E402
from dqtest.resp import Raw  # noqa: E402

DEFERQ = None  # set by runner.main_with_deferq


class Env:
    tmp = None
    certs = None
    redis = None  # TLS-only redis-server that asks for client certificates
    dq = None     # deferq: pool rediss://, tls.listen beside server.listen
    dq_tls_port = None


def cert(name):
    return os.path.join(Env.certs, name)


def openssl(*args):
    subprocess.run(["openssl"] + list(args), check=True, capture_output=True, timeout=60)


def make_certificates(d):
    os.makedirs(d, exist_ok=True)

    def ca(name, cn):
        openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "%s/%s.key" % (d, name),
                "-out", "%s/%s.crt" % (d, name), "-days", "2", "-subj", "/CN=" + cn)

    def signed(name, cn, by):
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "%s/%s.key" % (d, name),
                "-out", "%s/%s.csr" % (d, name), "-subj", "/CN=" + cn)
        ext = "%s/%s.ext" % (d, name)
        with open(ext, "w") as f:
            f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
        openssl("x509", "-req", "-in", "%s/%s.csr" % (d, name), "-CA", "%s/%s.crt" % (d, by),
                "-CAkey", "%s/%s.key" % (d, by), "-CAcreateserial", "-out",
                "%s/%s.crt" % (d, name), "-days", "2", "-extfile", ext)

    ca("ca", "deferq test CA")
    signed("server", "deferq-server", "ca")
    signed("rotated", "deferq-server-rotated", "ca")
    signed("client", "deferq-client", "ca")
    ca("other-ca", "another CA")
    signed("rogue", "rogue-client", "other-ca")
    signed("rogue-server", "rogue-server", "other-ca")


class TlsRedis(procs.Redis):
    """A redis-server that speaks only TLS, with the run's server certificate; with
    `auth_clients` it refuses clients without a certificate of the run's CA."""

    what = "redis-server (TLS)"

    def __init__(self, tmpdir, auth_clients=True, cluster=False, server_cert="server",
                 trust="ca", name=None):
        super().__init__(tmpdir, name=name, cluster=cluster)
        self.auth_clients = auth_clients
        self.server_cert = server_cert
        self.trust = trust  # the CA its certificate is signed by

    def argv(self, port):
        args = ["redis-server", "--port", "0", "--tls-port", str(port), "--bind", "127.0.0.1",
                "--save", "", "--appendonly", "no", "--dir", self.dir,
                "--tls-cert-file", cert(self.server_cert + ".crt"),
                "--tls-key-file", cert(self.server_cert + ".key"),
                "--tls-ca-cert-file", cert("ca.crt"),
                "--tls-auth-clients", "yes" if self.auth_clients else "no"]
        if self.cluster:
            args += ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                     "--tls-cluster", "yes", "--cluster-node-timeout", "1000"]
        return args

    def wait_ready(self, port):
        deadline = time.monotonic() + procs.START_BOUND_S
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                if tls_redis(port, ca=self.trust).ping():
                    return True
            except Exception:
                pass
            time.sleep(0.05)
        return False

    def client(self, **kw):
        return tls_redis(self.port, ca=self.trust, **kw)


def tls_redis(port, certificate="client", ca="ca", **kw):
    """redis-py over TLS, its defaults (the server's certificate verified against the run's
    CA); `certificate` None sends none."""
    import redis
    extra = {}
    if certificate is not None:
        extra = {"ssl_certfile": cert(certificate + ".crt"),
                 "ssl_keyfile": cert(certificate + ".key")}
    return redis.Redis(host="127.0.0.1", port=port, ssl=True, ssl_ca_certs=cert(ca + ".crt"),
                       socket_timeout=10, **extra, **kw)


def cli_tls(port, *args, certificate=None):
    argv = ["redis-cli", "-p", str(port), "--tls", "--cacert", cert("ca.crt")]
    if certificate is not None:
        argv += ["--cert", cert(certificate + ".crt"), "--key", cert(certificate + ".key")]
    out = subprocess.run(argv + [str(a) for a in args], capture_output=True, text=True,
                         timeout=30)
    return out.stdout.strip(), out.stderr.strip()


def deferq_config(pool_lines, tls_port, extra_tls="", upstream=True):
    text = "[tls]\nlisten = \"127.0.0.1:%d\"\ncert_file = \"%s\"\nkey_file = \"%s\"\n" % (
        tls_port, cert("server.crt"), cert("server.key"))
    if upstream:
        text += "upstream_ca_file = \"%s\"\nupstream_cert_file = \"%s\"\n" \
                "upstream_key_file = \"%s\"\n" % (cert("ca.crt"), cert("client.crt"),
                                                  cert("client.key"))
    return text + extra_tls + "\n" + pool_lines


def start_deferq(name, pool_lines, extra_tls="", upstream=True, wait_pool=True):
    port = procs.free_port()
    d = procs.Deferq(DEFERQ, Env.tmp, None,
                     config_text=deferq_config(pool_lines, port, extra_tls, upstream), name=name,
                     wait_pool=wait_pool)
    d.start()
    d.tls_port = port
    return d


def wait_log(d, text, bound=10.0):
    deadline = time.monotonic() + bound
    while time.monotonic() < deadline:
        with open(d.log, errors="replace") as f:
            log = f.read()
        if text in log:
            return log
        time.sleep(0.05)
    raise AssertionError("%r not in %s's log:\n%s" % (text, d.name, d.log_tail()))


def setUpModule():
    Env.tmp = procs.make_tmpdir("tls")
    Env.certs = os.path.join(Env.tmp, "certs")
    make_certificates(Env.certs)
    Env.redis = TlsRedis(Env.tmp, name="redis-tls").start()
    Env.dq = start_deferq("deferq-tls", "[pools.default]\naddr = \"rediss://127.0.0.1:%d\"\n"
                          % Env.redis.port)
    Env.dq_tls_port = Env.dq.tls_port


def tearDownModule():
    for p in (Env.dq, Env.redis):
        if p is not None:
            p.stop()
    procs.remove_tmpdir(Env.tmp)


class ClientsAndRedisOverTls(unittest.TestCase):
    def setUp(self):
        self.c = tls_redis(Env.dq_tls_port, certificate=None)

    def tearDown(self):
        self.c.close()

    def test_every_job_command_through_tls_on_both_sides(self):
        c = self.c
        q = "tls-jobs"
        self.assertTrue(c.ping())
        jid = c.execute_command("PUBLISH", q, "payload-1", "TRIES", 3).decode()
        delayed = c.execute_command("PUBLISH", q, "later", "DELAY", 1).decode()
        got = c.execute_command("CONSUME", q, "TIMEOUT", 2)
        self.assertEqual((got[1].decode(), got[2]), (jid, b"payload-1"))
        self.assertEqual(c.execute_command("TOUCH", q, jid, "TTR", 30), 1)
        job = c.execute_command("JOB", q, jid)
        self.assertIn(b"leased", job)
        self.assertEqual(c.execute_command("NACK", q, jid, "REASON", "smtp down"), 1)
        again = c.execute_command("CONSUME", q, "TIMEOUT", 2)
        self.assertEqual(again[1].decode(), jid)
        self.assertEqual(c.execute_command("ACK", q, jid), 1)
        # The delayed job arrives through the wheel, over TLS both ways.
        later = c.execute_command("CONSUME", q, "TIMEOUT", 3)
        self.assertEqual((later[1].decode(), later[2]), (delayed, b"later"))
        self.assertEqual(c.execute_command("NACK", q, delayed, "REASON", "boom"), 1)
        self.assertEqual(c.execute_command("DEADLETTER", "SIZE", q), 1)
        dead = c.execute_command("DEADLETTER", "PEEK", q, "WITHERRORS")
        self.assertIn(b"boom", dead[0])
        self.assertEqual(c.execute_command("DEADLETTER", "RESPAWN", q), 1)
        self.assertEqual(c.execute_command("PEEK", q)[0][1].decode(), delayed)
        self.assertEqual(c.execute_command("QPAUSE", q), b"OK")
        self.assertIsNone(c.execute_command("CONSUME", q, "TIMEOUT", 0.2))
        self.assertEqual(c.execute_command("QRESUME", q), b"OK")
        self.assertEqual(c.execute_command("CANCEL", q, delayed), 1)
        c.execute_command("PUBLISH", q, "x")
        stats = c.execute_command("QSTAT", q)
        figures = dict(zip(stats[0::2], stats[1::2]))
        self.assertEqual((figures[b"ready"], figures[b"published_total"]), (1, 3))
        self.assertIn(q.encode(), c.execute_command("QUEUES"))
        self.assertEqual(c.execute_command("PURGE", q), 1)
        # A CALL answered by a worker on another TLS connection.
        worker = tls_redis(Env.dq_tls_port, certificate=None)
        try:
            import threading
            answer = {}
            t = threading.Thread(target=lambda: answer.update(
                r=c.execute_command("CALL", "tls-calls", "2+2", "TIMEOUT", 5)))
            t.start()
            job = worker.execute_command("CONSUME", "tls-calls", "TIMEOUT", 5)
            worker.execute_command("ACK", "tls-calls", job[1], "RESULT", "4")
            t.join(10)
            self.assertEqual(answer["r"], b"4")
        finally:
            worker.close()
        # The jobs really are in the TLS-only Redis.
        self.assertGreater(Env.redis.client().dbsize(), 0)

    def test_redis_cli_tls_and_the_plain_listener_share_the_jobs(self):
        jid = Raw(Env.dq.port).call("PUBLISH", "tls-mixed", "from-plain").decode()
        out, err = cli_tls(Env.dq_tls_port, "CONSUME", "tls-mixed", "TIMEOUT", 2)
        self.assertEqual(out.splitlines()[:3], ["tls-mixed", jid, "from-plain"], err)
        out, err = cli_tls(Env.dq_tls_port, "ACK", "tls-mixed", jid)
        self.assertEqual(out, "1", err)
        # A plaintext client on the TLS port is refused, with the reason in the log.
        with socket.create_connection(("127.0.0.1", Env.dq_tls_port), timeout=5) as s:
            s.sendall(b"PING\r\n")
            self.assertEqual(s.recv(100)[:1] in (b"", b"\x15"), True)
        wait_log(Env.dq, "refused: TLS handshake failed")

    def test_tls_1_2_and_1_3_only(self):
        def handshake(*flags):
            out = subprocess.run(["openssl", "s_client", "-connect",
                                  "127.0.0.1:%d" % Env.dq_tls_port, "-CAfile", cert("ca.crt")] +
                                 list(flags), input="", capture_output=True, text=True, timeout=20)
            return out.stdout + out.stderr
        self.assertIn("Protocol  : TLSv1.2", handshake("-tls1_2"))
        self.assertIn("TLSv1.3", handshake("-tls1_3"))
        # Offered by a client that allows it (security level 0), refused by deferq.
        old = handshake("-tls1_1", "-cipher", "DEFAULT@SECLEVEL=0")
        self.assertIn("alert protocol version", old)
        self.assertIn("Cipher is (NONE)", old)
        wait_log(Env.dq, "refused: TLS handshake failed: unsupported protocol")

    def test_a_rediss_url_with_namespace_and_token(self):
        import redis
        r = redis.Redis.from_url("rediss://team:tok@127.0.0.1:%d" % Env.dq_tls_port,
                                 ssl_ca_certs=cert("ca.crt"))
        try:
            self.assertIn(b"user=team", r.execute_command("CLIENT", "INFO"))
            jid = r.execute_command("PUBLISH", "tls-url", "x").decode()
            self.assertEqual(r.execute_command("CONSUME", "tls-url", "TIMEOUT", 2)[1].decode(), jid)
            self.assertEqual(r.execute_command("ACK", "tls-url", jid), 1)
        finally:
            r.close()

    def test_big_payloads_and_pipelines_cross_tls_records(self):
        c = self.c
        big = os.urandom(300 * 1024)
        jid = c.execute_command("PUBLISH", "tls-big", big).decode()
        p = c.pipeline(transaction=False)
        for i in range(500):
            p.execute_command("PUBLISH", "tls-pipe", "j%d" % i)
        self.assertEqual(len(p.execute()), 500)
        got = c.execute_command("CONSUME", "tls-big", "TIMEOUT", 2)
        self.assertEqual((got[1].decode(), got[2]), (jid, big))
        got = c.execute_command("CONSUME", "tls-pipe", "COUNT", 500, "TIMEOUT", 2)
        self.assertEqual(len(got), 500)
        for q in ("tls-big", "tls-pipe"):
            c.execute_command("PURGE", q)


class Certificates(unittest.TestCase):
    def test_client_certificates_required_when_a_client_ca_is_set(self):
        d = start_deferq("deferq-mtls", "[pools.default]\naddr = \"rediss://127.0.0.1:%d\"\n"
                         % Env.redis.port,
                         extra_tls="client_ca_file = \"%s\"\n" % cert("ca.crt"))
        try:
            import redis
            with self.assertRaises(redis.ConnectionError):
                tls_redis(d.tls_port, certificate=None).ping()
            wait_log(d, "refused: TLS")
            with self.assertRaises(redis.ConnectionError):
                tls_redis(d.tls_port, certificate="rogue").ping()
            log = wait_log(d, "certificate verify failed")
            self.assertIn("TLS client", log)
            ok = tls_redis(d.tls_port, certificate="client")
            self.assertTrue(ok.ping())
            self.assertTrue(ok.execute_command("PUBLISH", "tls-mtls", "x"))
            ok.execute_command("PURGE", "tls-mtls")
            ok.close()
        finally:
            d.stop()

    def test_a_redis_certificate_deferq_does_not_trust_is_refused_with_a_clear_log_line(self):
        rogue = TlsRedis(Env.tmp, auth_clients=False, server_cert="rogue-server",
                         trust="other-ca", name="redis-rogue").start()
        d = start_deferq("deferq-distrust",
                         "[pools.default]\naddr = \"rediss://127.0.0.1:%d\"\n" % rogue.port,
                         wait_pool=False)
        try:
            log = wait_log(d, "certificate verify failed")
            self.assertIn("127.0.0.1:%d" % rogue.port, log)
            reply = Raw(d.port).call("PUBLISH", "tls-untrusted", "x")
            self.assertTrue(str(reply).startswith("TRYAGAIN"), reply)
        finally:
            d.stop()
            rogue.stop()

    def test_redis_that_asks_for_a_client_certificate_refuses_deferq_without_one(self):
        d = start_deferq("deferq-nocert", "[pools.default]\naddr = \"rediss://127.0.0.1:%d\"\n"
                         % Env.redis.port,
                         extra_tls="upstream_ca_file = \"%s\"\n" % cert("ca.crt"),
                         upstream=False, wait_pool=False)
        try:
            wait_log(d, "pool 'default' connection down (127.0.0.1:%d): TLS read failed: "
                        "tlsv13 alert certificate required" % Env.redis.port)
            reply = Raw(d.port).call("PUBLISH", "tls-nocert", "x")
            self.assertTrue(str(reply).startswith("TRYAGAIN"), reply)
        finally:
            d.stop()

    def test_sighup_serves_a_rotated_certificate_to_new_connections(self):
        live = os.path.join(Env.tmp, "live")
        os.makedirs(live, exist_ok=True)
        for ext in ("crt", "key"):
            shutil.copy(cert("server." + ext), os.path.join(live, "server." + ext))
        text = ("[tls]\nlisten = \"127.0.0.1:%d\"\ncert_file = \"%s/server.crt\"\n"
                "key_file = \"%s/server.key\"\nupstream_ca_file = \"%s\"\n"
                "upstream_cert_file = \"%s\"\nupstream_key_file = \"%s\"\n\n"
                "[pools.default]\naddr = \"rediss://127.0.0.1:%d\"\n")
        port = procs.free_port()
        d = procs.Deferq(DEFERQ, Env.tmp, None, name="deferq-rotate",
                         config_text=text % (port, live, live, cert("ca.crt"),
                                             cert("client.crt"), cert("client.key"),
                                             Env.redis.port))
        d.start()
        try:
            self.assertEqual(peer_common_name(port), "deferq-server")
            before = tls_redis(port, certificate=None)
            self.assertTrue(before.ping())
            for ext in ("crt", "key"):
                shutil.copy(cert("rotated." + ext), os.path.join(live, "server." + ext))
            d.proc.send_signal(signal.SIGHUP)
            wait_log(d, "TLS certificate")
            self.assertEqual(peer_common_name(port), "deferq-server-rotated")
            self.assertTrue(before.ping())  # a connected client keeps its session
            before.close()
        finally:
            d.stop()


def peer_common_name(port):
    ctx = ssl.create_default_context(cafile=cert("ca.crt"))
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
            subject = dict(x[0] for x in s.getpeercert()["subject"])
            return subject["commonName"]


class TlsSentinel(procs.Server):
    """redis-sentinel that speaks only TLS, to its clients and to the master it watches."""

    what = "redis-sentinel (TLS)"

    def __init__(self, tmpdir, master_port, name="sentinel-tls"):
        super().__init__(tmpdir, name)
        self.master_port = master_port
        self.conf = os.path.join(tmpdir, name + ".conf")

    def argv(self, port):
        with open(self.conf, "w") as f:
            f.write("port 0\ntls-port %d\nbind 127.0.0.1\ndir %s\n" % (port, self.tmpdir))
            f.write("tls-cert-file %s\ntls-key-file %s\ntls-ca-cert-file %s\n"
                    % (cert("server.crt"), cert("server.key"), cert("ca.crt")))
            f.write("tls-auth-clients no\ntls-replication yes\n")
            f.write("sentinel monitor mymaster 127.0.0.1 %d 1\n" % self.master_port)
        return ["redis-sentinel", self.conf]

    def wait_ready(self, port):
        return TlsRedis.wait_ready(self, port)

    trust = "ca"


class SentinelOverTls(unittest.TestCase):
    def test_a_sentinel_pool_over_tls(self):
        sentinel = TlsSentinel(Env.tmp, Env.redis.port).start()
        d = None
        try:
            d = start_deferq("deferq-sentinel",
                             "[pools.default]\nsentinels = [\"127.0.0.1:%d\"]\n"
                             "master = \"mymaster\"\ntls = true\n" % sentinel.port)
            c = tls_redis(d.tls_port, certificate=None)
            jid = c.execute_command("PUBLISH", "tls-sentinel", "via-sentinel").decode()
            got = c.execute_command("CONSUME", "tls-sentinel", "TIMEOUT", 2)
            self.assertEqual((got[1].decode(), got[2]), (jid, b"via-sentinel"))
            self.assertEqual(c.execute_command("ACK", "tls-sentinel", jid), 1)
            c.close()
            self.assertIn("pool 'default' connection up (127.0.0.1:%d)" % Env.redis.port,
                          open(d.log).read())
        finally:
            if d is not None:
                d.stop()
            sentinel.stop()


class ClusterOverTls(unittest.TestCase):
    def test_a_cluster_pool_over_tls(self):
        nodes = []
        d = None
        try:
            for i in range(3):
                nodes.append(TlsRedis(Env.tmp, cluster=True, name="redis-cl-%d" % i).start())
            out = subprocess.run(
                ["redis-cli", "--tls", "--cacert", cert("ca.crt"), "--cert", cert("client.crt"),
                 "--key", cert("client.key"), "--cluster", "create"] +
                ["127.0.0.1:%d" % n.port for n in nodes] + ["--cluster-yes"],
                capture_output=True, text=True, timeout=60)
            self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                states = [n.client().execute_command("CLUSTER", "INFO") for n in nodes]
                if all(b"cluster_state:ok" in s for s in states):
                    break
                time.sleep(0.2)
            seeds = ", ".join("\"rediss://127.0.0.1:%d\"" % n.port for n in nodes)
            d = start_deferq("deferq-cluster", "[pools.default]\ncluster = [%s]\n" % seeds)
            c = tls_redis(d.tls_port, certificate=None)
            queues = ["tls-cl-%d" % i for i in range(60)]
            ids = {}
            for q in queues:
                ids[q] = c.execute_command("PUBLISH", q, "job-" + q).decode()
            # Every master holds some of them: the pool reached each node over TLS.
            for n in nodes:
                self.assertGreater(n.client().dbsize(), 0, "node %d holds nothing" % n.port)
            for q in queues:
                got = c.execute_command("CONSUME", q, "TIMEOUT", 2)
                self.assertEqual(got[1].decode(), ids[q])
                self.assertEqual(c.execute_command("ACK", q, ids[q]), 1)
            c.close()
        finally:
            if d is not None:
                d.stop()
            for n in nodes:
                n.kill9()


if __name__ == "__main__":
    sys.exit(runner.main_with_deferq(__name__, sys.argv,
                                     "test_tls.py /path/to/deferq [unittest args]"))
