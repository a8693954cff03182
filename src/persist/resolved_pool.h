// A pool's address and settings, resolved once at startup on the main thread (name resolution
// may block; loop threads never do): what every thread's RedisPool and its backend start from.
#pragma once

#include <sys/socket.h>

#include <memory>
#include <string>

#include "config/redis_url.h"
#include "persist/upstream_connection.h"

namespace deferq::persist {

class SentinelMaster;  // persist/sentinel.h
struct ClusterSetup;   // persist/cluster_pool.h

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

}  // namespace deferq::persist
