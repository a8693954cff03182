"""redis-server and deferq processes for the tests: free loopback ports, start (retrying on a
fresh port when the one picked was taken meanwhile), wait until PONG (and, for deferq, until its
pool answers), stop with a bound, SIGKILL, log tails, resident memory, temporary directories.

Every process listens on 127.0.0.1 only and logs to a file in the test's directory; whoever
starts one stops it (tearDown, finally, or the suite's runner).
"""

import ctypes
import itertools
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

from .resp import Err, Raw

START_BOUND_S = 10.0  # how long a process may take to answer PING (a busy 2-core machine)
_names = itertools.count(1)


def make_tmpdir(what):
    return tempfile.mkdtemp(prefix="deferq-%s-" % what)


def remove_tmpdir(path):
    """Removes a test's directory; with DQTEST_KEEP set it is kept (logs of every server) and its
    path printed."""
    if path and os.environ.get("DQTEST_KEEP"):
        print("\n  kept %s (DQTEST_KEEP)" % path)
    elif path:
        shutil.rmtree(path, ignore_errors=True)


def port_is_free(port):
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def free_port(cluster=False):
    """A free loopback port; for a cluster node also its bus port (port + 10000) must be free."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if not cluster or (port < 55000 and port_is_free(port + 10000)):
            return port


def die_with_parent():
    """Runs in the child before exec: SIGTERM the child when the thread that started it dies."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def stop_process(proc, bound=5.0):
    """SIGTERM, and SIGKILL when the process is still there after `bound` seconds."""
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(bound)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


def kill_process(proc):
    if proc is not None and proc.poll() is None:
        proc.kill()
        proc.wait(5)


def file_tail(path, n=30):
    """The last n lines of a log file, as text."""
    try:
        with open(path, "rb") as f:
            return b"\n".join(f.read().splitlines()[-n:]).decode("utf-8", "replace")
    except OSError:
        return "(no log)"


def rss_kib(pid):
    """A process's resident memory (VmRSS), KiB; 0 once it is gone."""
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def answers_ping(port, timeout=0.5):
    try:
        r = Raw(port, timeout=timeout)
        try:
            return r.call("PING") == b"PONG"
        finally:
            r.close()
    except (OSError, ConnectionError, ValueError):
        return False


def wait_for_ping(port, proc, bound=START_BOUND_S):
    """True once the server on `port` answers PONG; False when `proc` exits or `bound` passes."""
    deadline = time.monotonic() + bound
    while time.monotonic() < deadline and proc.poll() is None:
        if answers_ping(port):
            return True
        time.sleep(0.02)
    return False


def wait_for_pool(port, proc, bound=START_BOUND_S):
    """Waits until deferq's job commands reach its pool: they answer -TRYAGAIN while the pool's
    connections come up (docs/operations.md). Raises RuntimeError on any other answer or after `bound`."""
    deadline = time.monotonic() + bound
    last = None
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            r = Raw(port, timeout=2.0)
            try:
                last = r.call("QSTAT", "startup-probe")
            finally:
                r.close()
        except (OSError, ConnectionError, ValueError) as e:
            last = e
        if isinstance(last, list):
            return
        if isinstance(last, Err) and not last.startswith("TRYAGAIN"):
            break
        time.sleep(0.02)
    raise RuntimeError("deferq on port %d: pool not ready (QSTAT answered %r, exit code %s)"
                       % (port, last, proc.poll()))


class Server:
    """One server process of a test. start() returns self with .port and .proc set; it may be
    called again after stop()/kill9() (restart)."""

    what = "server"
    preexec = None  # runs in the child before exec (e.g. resource limits), as well as pdeathsig

    def __init__(self, tmpdir, name, port=None, pdeathsig=False):
        self.tmpdir = tmpdir
        self.name = name
        self.log = os.path.join(tmpdir, name + ".log")
        self.port = port
        self.fixed_port = port is not None
        self.pdeathsig = pdeathsig
        self.proc = None

    def argv(self, port):
        raise NotImplementedError

    def wait_ready(self, port):
        """True once the process on `port` serves; False to retry on another port."""
        return wait_for_ping(port, self.proc)

    def next_port(self):
        return self.port if self.fixed_port else free_port()

    def start(self, attempts=5):
        for _ in range(attempts):
            port = self.next_port()
            with open(self.log, "ab") as log:
                self.proc = subprocess.Popen(
                    self.argv(port), stdout=log, stderr=subprocess.STDOUT,
                    preexec_fn=self._preexec if self.pdeathsig or self.preexec else None)
            if self.wait_ready(port):
                self.port = port
                return self
            stop_process(self.proc)
            if self.fixed_port:  # the port may still be held by the previous process
                time.sleep(0.5)
        raise RuntimeError("%s did not start (exit code %s); log:\n%s"
                           % (self.what, self.proc.poll(), self.log_tail()))

    def _preexec(self):
        if self.pdeathsig:
            die_with_parent()
        if self.preexec:
            self.preexec()

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self, bound=5.0):
        stop_process(self.proc, bound)

    def kill9(self):
        kill_process(self.proc)

    def log_tail(self, n=30):
        return file_tail(self.log, n)

    def client(self, **kw):
        """A redis-py client of this server."""
        import redis
        return redis.Redis(host="127.0.0.1", port=self.port, **kw)


