#!/usr/bin/python3
"""A real Prometheus (Debian's package) scraping two deferq instances on loopback (issue 11, done
when 2): the job counters and a delivery-lateness quantile read back through its HTTP query API,
and every PromQL expression of docs/grafana-dashboard.json evaluated against it without error;
every template variable of the dashboard translated to the Prometheus API calls Grafana makes
for it (`label_values(selector, label)` -> /api/v1/label/<label>/values?match[]=selector) and
answered with exactly the label values the instances export. A variable of any other kind or
query form fails the test until the test learns it.

    /usr/bin/python3 tests/metrics/test_prometheus.py /path/to/deferq [unittest options]
"""

import json
import math
import os
import re
import sys
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))

from dqtest import procs, promtext, runner  # noqa: E402
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


# Grafana's Prometheus variable queries: label_values(selector, label) is a Grafana function, not
# PromQL; Grafana answers it from /api/v1/label/<label>/values?match[]=<selector>. The other forms
# (label_values(label), label_names(), metrics(re), query_result(expr)) are not understood here.
LABEL_VALUES = re.compile(
    r"^\s*label_values\(\s*(?P<selector>.+),\s*(?P<label>[a-zA-Z_]\w*)\s*\)\s*$", re.S)
SELECTOR = re.compile(r"^\s*(?P<metric>[a-zA-Z_:][\w:]*)\s*(?:\{(?P<matchers>.*)\})?\s*$", re.S)
MATCHER = re.compile(r'\s*([a-zA-Z_]\w*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*(?:,|$)')
VARIABLE = re.compile(r"\$(?:\{(\w+)\}|(\w+))")


def dashboard_variables():
    with open(DASHBOARD) as f:
        return json.load(f).get("templating", {}).get("list", [])


def parse_selector(selector):
    """(metric, [(label, op, value)]) of a series selector, or None when it is not one."""
    m = SELECTOR.match(selector)
    if not m:
        return None
    text, matchers, pos = m.group("matchers") or "", [], 0
    while pos < len(text.rstrip()):
        mm = MATCHER.match(text, pos)
        if not mm:
            return None
        matchers.append((mm.group(1), mm.group(2), mm.group(3).encode().decode("unicode_escape")))
        pos = mm.end()
    return m.group("metric"), matchers


def selects(parsed, name, labels):
    """PromQL's matching of one sample: the metric name and every matcher (regexes anchored)."""
    metric, matchers = parsed
    if name != metric:
        return False
    for label, op, val in matchers:
        have = labels.get(label, "")
        ok = {"=": have == val, "!=": have != val,
              "=~": re.fullmatch(val, have) is not None,
              "!~": re.fullmatch(val, have) is None}[op]
        if not ok:
            return False
    return True


def variants(selector, known):
    """The selector with each variable it names replaced as Grafana would: every one by its
    "All" value, then one at a time by each single value of that variable (regex-escaped, then
    escaped again for the PromQL string it lands in)."""
    names = [a or b for a, b in VARIABLE.findall(selector)]
    for n in names:
        assert n in known, "variable $%s is not defined before its use in %r" % (n, selector)

    def fill(chosen):
        return VARIABLE.sub(lambda m: chosen[m.group(1) or m.group(2)], selector)
    everything = {n: known[n][0] for n in names}
    out = [fill(everything)]
    for n in dict.fromkeys(names):
        for v in known[n][1]:
            out.append(fill(dict(everything, **{n: re.escape(v).replace("\\", "\\\\")})))
    return out


class PrometheusTests(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.tmp = procs.make_tmpdir("prometheus")
        cls.redis = procs.Redis(cls.tmp).start()
        cls.dqs, targets, cls.mports = [], [], []
        for name in ("a", "b"):
            mport = procs.free_port()
            cls.mports.append(mport)
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
                # Due once the consumer below waits: the pump times each move (lateness).
                (a if i % 2 else b).call("PUBLISH", q, "d", "PDELAY", "400")
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

    def exported_label_values(self, parsed, label):
        """The values of `label` over the samples both instances export now that `parsed`
        selects: what Grafana's variable should offer."""
        out = set()
        for mport in self.mports:
            status, _, body = promtext.get(mport, "/metrics")
            self.assertEqual(status, 200)
            for (name, labels), _v in promtext.parse(body.decode()).items():
                labels = dict(labels)
                if label in labels and selects(parsed, name, labels):
                    out.add(labels[label])
        return out

    def label_values(self, selector, label, bound=20.0):
        """Grafana's label_values(selector, label) through the Prometheus API, once it equals
        the values the instances export (Prometheus scrapes every second); returns them."""
        parsed = parse_selector(selector)
        self.assertIsNotNone(parsed, "%r is not a series selector this test understands"
                             % selector)
        deadline = time.time() + bound
        while True:
            answer = self.prom.api("/api/v1/label/%s/values" % label, [("match[]", selector)])
            self.assertEqual(answer.get("status"), "success", "%s: %r" % (selector, answer))
            got, want = set(answer["data"]), self.exported_label_values(parsed, label)
            if (got == want and want) or time.time() > deadline:
                break
            time.sleep(0.5)
        self.assertTrue(want, "label_values(%s, %s): deferq exports no such series"
                        % (selector, label))
        self.assertEqual(got, want, "label_values(%s, %s)" % (selector, label))
        return sorted(got)

    def test_every_dashboard_variable_query_answers_the_label_values_the_instances_export(self):
        a = Raw(self.dqs[0].port)
        self.addCleanup(a.close)
        q = "var-%d" % os.getpid()
        a.call("PUBLISH", q, "x")
        # One series per state once the pump owner's figures have the queue.
        self.wait_value('count(deferq_queue_jobs{namespace="default",queue="%s"})' % q,
                        lambda v: v == 4)
        known = {}  # variable name -> (its "All" value, its values)
        queries = 0
        for var in dashboard_variables():
            name, kind = var.get("name"), var.get("type")
            if kind == "datasource":
                self.assertEqual(var.get("query"), "prometheus", "variable %s" % name)
                continue
            self.assertEqual(kind, "query", "variable %s: type %r is not understood by this "
                             "test" % (name, kind))
            self.assertFalse(var.get("regex"), "variable %s: a regex filter is not understood "
                             "by this test" % name)
            query = var.get("query")
            if isinstance(query, dict):
                query = query.get("query")
            m = LABEL_VALUES.match(query or "")
            self.assertIsNotNone(m, "variable %s: query %r is not label_values(selector, "
                                 "label), the one form this test understands" % (name, query))
            selector, label = m.group("selector"), m.group("label")
            values = None
            for concrete in variants(selector, known):
                got = self.label_values(concrete, label)
                values = got if values is None else values  # the first variant: "All"
            queries += 1
            all_value = var.get("allValue") or "(%s)" % "|".join(re.escape(v) for v in values)
            known[name] = (all_value, values)
        self.assertGreaterEqual(queries, 2)
        # The dashboard's two filters offer the namespace and the queue just used.
        self.assertIn("default", known["namespace"][1])
        self.assertIn(q, known["queue"][1])


if __name__ == "__main__":
    sys.exit(runner.main_with_deferq("__main__", sys.argv,
                                     "%s /path/to/deferq [unittest options]" % sys.argv[0]))
