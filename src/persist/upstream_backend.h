// Where a pool's requests go once RedisPool (persist/pool.h) has merged what it batches: one
// Redis, standalone or led by Sentinel (StandaloneBackend, persist/standalone_backend.h), or a
// Redis Cluster (ClusterPool, persist/cluster_pool.h). RedisPool owns the batching, the pool-wide
// ordering rule (a client's calls leave in order) and the public calls; a backend owns its
// connections and how a request reaches the right one. The pool-wide reads are the backend's
// because they differ in kind: one key each on a standalone Redis, one key per hash slot, read
// per master, on a cluster.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>

#include "persist/pool_indexes.h"
#include "persist/scripts.h"
#include "persist/upstream_connection.h"

namespace deferq::persist {

class UpstreamBackend {
 public:
  virtual ~UpstreamBackend() = default;

  // One FCALL of `script` now (keys, the pool-wide keys where the backend has them, args).
  virtual void Eval(Script script, std::span<const std::string_view> keys,
                    std::span<const std::string_view> args, uint64_t affinity,
                    UpstreamCallback cb) = 0;
  virtual void Command(std::span<const std::string_view> args, uint64_t affinity,
                       UpstreamCallback cb) = 0;
  // The pool-wide indexes (PoolClient's reads of the same names). `whole`: a part that could not
  // be read fails the registry read, else it is left out.
  virtual void ReadRegistry(uint64_t affinity, RegistryCallback cb, bool whole) = 0;
  virtual void ScanRegistry(const std::string& cursor, size_t page, RegistryCallback cb) = 0;
  virtual void ReadDue(int64_t max_ms, size_t limit, uint64_t affinity, DueCallback cb) = 0;
  virtual void Subscribe(const std::string& channel, std::function<void(std::string_view)> handler,
                         std::function<void()> on_subscribed) = 0;

  virtual void Flush() = 0;
  virtual void Tick() = 0;
  virtual void Shutdown() = 0;
  virtual bool quiescent() const = 0;
};

}  // namespace deferq::persist
