// Every Redis key and channel name deferq's C++ side spells (docs/storage.md lists them all;
// the scripts under persist/scripts/ derive theirs from the prefixes passed as KEYS). All start
// with "dq:"; a queue's keys share the hash tag of its tag "ns/queue".
#pragma once

#include <string>
#include <string_view>

namespace deferq::persist {

inline constexpr std::string_view kKeyPrefix = "dq:";

// KEYS[1] of every queue script: all keys of queue `tag` ("ns/queue") share this prefix and its
// hash tag.
inline std::string QueuePrefix(std::string_view tag) {
  std::string p;
  p.reserve(tag.size() + 6);
  p.append(kKeyPrefix).append("{").append(tag).append("}:");
  return p;
}

// The pool-wide registry of queues holding jobs and the due index across queues, which the
// scripts keep as KEYS[2] and KEYS[3] (docs/storage.md). On Redis Cluster they are per slot
// (persist/cluster_slots.h). Both are read through PoolClient's named reads (ReadRegistry,
// ScanRegistry, ReadDue: persist/pool_indexes.h), which a cluster pool answers across the slots.
inline constexpr std::string_view kRegistryKey = "dq:queues";
inline constexpr std::string_view kDueKey = "dq:due";
inline constexpr std::string_view kPoolKeys[] = {kRegistryKey, kDueKey};

// The pool's active-queue index: ZSET "ns/queue" -> unix ms of the last job command an instance
// noted on it (queue/stats/queue_stats.h).
inline constexpr std::string_view kActiveQueuesKey = "dq:active";

// The pool's wake-up channel (queue/delivery/waiters.h).
inline constexpr std::string_view kReadyChannel = "dq:ready";

// The namespaces' and tokens' keys (KEYS[1] of namespace.lua): one hash tag.
inline constexpr std::string_view kAuthPrefix = "dq:{auth}:";

// The pump lease of a pool (own.lua: its key is the prefix .. "own"). "dq:" has no hash tag;
// on a cluster the prefix is kClusterLeasePrefix, in a declared slot.
inline constexpr std::string_view kLeasePrefix = "dq:";
inline constexpr std::string_view kClusterLeasePrefix = "dq:{dq}:";

// A namespace's rate limits (HASH) and the prefix of its rate counters
// (queue/tenancy/rate_limiter.h).
inline std::string LimitKey(std::string_view ns) {
  return std::string(kKeyPrefix).append("limit:{").append(ns).append("}");
}
inline std::string RateKeyPrefix(std::string_view ns) {
  return std::string(kKeyPrefix).append("rate:{").append(ns).append("}:");
}

}  // namespace deferq::persist
