// One queue's job figures as the storage scripts keep them in Redis (qstat.lua's order), and
// each figure's name wherever deferq shows it: INFO queues, QSTAT, INFO stats' fleet totals and
// /metrics. One table, so a figure is named in one place (docs/metrics.md lists them).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace deferq::queue {

// One queue's figures, in the order qstat.lua answers them.
struct QueueFigures {
  enum Field {
    kReady,
    kDelayed,
    kLeased,
    kDead,
    kPublished,
    kConsumed,
    kAcked,
    kExpired,
    kDeadTotal,
    kNacked,
    kRespawned,
    kCancelled,
    kPaused,       // 1 while the queue is paused (QPAUSE); a state, not a counter
    kUndelivered,  // leases given back undelivered (nack "undo"), also in kConsumed
    kSchedules,    // recurring jobs (EVERY, CRON) the queue holds; a gauge
    kFields
  };
  std::array<int64_t, kFields> v{};
  // No job in any state (and not paused): what is left are counters, kept for the retention.
  bool finished() const {
    return v[kReady] == 0 && v[kDelayed] == 0 && v[kLeased] == 0 && v[kDead] == 0 &&
           v[kPaused] == 0;
  }
  bool operator==(const QueueFigures&) const = default;
  bool empty() const {
    for (int64_t x : v) {
      if (x != 0) return false;
    }
    return true;
  }
};

// A figure's names: `info` in INFO queues' lines (and the `state` label of deferq_queue_jobs for
// the four states), `qstat` in QSTAT's reply, `total` in INFO stats (the fleet's sum), `metric`
// and `help` on /metrics; nullptr where the figure is not shown there.
struct FigureName {
  QueueFigures::Field field;
  const char* info;
  const char* qstat;
  const char* total;
  const char* metric;
  const char* help;
};

// In the order INFO queues writes them; INFO stats and /metrics keep this order too.
inline constexpr FigureName kFigureNames[] = {
    {QueueFigures::kReady, "ready", "ready", nullptr, nullptr, nullptr},
    {QueueFigures::kDelayed, "delayed", "delayed", nullptr, nullptr, nullptr},
    {QueueFigures::kLeased, "leased", "leased", nullptr, nullptr, nullptr},
    {QueueFigures::kDead, "dead", "dead", nullptr, nullptr, nullptr},
    {QueueFigures::kPublished, "published", "published_total", "total_jobs_published",
     "deferq_jobs_published_total", "Jobs published (new or replaced)."},
    {QueueFigures::kConsumed, "consumed", "consumed_total", "total_jobs_consumed",
     "deferq_jobs_consumed_total",
     "Leases handed out by CONSUME (deliveries plus deferq_jobs_undelivered_total)."},
    {QueueFigures::kAcked, "acked", "acked_total", "total_jobs_acked", "deferq_jobs_acked_total",
     "Jobs finished by ACK."},
    {QueueFigures::kNacked, "nacked", nullptr, "total_jobs_nacked", "deferq_jobs_nacked_total",
     "Leased jobs given back by NACK."},
    {QueueFigures::kCancelled, "cancelled", nullptr, "total_jobs_cancelled",
     "deferq_jobs_cancelled_total", "Jobs removed by CANCEL."},
    {QueueFigures::kExpired, "expired", "expired_total", "total_jobs_expired",
     "deferq_jobs_expired_total", "Jobs removed because their ttl passed."},
    {QueueFigures::kDeadTotal, "dead_total", "dead_total", "total_jobs_dead",
     "deferq_jobs_dead_total", "Jobs moved to the dead letter (out of tries)."},
    {QueueFigures::kRespawned, "respawned", nullptr, "total_jobs_respawned",
     "deferq_jobs_respawned_total", "Dead jobs moved back to ready by RESPAWN."},
    {QueueFigures::kPaused, "paused", "paused", nullptr, nullptr, nullptr},
    {QueueFigures::kUndelivered, "undelivered", nullptr, "total_jobs_undelivered",
     "deferq_jobs_undelivered_total",
     "Leases given back undelivered: their blocked client left before the reply."},
    {QueueFigures::kSchedules, "schedules", "schedules", nullptr, nullptr, nullptr},
};
static_assert(std::size(kFigureNames) == QueueFigures::kFields, "every figure has its names");

constexpr const FigureName& NamesOf(QueueFigures::Field field) {
  for (const FigureName& n : kFigureNames) {
    if (n.field == field) return n;
  }
  return kFigureNames[0];  // unreachable: the static_assert above and the test cover every field
}

}  // namespace deferq::queue
