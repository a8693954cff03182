"""RESP on a plain socket: the encoder and a raw client that keeps the exact bytes of each reply.

redis-py parses replies into Python values and raises on errors; tests that pin down the wire
(exact error texts, null shapes, RESP3 maps, pipelining byte for byte) use Raw instead.
"""

import socket


class Err(str):
    """An error reply; the text is the line without the leading '-'."""


class Status(bytes):
    """A simple-string reply."""


class RMap(list):
    """A RESP3 map, kept as an ordered list of (key, value) pairs."""

    def as_dict(self):
        return dict(self)

    def keys_in_order(self):
        return [k for k, _ in self]


class Null3:
    """RESP3 null (`_`)."""

    def __repr__(self):
        return "Null3"

    def __eq__(self, other):
        return isinstance(other, Null3)

    def __hash__(self):
        return 0


NULL3 = Null3()


def encode(args):
    """A request as a RESP array of bulk strings; ints and strs are sent as their text."""
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        if isinstance(a, int):
            a = str(a).encode()
        elif isinstance(a, str):
            a = a.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


class Raw:
    """One loopback connection. read() parses RESP2 and RESP3 (maps as RMap, `_` as NULL3,
    attributes skipped, verbatim strings without their format prefix); read_bytes() returns the
    reply exactly as it came."""

    def __init__(self, port, timeout=15.0):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        self.consumed = []

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def send(self, *args):
        self.sock.sendall(encode(args))

    def send_bytes(self, data):
        self.sock.sendall(data)

    def _fill(self):
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionError("connection closed by the server")
        self.buf += chunk

    def _line(self):
        while True:
            i = self.buf.find(b"\r\n")
            if i >= 0:
                line, self.buf = self.buf[:i], self.buf[i + 2:]
                self.consumed.append(line + b"\r\n")
                return line
            self._fill()

    def _exact(self, n):
        while len(self.buf) < n + 2:
            self._fill()
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        self.consumed.append(data + b"\r\n")
        return data

    def _parse(self):
        line = self._line()
        t, rest = line[:1], line[1:]
        if t == b"+":
            return Status(rest)
        if t == b"-":
            return Err(rest.decode("utf-8", "replace"))
        if t in (b":", b"("):
            return int(rest)
        if t == b"$":
            n = int(rest)
            return None if n < 0 else self._exact(n)
        if t == b"=":
            return self._exact(int(rest))[4:]
        if t in (b"*", b"~", b">"):
            n = int(rest)
            return None if n < 0 else [self._parse() for _ in range(n)]
        if t == b"%":
            n = int(rest)
            m = RMap()
            for _ in range(n):
                k = self._parse()
                m.append((k, self._parse()))
            return m
        if t == b"|":
            for _ in range(int(rest) * 2):
                self._parse()
            return self._parse()
        if t == b"_":
            return NULL3
        if t == b",":
            return float(rest)
        if t == b"#":
            return rest == b"t"
        raise ValueError("unexpected RESP type byte in %r" % line)

    def read(self):
        self.consumed = []
        return self._parse()

    def read_bytes(self):
        """One reply, as the exact bytes on the wire."""
        self.read()
        return b"".join(self.consumed)

    def call(self, *args):
        self.send(*args)
        return self.read()

    def pipeline(self, commands):
        """Sends every command (tuples of arguments) in one write, then reads their replies."""
        self.sock.sendall(b"".join(encode(list(c)) for c in commands))
        return [self.read() for _ in commands]

    def call_bytes(self, *args):
        self.send(*args)
        return self.read_bytes()
