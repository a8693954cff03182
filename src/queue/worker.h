// The queue room's state on one loop thread, held together: what every part reads
// (queue/context/loop.h: the pool clients, ids, clock...), the consumers blocked in CONSUME on this
// thread (queue/delivery/waiters.h), the requesters blocked in CALL and WAITJOB
// (queue/delivery/calls.h), the pump that moves due jobs and expired leases to ready for the queues
// this thread owns (queue/delivery/pump.h) and, on loop 0, the shard pumping
// (queue/delivery/shard_pump.h). The holder only wires them; each keeps its own state and sees the
// Loop, not this.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "config/config.h"
#include "persist/pool.h"
#include "queue/commands/auth_throttle.h"
#include "queue/context/client_port.h"
#include "queue/context/loop.h"
#include "queue/context/server_context.h"
#include "queue/delivery/calls.h"
#include "queue/delivery/pump.h"
#include "queue/delivery/shard_pump.h"
#include "queue/delivery/waiters.h"
#include "queue/model/queue_name.h"
#include "queue/stats/lateness.h"
#include "queue/tenancy/rate_limiter.h"

namespace deferq::queue {

class Worker : public Loop {
 public:
  Worker(const Config& config, ClientPort& port, Peers& peers, InstanceFlags& flags,
         WaiterOrder& order, CallDirectory& calls, LatenessStats& lateness,
         ShardPumpTable& shard_pumps, int thread_index, int threads);
  ~Worker();

  void AddPool(std::unique_ptr<persist::PoolClient> pool);

  RateLimiter& rate_limiter() override { return rate_limiter_; }
  AuthThrottle& auth_throttle() override { return auth_throttle_; }

  // Blocked consumers (queue/delivery/waiters.h) and the pump (queue/delivery/pump.h): callers
  // reach them here.
  Waiters& waiters() override { return waiters_; }
  // Requesters blocked in CALL and WAITJOB (queue/delivery/calls.h).
  Calls& calls() override { return calls_; }
  Pump& pump() override { return pump_; }
  const Pump& pump() const { return pump_; }

  // Once per loop tick (100 ms), and when mailbox hints were dropped.
  void Tick(int64_t now_ms, int64_t wall_ms);

 private:
  ShardPumpTable& shard_pumps_;
  Waiters waiters_;
  Calls calls_;
  Pump pump_;
  std::unique_ptr<ShardPumping> shard_pumping_;  // loop 0 only, with sharded queues
  RateLimiter rate_limiter_;    // per-namespace rate limits (queue/tenancy/rate_limiter.h)
  AuthThrottle auth_throttle_;  // failed AUTHs' delayed replies (queue/commands/auth_throttle.h)
};

}  // namespace deferq::queue
