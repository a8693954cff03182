#!/usr/bin/python3
"""Integration tests for deferq's job commands (docs/commands.md): every part of the job suite.

    /usr/bin/python3 tests/jobs/test_jobs.py /path/to/deferq [unittest args, e.g. -k ttl]

Starts its own redis-server and deferq on free loopback ports (127.0.0.1 only), drives every job
command through redis-py (RESP2) and a small raw RESP client (exact bytes, error texts, RESP3),
and stops both servers at the end. Ends with the line "N passed, M failed" and exits non-zero when
any test failed.

The tests live in the parts, one concern each, sharing jobcase.py (servers, JobTestCase):
    test_publish.py    PUBLISH and its options; argument errors of every job command
    test_consume.py    CONSUME, blocking and wake-ups; ACK / NACK / TOUCH / CANCEL / JOB / PEEK
    test_queues.py     QSTAT / QUEUES / PURGE / DEADLETTER; request/reply, EVERY, BACKOFF
    test_shapes.py     binary payloads, exact RESP2/RESP3 reply shapes, pipelining, hash tags
    test_instances.py  two deferq instances on one Redis; pool failures
    test_multi.py      MULTI / EXEC / DISCARD / WATCH
    test_validation.py repeated options, "-0", invalid job ids, DEADLETTER HELP
    test_info_queues.py INFO queues keys through redis-py's info()
    test_resp_parity.py every command's RESP2 and RESP3 replies against each other
    test_shards.py     sharded queues: placement, CONSUME over the shards, aggregated replies
    test_waiting.py    consumers waiting on many queues: order, fairness, known-empty queues
    test_calls.py      CALL, WAITJOB, ACK ... RESULT, PUBLISH ... RETAIN across two instances

Needs redis-py (Debian's python3-redis), hence /usr/bin/python3.
"""

import sys

from jobcase import main
from test_calls import CallTests  # noqa: F401
from test_consume import ConsumeTests, LifecycleTests  # noqa: F401
from test_instances import MultiInstanceTests, PoolFailureTests  # noqa: F401
from test_info_queues import InfoQueuesTests  # noqa: F401
from test_multi import TransactionFaultTests, TransactionTests  # noqa: F401
from test_pipeline import PipelineTests  # noqa: F401
from test_publish import ArgumentErrorTests, PublishTests  # noqa: F401
from test_queues import PatternTests, QueueTests  # noqa: F401
from test_resp_parity import RespParityTests  # noqa: F401
from test_shapes import ShapeTests  # noqa: F401
from test_shards import ShardTests  # noqa: F401
from test_validation import ValidationTests  # noqa: F401
from test_waiting import WideConsumeTests  # noqa: F401

if __name__ == "__main__":
    sys.exit(main(__name__))
