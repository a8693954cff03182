"""The shared harness of deferq's Python test suites (tests/*/test_*.py).

    resp    RESP encoder and a raw client: exact bytes on the wire, full error texts, RESP3 types
    procs   free loopback ports, redis-server and deferq processes (start, wait for PONG and for
            the pool, stop, SIGKILL, log tails), temporary directories
    runner  runs a unittest suite and ends with the line "N passed, M failed"
    ids     generated job ids (Crockford base32, docs/commands.md)
    cluster a real Redis Cluster on loopback (masters + replicas), resharding, master failover

A suite finds this package through its own location, so it runs from any working directory:

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
    from dqtest import procs, resp, runner

Needs nothing beyond the standard library, except procs.Redis.client / procs.Deferq.client, which
return redis-py clients (Debian's python3-redis: run the suites with /usr/bin/python3).
"""
