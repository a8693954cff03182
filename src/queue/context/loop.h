// What every part of the queue room's state on one loop thread reads: the config, the thread's
// place among the loops, its upstream pool clients and the namespace directory that picks one,
// the id generator, where deferred replies go, the other loops (Peers), and the loop's clock.
// Worker (queue/worker.h) is one, holding the parts that act on it (Waiters, Pump and the
// others); those parts and the command handlers see only this, so nothing but the service that
// builds the Worker includes it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "config/config.h"
#include "persist/pool.h"
#include "queue/context/client_port.h"
#include "queue/model/instance_flags.h"
#include "queue/model/job_id.h"
#include "queue/tenancy/namespaces.h"

namespace deferq::queue {

class Peers;         // queue/context/server_context.h
class Waiters;       // queue/delivery/waiters.h
class Pump;          // queue/delivery/pump.h
class Calls;         // queue/delivery/calls.h
class RateLimiter;   // queue/tenancy/rate_limiter.h
class AuthThrottle;  // queue/commands/auth_throttle.h

class Loop {
 public:
  Loop(const Config& config, ClientPort& port, Peers& peers, InstanceFlags& flags, int thread_index,
       int threads)
      : config_(config),
        port_(port),
        peers_(peers),
        flags_(flags),
        thread_index_(thread_index),
        threads_(threads) {}
  Loop(const Loop&) = delete;
  Loop& operator=(const Loop&) = delete;

  // The parts a LoopNote (queue/context/server_context.h) reaches on the thread that runs it; the
  // Worker holding them is the Loop.
  virtual Waiters& waiters() = 0;
  virtual Pump& pump() = 0;
  virtual Calls& calls() = 0;
  // Per-namespace rate limits and the failed AUTHs' delayed replies, which commands use.
  virtual RateLimiter& rate_limiter() = 0;
  virtual AuthThrottle& auth_throttle() = 0;

  // The pool a namespace's queues live in (queue/tenancy/namespaces.h).
  persist::PoolClient* PoolFor(const std::string& ns) { return namespaces_.PoolFor(ns); }
  NamespaceDirectory& namespaces() { return namespaces_; }
  const std::vector<std::unique_ptr<persist::PoolClient>>& pools() const { return pools_; }

  const Config& config() const { return config_; }
  IdGenerator& ids() { return ids_; }
  ClientPort& port() { return port_; }
  Peers& peers() { return peers_; }
  InstanceFlags& flags() { return flags_; }
  int thread_index() const { return thread_index_; }
  int threads() const { return threads_; }
  int64_t now_ms() const { return clock_.now_ms; }    // monotonic
  int64_t wall_ms() const { return clock_.wall_ms; }  // unix ms
  void SetClock(int64_t now_ms, int64_t wall_ms) { clock_ = {now_ms, wall_ms}; }

 protected:
  ~Loop() = default;

  const Config& config_;
  ClientPort& port_;
  Peers& peers_;
  InstanceFlags& flags_;
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
};

}  // namespace deferq::queue
