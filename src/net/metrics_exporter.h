// What /metrics and /healthz say: figures gathered from every loop, pool and queue at scrape
// time. Hot paths only bump per-thread relaxed counters (base/histogram.h, LoopStats); all
// aggregation happens here, on the thread serving the scrape. docs/metrics.md lists each metric.
#pragma once

#include <cstddef>
#include <string>

namespace deferq::net {

class LoopHost;

// The Prometheus text (format 0.0.4) of every metric.
std::string RenderMetrics(LoopHost& server);

// True while every pool has at least one connection up; otherwise false with *reason naming
// the pools that have none.
bool CheckHealth(const LoopHost& server, std::string* reason);

}  // namespace deferq::net
