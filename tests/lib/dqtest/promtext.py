"""The metrics endpoint from a test's side: raw HTTP GETs, the Prometheus text format parsed into
samples, sums over instances as PromQL's sum() computes them, and Debian's promtool."""

import re
import shutil
import socket
import subprocess

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def http(port, raw, timeout=5.0):
    """Sends raw request bytes; returns (status, headers dict, body bytes); status None when the
    server closed without answering."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(raw)
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    if not data:
        return None, {}, b""
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    headers = {k.lower(): v.strip() for k, v in (ln.split(":", 1) for ln in lines[1:])}
    return status, headers, body


def get(port, path):
    return http(port, ("GET %s HTTP/1.1\r\nHost: t\r\n\r\n" % path).encode())


def parse(text):
    """{(name, frozenset(labels)): value} of every sample."""
    samples = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        assert m, "not a sample line: %r" % line
        labels = frozenset(LABEL.findall(m.group(3) or ""))
        samples[(m.group(1), labels)] = float(m.group(4))
    return samples


def value(samples, name, **labels):
    return samples.get((name, frozenset(labels.items())))


def summed(scrapes):
    """The samples of several instances added up per series: what sum without(instance) gives."""
    total = {}
    for s in scrapes:
        for key, v in s.items():
            total[key] = total.get(key, 0.0) + v
    return total


def promtool_check(text):
    """(ok, output) of `promtool check metrics` on the text; promtool is Debian's prometheus."""
    promtool = shutil.which("promtool")
    if promtool is None:
        return False, "promtool missing: run scripts/bootstrap (package prometheus)"
    p = subprocess.run([promtool, "check", "metrics"], input=text.encode(),
                       capture_output=True, timeout=30)
    return p.returncode == 0, p.stdout.decode() + p.stderr.decode()
