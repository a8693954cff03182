// An upstream Redis pool as one loop thread sees it. PoolClient is what the queue room calls;
// RedisPool implements it: it merges a client's batchable calls (persist/call_batch.h), keeps each
// client's calls in order, and hands everything to its backend (persist/upstream_backend.h):
// `connections_per_thread` pipelined connections to one Redis, standalone or led by Sentinel
// (persist/standalone_backend.h), or per-node connections, slot routing and redirections on a
// Redis Cluster (persist/cluster_pool.h).
#pragma once

#include <sys/socket.h>

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.h"
#include "config/redis_url.h"
#include "io/io_ring.h"
#include "persist/call_batch.h"
#include "persist/handshake.h"
#include "persist/pool_indexes.h"
#include "persist/resolved_pool.h"
#include "persist/scripts.h"
#include "persist/upstream_backend.h"
#include "persist/upstream_connection.h"

namespace deferq::persist {

// Resolves every configured pool. False with *error for pools deferq cannot serve.
bool ResolvePools(const Config& config, std::vector<ResolvedPool>* out, std::string* error);

// Startup checks with a short blocking connection (main thread only): the handshake of every
// connection (persist/handshake.h), run once so that a pool Redis refuses (maxmemory-policy not
// noeviction, Redis older than 7.0) stops deferq with a clear message. AOF off or an unreachable
// pool gives a warning (*warning) and the pool is used anyway: its connections reconnect until it
// answers, and refuse it (TRYAGAIN with the reason) while a check fails.
bool CheckPool(const ResolvedPool& pool, std::string* warning, std::string* error);

// "host:port" of the pool's Redis (a Sentinel pool's current master), for INFO.
std::string PoolAddress(const ResolvedPool& pool);

// A pool as the queue room sees it: the calls a loop thread makes on one configured pool. The
// one implementation talking to Redis is RedisPool below (standalone, Sentinel or Cluster); the
// unit tests drive the stateful parts of queue (Pump, Waiters...) through a fake
// (tests/unit/support/fake_pool.h). Every callback runs on the loop thread that made the call.
class PoolClient {
 public:
  virtual ~PoolClient() = default;

  virtual const std::string& name() const = 0;
  // A Redis Cluster pool: a call's keys must share one hash slot (persist/cluster_slots.h).
  virtual bool cluster() const = 0;
  // State changes answer once wait_replicas replicas confirmed them (UpstreamConnection).
  virtual bool replicated() const = 0;

  // FCALL of `script`'s function with the given keys, then the pool-wide keys kPoolKeys, then
  // the arguments; cb gets the reply or TRYAGAIN. Every connection loads the library before
  // it carries any request.
  // Requests with the same affinity (a client's id) use the same connection, so one client's
  // pipelined commands reach Redis, and take effect, in the order it sent them. A client's
  // consecutive calls of one batchable script on one queue (KEYS[1] alone) leave as one call of
  // the batch function when the loop flushes (persist/call_batch.h).
  virtual void Eval(Script script, std::span<const std::string_view> keys,
                    std::span<const std::string_view> args, uint64_t affinity,
                    UpstreamCallback cb) = 0;
  // Any other command (e.g. SADD to the queue registry).
  virtual void Command(std::span<const std::string_view> args, uint64_t affinity,
                       UpstreamCallback cb) = 0;

  // The pool-wide indexes, read by name (persist/pool_indexes.h). ReadRegistry: every queue of
  // the registry (on a cluster a failed slot fails the read: it must not look whole).
  // ScanRegistry: a page of about `page` of them from `cursor` ("0" first; a cluster answers
  // everything at once). ReadDue: the entries due at or before max_ms (-1: every entry), at most
  // `limit` of them (0: no limit); a cluster leaves out what it could not read.
  virtual void ReadRegistry(uint64_t affinity, RegistryCallback cb) = 0;
  virtual void ScanRegistry(const std::string& cursor, size_t page, RegistryCallback cb) = 0;
  virtual void ReadDue(int64_t max_ms, size_t limit, uint64_t affinity, DueCallback cb) = 0;

  // Opens one more connection, subscribed to `channel`; every message's payload goes to
  // `handler`. Re-subscribes after reconnects; `on_subscribed` runs each time the subscription
  // is (again) in place (messages published while it was not were lost).
  virtual void Subscribe(const std::string& channel, std::function<void(std::string_view)> handler,
                         std::function<void()> on_subscribed = {}) = 0;

  // The loop's turns: Flush once per loop iteration (the batched calls leave), Tick every
  // 100 ms, Shutdown at stop; quiescent once nothing is in flight.
  virtual void Flush() = 0;
  virtual void Tick() = 0;
  virtual void Shutdown() = 0;
  virtual bool quiescent() const = 0;
};

// The pool over upstream connections on the loop's ring.
class RedisPool final : public PoolClient {
 public:
  RedisPool(io::IoRing& io, const ResolvedPool& pool);
  ~RedisPool() override;

  const std::string& name() const override { return pool_.name; }
  bool cluster() const override { return pool_.cluster != nullptr; }
  bool replicated() const override { return pool_.wait_replicas > 0; }
  void Eval(Script script, std::span<const std::string_view> keys,
            std::span<const std::string_view> args, uint64_t affinity,
            UpstreamCallback cb) override;
  void Command(std::span<const std::string_view> args, uint64_t affinity,
               UpstreamCallback cb) override;
  void ReadRegistry(uint64_t affinity, RegistryCallback cb) override;
  void ScanRegistry(const std::string& cursor, size_t page, RegistryCallback cb) override;
  void ReadDue(int64_t max_ms, size_t limit, uint64_t affinity, DueCallback cb) override;
  void Subscribe(const std::string& channel, std::function<void(std::string_view)> handler,
                 std::function<void()> on_subscribed = {}) override;
  void Flush() override;
  void Tick() override;
  void Shutdown() override;
  bool quiescent() const override;

 private:
  ResolvedPool pool_;
  std::unique_ptr<UpstreamBackend> backend_;  // standalone (or Sentinel) or cluster
  CallBatcher batcher_;
};

}  // namespace deferq::persist
