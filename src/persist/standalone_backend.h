// A pool's backend on one Redis (persist/upstream_backend.h): `connections_per_thread`
// pipelined connections on the loop's ring, a request pinned to one by its affinity (a client's
// calls stay in order), any ready one while that one is down. A Sentinel pool's connections
// follow the master the Sentinels name (persist/sentinel.h); the thread that claimed the pool's
// watcher runs it here. The pool-wide indexes are one key each (persist/keys.h).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "io/io_ring.h"
#include "persist/handshake.h"
#include "persist/resolved_pool.h"
#include "persist/upstream_backend.h"
#include "persist/upstream_connection.h"

namespace deferq::persist {

class SentinelWatcher;

class StandaloneBackend final : public UpstreamBackend {
 public:
  StandaloneBackend(io::IoRing& io, const ResolvedPool& pool,
                    std::shared_ptr<const Handshake> handshake);
  ~StandaloneBackend() override;

  void Eval(Script script, std::span<const std::string_view> keys,
            std::span<const std::string_view> args, uint64_t affinity,
            UpstreamCallback cb) override;
  void Command(std::span<const std::string_view> args, uint64_t affinity,
               UpstreamCallback cb) override;
  void ReadRegistry(uint64_t affinity, RegistryCallback cb, bool whole) override;
  void ScanRegistry(const std::string& cursor, size_t page, RegistryCallback cb) override;
  void ReadDue(int64_t max_ms, size_t limit, uint64_t affinity, DueCallback cb) override;
  void Subscribe(const std::string& channel, std::function<void(std::string_view)> handler,
                 std::function<void()> on_subscribed) override;
  void Flush() override;
  void Tick() override;
  void Shutdown() override;
  bool quiescent() const override;

 private:
  UpstreamConnection& Pick(uint64_t affinity);
  std::unique_ptr<UpstreamConnection> NewConnection();

  io::IoRing& io_;
  const ResolvedPool& pool_;                    // the RedisPool's, which outlives this
  std::shared_ptr<const Handshake> handshake_;  // shared by this thread's connections
  std::vector<std::unique_ptr<UpstreamConnection>> conns_;
  std::unique_ptr<UpstreamConnection> subscriber_;
  std::unique_ptr<SentinelWatcher> watcher_;  // Sentinel pools, on the thread that claimed it
};

}  // namespace deferq::persist
