// An upstream Redis pool as one loop thread sees it: `connections_per_thread` pipelined
// connections on that thread's ring, used round-robin. Standalone and Sentinel pools
// (persist/sentinel.h) are served here; a Redis Cluster pool hands everything to its
// ClusterPool (persist/cluster_pool.h): per-node connections, slot routing, redirections.
#pragma once

#include <sys/socket.h>

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "config.h"
#include "io/io_ring.h"
#include "persist/call_batch.h"
#include "persist/cluster_pool.h"
#include "persist/handshake.h"
#include "persist/pool_indexes.h"
#include "persist/scripts.h"
#include "persist/upstream_connection.h"
#include "redis_url.h"

namespace deferq::persist {

class SentinelMaster;
class SentinelWatcher;

// A pool's address, resolved once at startup (name resolution may block; loop threads never do).
struct ResolvedPool {
  std::string name;
  RedisUrl url;
  sockaddr_storage addr{};
  socklen_t addr_len = 0;
  int connections = 2;
  int timeout_ms = 1000;
  int wait_replicas = 0;  // UpstreamConnection::SetWaitReplicas
  int wait_timeout_ms = 1000;
  // Sentinel pools: the master the Sentinels name (url then holds only its credentials).
  std::shared_ptr<SentinelMaster> sentinel;
  std::shared_ptr<PoolStats> stats = std::make_shared<PoolStats>();  // shared by all threads
  // A Redis Cluster pool: its seeds and startup slot map (url/addr above: the first seed).
  std::shared_ptr<ClusterSetup> cluster;
};

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

class PoolClient {
 public:
  PoolClient(io::IoRing& io, const ResolvedPool& pool);
  ~PoolClient();

  const std::string& name() const { return name_; }
  // A Redis Cluster pool: a call's keys must share one hash slot (persist/cluster_slots.h).
  bool cluster() const { return cluster_ != nullptr; }
  // State changes answer once wait_replicas replicas confirmed them (UpstreamConnection).
  bool replicated() const { return pool_.wait_replicas > 0; }

  // FCALL of `script`'s function with the given keys, then the pool-wide keys kPoolKeys, then
  // the arguments; cb gets the reply or TRYAGAIN. Every connection loads the library before
  // it carries any request.
  // Requests with the same affinity (a client's id) use the same connection, so one client's
  // pipelined commands reach Redis, and take effect, in the order it sent them. A client's
  // consecutive calls of one batchable script on one queue (KEYS[1] alone) leave as one call of
  // the batch function when the loop flushes (persist/call_batch.h).
  void Eval(Script script, std::span<const std::string_view> keys,
            std::span<const std::string_view> args, uint64_t affinity, UpstreamCallback cb);
  // Any other command (e.g. SADD to the queue registry).
  void Command(std::span<const std::string_view> args, uint64_t affinity, UpstreamCallback cb);

  // The pool-wide indexes, read by name (persist/pool_indexes.h). ReadRegistry: every queue of
  // the registry (on a cluster a failed slot fails the read: it must not look whole).
  // ScanRegistry: a page of about `page` of them from `cursor` ("0" first; a cluster answers
  // everything at once). ReadDue: the entries due at or before max_ms (-1: every entry), at most
  // `limit` of them (0: no limit); a cluster leaves out what it could not read.
  void ReadRegistry(uint64_t affinity, RegistryCallback cb);
  void ScanRegistry(const std::string& cursor, size_t page, RegistryCallback cb);
  void ReadDue(int64_t max_ms, size_t limit, uint64_t affinity, DueCallback cb);

  // Opens one more connection, subscribed to `channel`; every message's payload goes to
  // `handler`. Re-subscribes after reconnects; `on_subscribed` runs each time the subscription
  // is (again) in place (messages published while it was not were lost).
  void Subscribe(const std::string& channel, std::function<void(std::string_view)> handler,
                 std::function<void()> on_subscribed = {});

  void Flush();
  void Tick();
  void Shutdown();
  bool quiescent() const;

 private:
  UpstreamConnection& Pick(uint64_t affinity);
  // One FCALL, now (what the batcher sends, and every call it does not take).
  void SendEval(Script script, std::span<const std::string_view> keys,
                std::span<const std::string_view> args, uint64_t affinity, UpstreamCallback cb);
  std::unique_ptr<UpstreamConnection> NewConnection();

  std::string name_;
  io::IoRing& io_;
  ResolvedPool pool_;
  std::shared_ptr<const Handshake> handshake_;  // shared by this thread's connections
  std::vector<std::unique_ptr<UpstreamConnection>> conns_;
  std::unique_ptr<UpstreamConnection> subscriber_;
  std::unique_ptr<SentinelWatcher> watcher_;  // Sentinel pools, on the thread that claimed it
  std::unique_ptr<ClusterPool> cluster_;      // set for a Redis Cluster pool: it serves everything
  CallBatcher batcher_;
};

}  // namespace deferq::persist
