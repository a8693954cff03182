"""What the process-level suites read of a deferq and wait for: its log, the fields of a pool in
INFO pools, QSTAT as a dict, and a bounded wait for a condition."""

import time


def read_log(server):
    """A server's whole log file, as text."""
    with open(server.log, "rb") as f:
        return f.read().decode("utf-8", "replace")


def wait_for(what, fn, timeout=10.0, step=0.05):
    """Calls fn until it returns something true; that value, or AssertionError after timeout."""
    deadline = time.monotonic() + timeout
    while True:
        got = fn()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for " + what)
        time.sleep(step)


def info_pool(raw, pool="default"):
    """INFO pools of deferq (a Raw connection) as a dict of one pool's fields."""
    text = raw.call("INFO", "pools").decode()
    for line in text.splitlines():
        if line.startswith("pool_%s:" % pool):
            return dict(kv.split("=", 1) for kv in line.split(":", 1)[1].split(","))
    raise AssertionError("no pool_%s in INFO pools:\n%s" % (pool, text))


def qstat(raw, queue):
    """QSTAT of `queue` (a Raw connection) as {field (bytes): value}."""
    reply = raw.call("QSTAT", queue)
    return dict(zip(reply[0::2], reply[1::2]))
