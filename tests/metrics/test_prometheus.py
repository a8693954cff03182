#!/usr/bin/python3
"""A real Prometheus (Debian's package) scraping two deferq instances on loopback (issue 11, done
when 2): the job counters and a delivery-lateness quantile read back through its HTTP query API,
and every PromQL expression of docs/grafana-dashboard.json evaluated against it without error.

    /usr/bin/python3 tests/metrics/test_prometheus.py /path/to/deferq [unittest options]
"""

import json
import math
import os
import sys
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))

from dqtest import procs, runner  # noqa: E402
from dqtest.resp import Raw  # noqa: E402

DEFERQ = None
DASHBOARD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs",
                         "grafana-dashboard.json")
# Grafana's variables as the dashboard uses them, given the values Grafana would: "All" for the
# multi-value variables, and a range covering several 1 s scrapes for $__rate_interval.
GRAFANA_VARS = {"$__rate_interval": "1m", "$namespace": ".*", "$queue": ".*"}


def dashboard_exprs():
    """Every PromQL expression of the dashboard's panels (targets[].expr), with its title."""
    with open(DASHBOARD) as f:
        dash = json.load(f)
    out = []

    def walk(panels):
        for p in panels:
            for t in p.get("targets", []):
                out.append((p["title"], t["expr"]))
            walk(p.get("panels", []))
    walk(dash["panels"])
    return out


def substitute(expr):
    for var, val in GRAFANA_VARS.items():
        expr = expr.replace(var, val)
    return expr


class PrometheusTests(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.tmp = procs.make_tmpdir("prometheus")
        cls.redis = procs.Redis(cls.tmp).start()
        cls.dqs, targets = [], []
        for name in ("a", "b"):
            mport = procs.free_port()
            targets.append("127.0.0.1:%d" % mport)
            cls.dqs.append(procs.Deferq(
                DEFERQ, cls.tmp, cls.redis.port, name="prom-" + name,
                config_text='[server]\nmetrics_listen = "127.0.0.1:%d"\n' % mport).start())
        cls.prom = procs.Prometheus(cls.tmp, targets)
        try:
            cls.prom.start(attempts=2)
        except Exception:
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.prom.stop()
        for dq in cls.dqs:
            dq.stop()
        cls.redis.stop()
        procs.remove_tmpdir(cls.tmp)

    def wait_value(self, expr, ok, bound=20.0):
        """Polls the query API until the single result's value satisfies ok(v); returns v."""
        deadline = time.time() + bound
        last = None
        while time.time() < deadline:
            last = self.prom.query(expr)
            self.assertEqual(last["status"], "success", last)
            res = last["data"]["result"]
            if len(res) == 1:
                v = float(res[0]["value"][1])
                if ok(v):
                    return v
            time.sleep(0.5)
        self.fail("%s never satisfied the check; last answer %r" % (expr, last))

    def test_counters_and_a_lateness_quantile_read_back_and_every_dashboard_query_evaluates(self):
        # Both instances are scraped.
        self.wait_value('count(up{job="deferq"} == 1)', lambda v: v == 2)
        a, b = (Raw(dq.port) for dq in self.dqs)
        self.addCleanup(a.close)
        self.addCleanup(b.close)
        q = "prom-%d" % os.getpid()
        sel = 'namespace="default",queue="%s"' % q

        def delayed_batch(n):
            for i in range(n):
                (a if i % 2 else b).call("PUBLISH", q, "d", "PDELAY", "150")
            got = 0
            deadline = time.time() + 10
            while got < n and time.time() < deadline:
                jobs = a.call("CONSUME", q, "COUNT", str(n), "TIMEOUT", "1") or []
                got += len(jobs)
                if jobs:
                    a.call("ACK", q, *[j[1] for j in jobs])
            self.assertEqual(got, n)

        # A first batch creates the lateness series; once Prometheus has it, a second batch makes
        # it grow, so rate() over the buckets has something to show.
        delayed_batch(5)
        self.wait_value("sum(deferq_delivery_lateness_seconds_count{%s})" % sel, lambda v: v == 5)
        delayed_batch(20)
        published = self.wait_value("sum(deferq_jobs_published_total{%s})" % sel,
                                    lambda v: v == 25)
        self.assertEqual(published, 25)
        self.assertEqual(self.wait_value("sum(deferq_jobs_acked_total{%s})" % sel,
                                         lambda v: v == 25), 25)
        p99 = self.wait_value(
            "histogram_quantile(0.99, sum by (le) "
            "(rate(deferq_delivery_lateness_seconds_bucket{%s}[1m])))" % sel,
            lambda v: not math.isnan(v))
        # Jobs become ready within milliseconds of their due time; the quantile interpolates
        # inside a bucket, so it is bounded by the bucket bounds, far below a second.
        self.assertGreaterEqual(p99, 0.0)
        self.assertLess(p99, 1.0)

        exprs = dashboard_exprs()
        self.assertGreaterEqual(len(exprs), 20)
        with_data = 0
        for title, expr in exprs:
            self.assertNotIn("$", substitute(expr), "unknown Grafana variable in %r" % title)
            answer = self.prom.query(substitute(expr))
            self.assertEqual(answer["status"], "success", "%s: %s -> %r" % (title, expr, answer))
            with_data += bool(answer["data"]["result"])
        # The queries name real metrics: most of them have data after this traffic.
        self.assertGreater(with_data, len(exprs) // 2)


if __name__ == "__main__":
    sys.exit(runner.main_with_deferq("__main__", sys.argv,
                                     "%s /path/to/deferq [unittest options]" % sys.argv[0]))
