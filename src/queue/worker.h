// The queue room's state on one loop thread, held together: its upstream pool clients, its id
// generator and clock, the consumers blocked in CONSUME on this thread (queue/waiters.h), and
// the pump that moves due jobs and expired leases to ready for the queues this thread owns
// (queue/pump.h). The holder only wires them; each keeps its own state.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "config.h"
#include "persist/pool.h"
#include "queue/auth_throttle.h"
#include "queue/client_port.h"
#include "queue/job_id.h"
#include "queue/lateness.h"
#include "queue/namespaces.h"
#include "queue/pump.h"
#include "queue/queue_name.h"
#include "queue/rate_limiter.h"
#include "queue/server_context.h"
#include "queue/shard_pump.h"
#include "queue/waiters.h"

namespace deferq::queue {

class Worker {
 public:
  Worker(const Config& config, ClientPort& port, Peers& peers, WaiterOrder& order,
         LatenessStats& lateness, ShardPumpTable& shard_pumps, int thread_index, int threads);
  ~Worker();

  void AddPool(std::unique_ptr<persist::PoolClient> pool);
  // The pool a namespace's queues live in (queue/namespaces.h).
  persist::PoolClient* PoolFor(const std::string& ns) { return namespaces_.PoolFor(ns); }
  NamespaceDirectory& namespaces() { return namespaces_; }
  const std::vector<std::unique_ptr<persist::PoolClient>>& pools() const { return pools_; }

  const Config& config() const { return config_; }
  IdGenerator& ids() { return ids_; }
  ClientPort& port() { return port_; }
  Peers& peers() { return peers_; }
  RateLimiter& rate_limiter() { return rate_limiter_; }
  AuthThrottle& auth_throttle() { return auth_throttle_; }
  int thread_index() const { return thread_index_; }
  int threads() const { return threads_; }
  int64_t now_ms() const { return clock_.now_ms; }    // monotonic
  int64_t wall_ms() const { return clock_.wall_ms; }  // unix ms

  // Blocked consumers (queue/waiters.h) and the pump (queue/pump.h): callers reach them here.
  Waiters& waiters() { return waiters_; }
  Pump& pump() { return pump_; }
  const Pump& pump() const { return pump_; }

  // Once per loop tick (100 ms), and when mailbox hints were dropped.
  void Tick(int64_t now_ms, int64_t wall_ms);
  void SetClock(int64_t now_ms, int64_t wall_ms) { clock_ = {now_ms, wall_ms}; }

 private:
  const Config& config_;
  ClientPort& port_;
  Peers& peers_;
  const int thread_index_;
  const int threads_;
  // Declared first among the owned parts, destroyed last: the others' requests hold callbacks.
  std::vector<std::unique_ptr<persist::PoolClient>> pools_;
  NamespaceDirectory namespaces_{config_, pools_};
  IdGenerator ids_;
  // The loop's clock as of its current iteration (set by the event loop, read by every part).
  struct Clock {
    int64_t now_ms = 0;   // monotonic
    int64_t wall_ms = 0;  // unix ms
  } clock_;
  Waiters waiters_;
  Pump pump_;
  RateLimiter rate_limiter_;    // per-namespace rate limits (queue/rate_limiter.h)
  AuthThrottle auth_throttle_;  // failed AUTHs' delayed replies (queue/auth_throttle.h)
};

}  // namespace deferq::queue
