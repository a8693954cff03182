// What the pool-wide indexes hold (persist/keys.h: the registry of the queues that hold a job,
// the due index of when each queue's pump has work), read by name through PoolClient's
// ReadRegistry / ScanRegistry / ReadDue: one key each on a standalone or Sentinel pool, one per
// hash slot on a Redis Cluster, where ClusterPool reads them on every master and merges the
// answers (persist/cluster_pool.h). The callers never spell these reads as commands, so the
// cluster side does not have to recognise them by their text.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace deferq::persist {

// A read of the registry. A failed read has `error` set (the caller's reply text: TRYAGAIN,
// TIMEOUT or Redis's error) and nothing else.
struct RegistryRead {
  std::string error;
  std::vector<std::string> tags;  // "ns/queue"
  std::string cursor = "0";       // ScanRegistry: the next page's cursor ("0": this was the last)
};

// A read of the due index: entries (tag, unix ms) earliest first, or `error`.
struct DueRead {
  std::string error;
  std::vector<std::pair<std::string, int64_t>> entries;
};

using RegistryCallback = std::function<void(RegistryRead&)>;
using DueCallback = std::function<void(DueRead&)>;

}  // namespace deferq::persist
