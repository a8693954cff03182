"""A TCP proxy on loopback that puts faults between deferq and its Redis: latency, a reply cut in
the middle, a half-close, a reset, a black hole. Every connection deferq opens goes through it;
faults act on the connections open at the time (and, for latency and the black hole, on later
ones until cleared).

    proxy = FaultProxy(redis_port).start()     # proxy.port is where deferq connects
    proxy.delay(0.3)                           # every chunk Redis sends waits 300 ms
    proxy.cut_next_reply()                     # the next chunk from Redis: half of it, then close
    proxy.half_close()                         # FIN to deferq, the other direction stays open
    proxy.reset()                              # RST both ways
    proxy.clear(); proxy.stop()

One thread accepts, two threads per connection copy bytes; every loop is bounded by the sockets'
lives and the stop() of the proxy.
"""

import socket
import struct
import threading
import time

from .procs import free_port


class _Pair:
    def __init__(self, client, upstream):
        self.client = client
        self.upstream = upstream
        self.closed = False


class FaultProxy:
    def __init__(self, target_port, host="127.0.0.1"):
        self.target = (host, target_port)
        self.port = None
        self.lock = threading.Lock()
        self.pairs = []
        self.latency = 0.0
        self.blackhole = False
        self.cut_pending = False
        self.cuts = 0
        self.accepted = 0
        self.stopping = False
        self.listener = None
        self.threads = []

    def start(self):
        for _ in range(5):
            port = free_port()
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                s.close()
                continue
            s.listen(128)
            s.settimeout(0.2)
            self.listener, self.port = s, port
            t = threading.Thread(target=self._accept, daemon=True)
            t.start()
            self.threads.append(t)
            return self
        raise RuntimeError("no free port for the proxy")

    def stop(self):
        self.stopping = True
        self.reset()
        if self.listener is not None:
            self.listener.close()
        for t in self.threads:
            t.join(5)

    # -- faults -----------------------------------------------------------------------------

    def delay(self, seconds):
        self.latency = seconds

    def drop(self, on=True):
        """Redis's bytes are read and thrown away (deferq hears nothing) until drop(False)."""
        self.blackhole = on

    def cut_next_reply(self):
        """The next chunk Redis sends is forwarded in part (its first half), then both sides of
        that connection are closed: deferq sees a reply end in the middle."""
        self.cut_pending = True

    def half_close(self):
        """FIN to deferq on every open connection; deferq's own direction stays open."""
        for p in self._live():
            try:
                p.client.shutdown(socket.SHUT_WR)
            except OSError:
                pass

    def reset(self):
        """RST to both ends of every open connection."""
        for p in self._live():
            self._close(p, rst=True)

    def clear(self):
        self.latency = 0.0
        self.blackhole = False
        self.cut_pending = False

    # -- plumbing ---------------------------------------------------------------------------

    def _live(self):
        with self.lock:
            return [p for p in self.pairs if not p.closed]

    def _close(self, pair, rst=False):
        with self.lock:
            if pair.closed:
                return
            pair.closed = True
        for s in (pair.client, pair.upstream):
            try:
                if rst:
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                else:
                    s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            try:
                s.close()
            except OSError:
                pass

    def _accept(self):
        while not self.stopping:
            try:
                client, _ = self.listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=2)
            except OSError:
                client.close()
                continue
            for s in (client, upstream):
                s.settimeout(None)
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            pair = _Pair(client, upstream)
            with self.lock:
                self.pairs = [p for p in self.pairs if not p.closed] + [pair]
                self.accepted += 1
            for args in ((pair, client, upstream, False), (pair, upstream, client, True)):
                t = threading.Thread(target=self._copy, args=args, daemon=True)
                t.start()

    def _copy(self, pair, src, dst, from_redis):
        while not pair.closed:
            try:
                data = src.recv(65536)
            except OSError:
                break
            if not data:
                # EOF from one side: passed on as a half-close, as TCP would.
                try:
                    dst.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
                return
            if from_redis:
                if self.latency > 0:
                    time.sleep(self.latency)
                if self.blackhole:
                    continue
                if self.cut_pending and len(data) >= 2:
                    self.cut_pending = False
                    self.cuts += 1
                    try:
                        dst.sendall(data[:len(data) // 2])
                    except OSError:
                        pass
                    self._close(pair)
                    return
            try:
                dst.sendall(data)
            except OSError:
                break
        self._close(pair)
