#include "net/metrics_exporter.h"

#include <algorithm>
#include <ctime>
#include <string_view>
#include <utility>
#include <vector>

#include "base/clock.h"
#include "config/build_info.h"
#include "net/loop_host.h"
#include "net/metrics_text.h"
#include "queue/model/queue_figures.h"
#include "queue/model/queue_name.h"
#include "queue/stats/lateness.h"
#include "queue/stats/queue_stats.h"

namespace deferq::net {

using base::RealtimeMs;

namespace {

// Lateness buckets in ms. LatenessHistogram counts whole milliseconds exactly up to 16 ms, then
// in 8 sub-buckets per power of two; every bound here is the upper end of one of its buckets
// (2^k - 1 from 31 on), so the cumulative counts are exact, not interpolated.
constexpr int64_t kLatenessBoundsMs[] = {
    0, 1, 2, 3, 5, 7, 10, 15, 31, 63, 127, 255, 511, 1023, 2047, 4095, 8191, 16383, 32767, 65535};

void WriteProcess(LoopHost& server, MetricsText& m) {
  const queue::ServerStatsSnapshot s = server.Stats();
  m.Family("deferq_build_info", "gauge", "Always 1; the version of this deferq.");
  m.Sample("deferq_build_info", {{"version", DEFERQ_VERSION}}, uint64_t{1});
  m.Family("deferq_start_time_seconds", "gauge", "Unix time this process started serving.");
  m.Sample("deferq_start_time_seconds", {}, static_cast<double>(server.start_time_ms()) / 1000.0);
  m.Family("deferq_process_resident_memory_bytes", "gauge", "Resident set size of the process.");
  m.Sample("deferq_process_resident_memory_bytes", {}, ResidentBytes());
  m.Family("deferq_connected_clients", "gauge", "RESP client connections open now.");
  m.Sample("deferq_connected_clients", {}, s.connected_clients);
  m.Family("deferq_blocked_clients", "gauge", "Clients blocked in CONSUME, CALL or WAITJOB now.");
  m.Sample("deferq_blocked_clients", {}, s.blocked_clients);
  m.Family("deferq_connections_received_total", "counter", "RESP connections accepted.");
  m.Sample("deferq_connections_received_total", {}, s.total_connections_received);
  m.Family("deferq_rejected_connections_total", "counter",
           "RESP connections refused because server.max_clients were connected.");
  m.Sample("deferq_rejected_connections_total", {}, s.rejected_connections);
  m.Family("deferq_auth_failures_total", "counter",
           "AUTH (or HELLO AUTH) with a wrong token or admin password; each reply is delayed more "
           "the more its connection and address failed.");
  m.Sample("deferq_auth_failures_total", {}, s.auth_failures);
  m.Family("deferq_unauthenticated_disconnections_total", "counter",
           "Connections closed for not authenticating (auth.required): within auth.timeout "
           "(reason timeout), or the oldest when unauthenticated ones held a quarter of "
           "max_clients (reason evicted).");
  m.Sample("deferq_unauthenticated_disconnections_total", {{"reason", "timeout"}},
           s.auth_timeout_disconnections);
  m.Sample("deferq_unauthenticated_disconnections_total", {{"reason", "evicted"}},
           s.unauthenticated_evictions);
  m.Family("deferq_protocol_errors_total", "counter",
           "RESP protocol errors (the connection was closed after the error reply).");
  m.Sample("deferq_protocol_errors_total", {}, s.protocol_errors);
  m.Family("deferq_output_limit_disconnections_total", "counter",
           "Clients dropped for exceeding server.max_output_buffer.");
  m.Sample("deferq_output_limit_disconnections_total", {}, s.output_limit_disconnections);
  m.Family("deferq_net_input_bytes_total", "counter", "Bytes read from RESP clients.");
  m.Sample("deferq_net_input_bytes_total", {}, s.total_net_input_bytes);
  m.Family("deferq_net_output_bytes_total", "counter", "Bytes written to RESP clients.");
  m.Sample("deferq_net_output_bytes_total", {}, s.total_net_output_bytes);
  m.Family("deferq_wheel_timers", "gauge", "Pump timers pending in the timing wheels.");
  m.Sample("deferq_wheel_timers", {}, server.WheelTimers());
}

void WriteCommands(LoopHost& server, MetricsText& m) {
  const CommandMetrics& cm = server.command_metrics();
  std::vector<base::Histogram::Snapshot> snaps;
  for (size_t i = 0; i < cm.size(); ++i) snaps.push_back(cm.duration(i));
  // Commands never called are left out: they would only add zero series.
  m.Family("deferq_command_calls_total", "counter", "Commands run, by command.");
  for (size_t i = 0; i < cm.size(); ++i) {
    if (snaps[i].count > 0)
      m.Sample("deferq_command_calls_total", {{"command", cm.name(i)}}, snaps[i].count);
  }
  m.Family("deferq_command_errors_total", "counter", "Commands answered with an error reply.");
  for (size_t i = 0; i < cm.size(); ++i) {
    if (snaps[i].count > 0)
      m.Sample("deferq_command_errors_total", {{"command", cm.name(i)}}, cm.errors(i));
  }
  m.Family("deferq_command_duration_seconds", "histogram",
           "From dispatch to a complete reply, upstream round trips included.");
  for (size_t i = 0; i < cm.size(); ++i) {
    if (snaps[i].count == 0) continue;
    m.Histogram("deferq_command_duration_seconds", {{"command", cm.name(i)}},
                base::LatencyBoundsUs(), 1e-6, snaps[i].buckets,
                static_cast<double>(snaps[i].sum_us) / 1e6);
  }
}

void WritePools(LoopHost& server, MetricsText& m) {
  const auto& pools = server.pools();
  m.Family("deferq_pool_up", "gauge", "1 while the pool has at least one connection up, else 0.");
  for (const auto& p : pools) {
    const int up = p.stats->connections_up.load(std::memory_order_relaxed);
    m.Sample("deferq_pool_up", {{"pool", p.name}}, uint64_t{up > 0 ? 1u : 0u});
  }
  m.Family("deferq_pool_connections_up", "gauge", "Upstream connections of the pool that are up.");
  for (const auto& p : pools) {
    const int up = p.stats->connections_up.load(std::memory_order_relaxed);
    m.Sample("deferq_pool_connections_up", {{"pool", p.name}},
             static_cast<uint64_t>(up < 0 ? 0 : up));
  }
  m.Family("deferq_pool_inflight_requests", "gauge",
           "Requests sent to the pool and not answered yet.");
  for (const auto& p : pools) {
    const int64_t n = p.stats->inflight.load(std::memory_order_relaxed);
    m.Sample("deferq_pool_inflight_requests", {{"pool", p.name}},
             static_cast<uint64_t>(n < 0 ? 0 : n));
  }
  m.Family("deferq_pool_requests_total", "counter", "Requests sent to the pool.");
  for (const auto& p : pools) {
    m.Sample("deferq_pool_requests_total", {{"pool", p.name}},
             p.stats->requests.load(std::memory_order_relaxed));
  }
  m.Family("deferq_pool_failures_total", "counter",
           "Requests that never reached Redis (pool down or refused; answered TRYAGAIN).");
  for (const auto& p : pools) {
    m.Sample("deferq_pool_failures_total", {{"pool", p.name}},
             p.stats->failures.load(std::memory_order_relaxed));
  }
  m.Family("deferq_pool_timeouts_total", "counter",
           "Requests sent that got no reply in time (answered TIMEOUT).");
  for (const auto& p : pools) {
    m.Sample("deferq_pool_timeouts_total", {{"pool", p.name}},
             p.stats->timeouts.load(std::memory_order_relaxed));
  }
  m.Family("deferq_pool_unreplicated_total", "counter",
           "Writes applied on the master that WAIT did not confirm on wait_replicas replicas "
           "(answered NOREPLICAS).");
  for (const auto& p : pools) {
    m.Sample("deferq_pool_unreplicated_total", {{"pool", p.name}},
             p.stats->unreplicated.load(std::memory_order_relaxed));
  }
  m.Family("deferq_pool_reconnects_total", "counter",
           "Upstream connections that came up again after having been up.");
  for (const auto& p : pools) {
    m.Sample("deferq_pool_reconnects_total", {{"pool", p.name}},
             p.stats->reconnects.load(std::memory_order_relaxed));
  }
  m.Family("deferq_pool_writable", "gauge",
           "0 while the pool refuses writes: an evicting maxmemory-policy or an eviction "
           "(TRYAGAIN), Redis at maxmemory (OOM for publishes) or unable to persist (MISCONF); "
           "else 1.");
  for (const auto& p : pools) {
    const bool refusing = p.stats->refusing_writes.load(std::memory_order_relaxed) > 0 ||
                          p.stats->out_of_memory.load(std::memory_order_relaxed) ||
                          p.stats->cannot_persist.load(std::memory_order_relaxed);
    m.Sample("deferq_pool_writable", {{"pool", p.name}}, uint64_t{refusing ? 0u : 1u});
  }
  m.Family("deferq_pool_refused_writes_total", "counter",
           "Writes the pool refused, by cause: evicting (maxmemory-policy not noeviction, or keys "
           "evicted; answered TRYAGAIN), oom (maxmemory reached), misconf (Redis cannot persist).");
  for (const auto& p : pools) {
    m.Sample("deferq_pool_refused_writes_total", {{"pool", p.name}, {"reason", "evicting"}},
             p.stats->refused_policy.load(std::memory_order_relaxed));
    m.Sample("deferq_pool_refused_writes_total", {{"pool", p.name}, {"reason", "oom"}},
             p.stats->refused_oom.load(std::memory_order_relaxed));
    m.Sample("deferq_pool_refused_writes_total", {{"pool", p.name}, {"reason", "misconf"}},
             p.stats->refused_misconf.load(std::memory_order_relaxed));
  }
  m.Family("deferq_upstream_duration_seconds", "histogram",
           "From queuing a request to the pool to reading its reply.");
  for (const auto& p : pools) {
    const base::Histogram::Snapshot h = p.stats->latency.Read();
    m.Histogram("deferq_upstream_duration_seconds", {{"pool", p.name}}, base::LatencyBoundsUs(),
                1e-6, h.buckets, static_cast<double>(h.sum_us) / 1e6);
  }
}

// At most server.metrics_max_queues queues have a lateness histogram (queue/stats/lateness.h): the
// records of the others are counted as dropped there.
void WriteLateness(LoopHost& server, MetricsText& m) {
  const auto queues = server.instance().lateness().Snapshot();
  constexpr size_t kBounds = std::size(kLatenessBoundsMs);
  std::vector<uint64_t> counts(kBounds + 1);
  m.Family("deferq_delivery_lateness_seconds", "histogram",
           "How late delayed jobs became ready against their due time (whole milliseconds).");
  for (const auto& [tag, h] : queues) {
    const queue::QueueName name = queue::QueueName::Parse(tag).value_or(queue::QueueName{"", tag});
    const std::string_view ns = name.ns;
    const std::string_view queue = name.queue;
    // Fold the fine histogram into the exported bounds: each of its buckets lands in the first
    // exported bucket whose bound covers its upper end.
    std::fill(counts.begin(), counts.end(), 0);
    size_t out = 0;
    for (int b = 0; b < queue::LatenessHistogram::kBuckets; ++b) {
      const int64_t ub = queue::LatenessHistogram::UpperBound(b);
      while (out < kBounds && kLatenessBoundsMs[out] < ub) ++out;
      counts[out] += h->bucket(b);
    }
    m.Histogram("deferq_delivery_lateness_seconds", {{"namespace", ns}, {"queue", queue}},
                kLatenessBoundsMs, 1e-3, counts, static_cast<double>(h->sum_ms()) / 1e3);
  }
}

// Per-queue job counters and backlog, read from Redis by the poller (queue/stats/queue_stats.h):
// only the pump owner exports them, so a sum over instances counts each job once; a snapshot older
// than kStaleMs (Redis unreachable) is not exported at all.
void WriteJobs(LoopHost& server, MetricsText& m) {
  using F = queue::QueueFigures;
  constexpr int64_t kStaleMs = 5000;  // the "gauges fresh within 5 s"
  const auto snap = server.instance().queue_stats().Load();
  const bool fresh = snap != nullptr && RealtimeMs() - snap->taken_wall_ms < kStaleMs;
  // The ownership as it is now, not as it was at the read: a hand-over moves the series at once.
  // pump_owner() is true only while a renewal of the lease was confirmed within the lease time,
  // so an instance cut off from Redis stops exporting before another can take the lease over.
  const bool exporting = fresh && server.instance().pump_owner();
  m.Family("deferq_queue_stats_exporter", "gauge",
           "1 when this instance exports the per-queue job series (it holds the pump lease, "
           "confirmed within the lease time, and its figures are under 5 s old), else 0.");
  m.Sample("deferq_queue_stats_exporter", {}, uint64_t{exporting ? 1u : 0u});
  m.Family("deferq_queue_stats_age_seconds", "gauge",
           "Age of the per-queue figures read from Redis (-1 before the first read).");
  m.Sample("deferq_queue_stats_age_seconds", {},
           snap == nullptr ? -1.0 : static_cast<double>(RealtimeMs() - snap->taken_wall_ms) / 1e3);
  for (const queue::FigureName& c : queue::kFigureNames) {
    if (c.metric == nullptr) continue;
    m.Family(c.metric, "counter", c.help);
    if (!exporting) continue;
    for (const auto& [tag, f] : snap->queues) {
      const queue::QueueName q = queue::QueueName::Parse(tag).value_or(queue::QueueName{"", tag});
      const std::string_view ns = q.ns, queue = q.queue;
      const int64_t v = f.v[c.field];
      m.Sample(c.metric, {{"namespace", ns}, {"queue", queue}},
               static_cast<uint64_t>(v < 0 ? 0 : v));
    }
  }
  m.Family("deferq_queue_jobs", "gauge", "Jobs in the queue now, by state.");
  if (exporting) {
    static constexpr F::Field kStates[] = {F::kReady, F::kDelayed, F::kLeased, F::kDead};
    for (const auto& [tag, f] : snap->queues) {
      const queue::QueueName q = queue::QueueName::Parse(tag).value_or(queue::QueueName{"", tag});
      const std::string_view ns = q.ns, queue = q.queue;
      for (const F::Field field : kStates) {
        const int64_t v = f.v[field];
        m.Sample("deferq_queue_jobs",
                 {{"namespace", ns}, {"queue", queue}, {"state", queue::NamesOf(field).info}},
                 static_cast<uint64_t>(v < 0 ? 0 : v));
      }
    }
  }
  m.Family("deferq_queue_schedules", "gauge", "Recurring jobs (EVERY, CRON) in the queue now.");
  if (exporting) {
    for (const auto& [tag, f] : snap->queues) {
      const queue::QueueName q = queue::QueueName::Parse(tag).value_or(queue::QueueName{"", tag});
      const int64_t v = f.v[F::kSchedules];
      m.Sample("deferq_queue_schedules", {{"namespace", q.ns}, {"queue", q.queue}},
               static_cast<uint64_t>(v < 0 ? 0 : v));
    }
  }
}

}  // namespace

std::string RenderMetrics(LoopHost& server) {
  std::string out;
  out.reserve(64 * 1024);
  MetricsText m(&out);
  WriteProcess(server, m);
  WriteCommands(server, m);
  WritePools(server, m);
  WriteLateness(server, m);
  WriteJobs(server, m);
  // What the queue cap (server.metrics_max_queues) kept out of the per-queue series, by this
  // instance: lateness records of queues without a histogram; queues a read of the job figures
  // left out, or evicted to make room for more active ones.
  const auto snap = server.instance().queue_stats().Load();
  m.Family("deferq_metrics_queues_dropped_total", "counter",
           "Per-queue figures left out over server.metrics_max_queues: lateness records of "
           "queues without a series; queues a job-figures read left out or evicted.");
  m.Sample("deferq_metrics_queues_dropped_total", {{"series", "lateness"}},
           server.instance().lateness().dropped());
  m.Sample("deferq_metrics_queues_dropped_total", {{"series", "jobs"}},
           snap == nullptr ? uint64_t{0} : snap->dropped_total);
  return out;
}

bool CheckHealth(const LoopHost& server, std::string* reason) {
  bool ok = true;
  for (const auto& p : server.pools()) {
    if (p.stats->connections_up.load(std::memory_order_relaxed) > 0) continue;
    if (!ok) reason->append("; ");
    reason->append("pool '" + p.name + "' has no connection up");
    ok = false;
  }
  return ok;
}

}  // namespace deferq::net
