// The queue room as the net room sees it, in the manner of Dragonfly's facade::ServiceInterface:
// net reaches queue through this header (and the value types it names), never through the
// domain objects, which it neither includes nor constructs (docs/architecture.md, "Include
// direction").
//
// API:
//   NewInstance(config)  once per process: what every loop thread of the instance shares in the
//                        queue room (blocked-consumer order, lateness, per-queue figures, the
//                        admin password's digest)
//   NewService(...)      once per loop thread, on that thread: its Worker (pools, Waiters, Pump)
//                        and, on loop 0, the per-queue figures poller
//   Service              what the loop does with it: the clock, ticks, timers, hints from other
//                        loops, departed clients, the stop; and the context its commands run in
//                        (queue::Dispatch, commands.h)
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.h"
#include "persist/pool.h"
#include "proto/reply_writer.h"
#include "queue/commands/commands.h"
#include "queue/context/client_port.h"
#include "queue/context/instance.h"
#include "queue/context/server_context.h"
#include "queue/context/session.h"

namespace deferq::queue {

// Reads the admin password from the environment variable config.admin_password_env, keeps only
// its SHA-256 digest, and wipes and removes the variable (main thread, before the loops start).
std::unique_ptr<Instance> NewInstance(const Config& config);

// One loop thread's queue room.
class Service {
 public:
  virtual ~Service() = default;

  // The context commands of one connection run in (queue::Dispatch), replies deferred through
  // `client`.
  virtual CommandContext Context(Session& session, proto::ReplyWriter& reply,
                                 ClientPort* client) = 0;

  // The loop's clock, as of this iteration (monotonic and unix ms).
  virtual void SetClock(int64_t now_ms, int64_t wall_ms) = 0;
  // Every loop tick (100 ms): the pools, waiters and pump; the per-queue figures unless stopping.
  virtual void OnLoopTick(int64_t now_ms, int64_t wall_ms, bool stopping) = 0;
  // Mailbox hints were dropped: every queue this loop has consumers or pumps on is polled.
  virtual void OnHintsDropped(int64_t now_ms, int64_t wall_ms) = 0;
  // Every loop iteration: the pump timers that fell due; then the number still pending.
  virtual size_t RunTimers() = 0;
  // Monotonic ms of the next pump timer, or -1: the loop's wait timeout.
  virtual int64_t NextWakeup() const = 0;

  // A message from another loop (Peers::Post).
  virtual void RunNote(const LoopNote& note) = 0;
  // A client left (or stopped waiting): its blocked consume is forgotten.
  virtual void OnClientGone(uint64_t client_id) = 0;

  // Sends what the upstream connections have queued (once per loop iteration).
  virtual void Flush() = 0;
  // Server stop: blocked consumers are answered null at once; then, once every client is gone,
  // Shutdown() closes the upstream connections, and quiescent() says when they are closed.
  virtual void ReleaseWaiters() = 0;
  virtual void Shutdown() = 0;
  virtual bool quiescent() const = 0;
};

struct ServiceSetup {
  const Config& config;
  ServerContext& server;
  Peers& peers;
  Instance& instance;  // from NewInstance
  ClientPort& port;    // the loop's connections
  int thread_index = 0;
  int threads = 1;
  size_t max_exported_queues = 0;  // queues the per-queue figures poller reads at most (loop 0)
};

// Builds loop `setup.thread_index`'s queue room around its upstream pool clients (one per
// configured pool, in config order), its clock starting at now_ms / wall_ms.
std::unique_ptr<Service> NewService(const ServiceSetup& setup,
                                    std::vector<std::unique_ptr<persist::PoolClient>> pools,
                                    int64_t now_ms, int64_t wall_ms);

}  // namespace deferq::queue
