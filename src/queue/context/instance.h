// What the loop threads of one instance share in the queue room (built by NewInstance,
// queue/service.h): what a command reads of the whole instance through CommandContext::instance,
// and net reads for INFO and /metrics.
#pragma once

#include <cstdint>
#include <string_view>

namespace deferq::queue {

class LatenessStats;
class QueueStatsBook;

// What the loop threads of one instance share in the queue room. Built once, before the loops
// start; every loop thread may use it.
class Instance {
 public:
  virtual ~Instance() = default;
  // Consumers blocked anywhere in this instance (one per queue a consumer waits on).
  virtual int64_t blocked() const = 0;
  virtual LatenessStats& lateness() = 0;
  virtual QueueStatsBook& queue_stats() = 0;
  // True when `password` equals the admin password read at startup from the environment
  // variable auth.admin_password_env (always false when that variable is unset or empty).
  virtual bool CheckAdminPassword(std::string_view password) const = 0;
  // Whether this instance holds the pump ownership of the first pool now (/metrics, INFO).
  virtual bool pump_owner() const = 0;
  // Shards of sharded queues whose pumping this instance owns now (INFO stats pump_shards).
  virtual int64_t pumped_shards() const = 0;
  // Failed AUTHs since the start, every thread (queue/commands/auth.h).
  virtual uint64_t auth_failures() const = 0;
};

}  // namespace deferq::queue