class Redis(Server):
    """redis-server without persistence (unless appendonly), data in its own directory. A
    restart keeps the port, so clients and deferq pools find it again."""

    what = "redis-server"

    def __init__(self, tmpdir, extra=(), port=None, name=None, appendonly=False, cluster=False,
                 pdeathsig=False):
        super().__init__(tmpdir, name or "redis-%d" % next(_names), port, pdeathsig)
        self.extra = list(extra)
        self.appendonly = appendonly
        self.cluster = cluster
        self.dir = os.path.join(tmpdir, self.name + ".d")
        os.makedirs(self.dir, exist_ok=True)

    def argv(self, port):
        args = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                "--appendonly", "yes" if self.appendonly else "no", "--dir", self.dir]
        if self.cluster:
            args += ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"]
        return args + self.extra

    def next_port(self):
        return self.port or free_port(cluster=self.cluster)

    def start(self, attempts=5):
        super().start(attempts)
        self.fixed_port = True
        return self


class Deferq(Server):
    """The deferq binary under test with one pool, "default", on a redis-server; optionally a
    config file. Without a fixed port each start picks a free one."""

    what = "deferq"

    def __init__(self, binary, tmpdir, redis_port, config_text=None, name=None, port=None,
                 threads=2, extra=(), wait_pool=True):
        super().__init__(tmpdir, name or "deferq-%d" % next(_names), port)
        self.binary = binary
        self.redis_port = redis_port
        self.threads = threads
        self.extra = list(extra)
        self.wait_pool = wait_pool
        self.config = None
        if config_text is not None:
            self.config = os.path.join(tmpdir, self.name + ".toml")
            with open(self.config, "w") as f:
                f.write(config_text)

    def argv(self, port):
        args = [self.binary, "--port", str(port), "--threads", str(self.threads)]
        if self.redis_port is not None:  # None: the pools are the config file's (Sentinel...)
            args += ["--pool", "default=redis://127.0.0.1:%d" % self.redis_port]
        if self.config:
            args += ["--config", self.config]
        return args + self.extra

    def wait_ready(self, port):
        if not wait_for_ping(port, self.proc):
            return False
        if self.wait_pool:
            wait_for_pool(port, self.proc)
        return True


class Prometheus(Server):
    """Debian's Prometheus server scraping `targets` ("host:port" of metrics endpoints) every
    second, its storage in the test's directory, its web API on a free loopback port."""

    what = "prometheus"
    binary = "/usr/bin/prometheus"

    def __init__(self, tmpdir, targets, name="prometheus"):
        super().__init__(tmpdir, name)
        self.config = os.path.join(tmpdir, name + ".yml")
        self.data = os.path.join(tmpdir, name + ".data")
        with open(self.config, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                    "scrape_configs:\n  - job_name: deferq\n    static_configs:\n"
                    "      - targets: [%s]\n" % ", ".join("'%s'" % t for t in targets))

    def argv(self, port):
        return [self.binary, "--config.file=" + self.config, "--storage.tsdb.path=" + self.data,
                "--web.listen-address=127.0.0.1:%d" % port, "--log.level=warn"]

    def wait_ready(self, port, bound=60.0):
        """Prometheus answers /-/ready with 200 once its storage is open (slow on a busy host)."""
        import urllib.request
        deadline = time.time() + bound
        while time.time() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                with urllib.request.urlopen("http://127.0.0.1:%d/-/ready" % port, timeout=1) as r:
                    if r.status == 200:
                        return True
            except OSError:
                pass
            time.sleep(0.2)
        return False

    def query(self, expr):
        """The JSON answer of the instant-query API (/api/v1/query) for a PromQL expression."""
        return self.api("/api/v1/query", [("query", expr)])

    def api(self, path, params=()):
        """The JSON answer of a GET on the HTTP API, e.g. ("/api/v1/label/queue/values",
        [("match[]", "deferq_queue_jobs")]); params are pairs, since match[] may repeat."""
        import json
        import urllib.error
        import urllib.parse
        import urllib.request
        url = "http://127.0.0.1:%d%s?%s" % (self.port, path, urllib.parse.urlencode(params))
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                return json.load(r)
        except urllib.error.HTTPError as e:  # 400/422 carry the error as JSON
            return json.load(e)


class Sentinel(Server):
    """redis-sentinel watching one master as `master_name` (quorum 2 of the usual three), with
    short timers so that a failover ends within seconds. Its config file is rewritten by the
    Sentinel itself (it records what it learns), so each Sentinel has its own."""

    what = "redis-sentinel"

    def __init__(self, tmpdir, master_port, master_name="mymaster", quorum=2,
                 down_after_ms=1000, failover_timeout_ms=3000, name=None):
        super().__init__(tmpdir, name or "sentinel-%d" % next(_names))
        self.master_port = master_port
        self.master_name = master_name
        self.quorum = quorum
        self.down_after_ms = down_after_ms
        self.failover_timeout_ms = failover_timeout_ms
        self.conf = os.path.join(tmpdir, self.name + ".conf")

    def argv(self, port):
        with open(self.conf, "w") as f:
            f.write("port %d\nbind 127.0.0.1\ndir %s\n" % (port, self.tmpdir))
            f.write("sentinel monitor %s 127.0.0.1 %d %d\n"
                    % (self.master_name, self.master_port, self.quorum))
            f.write("sentinel down-after-milliseconds %s %d\n"
                    % (self.master_name, self.down_after_ms))
            f.write("sentinel failover-timeout %s %d\n"
                    % (self.master_name, self.failover_timeout_ms))
        return ["redis-sentinel", self.conf]

    def master_addr(self):
        """(host, port) this Sentinel names master now, or None."""
        r = Raw(self.port, timeout=2.0)
        try:
            reply = r.call("SENTINEL", "get-master-addr-by-name", self.master_name)
        finally:
            r.close()
        if not isinstance(reply, list):
            return None
        return reply[0].decode(), int(reply[1])
