// Sharded queues (docs/operations.md "Sharded queues"): a queue the config declares with N shards
// ([shards.NAMESPACE] QUEUE = N) is stored as N queues, each with its own hash tag, so on a
// Redis Cluster one hot queue spreads over up to N slots and masters.
//
// Shard 0 is the queue itself ("ns/queue"); shard i > 0 is the internal queue "queue#i", a name
// no client can give ('#' is not in the name alphabet of docs/commands.md). Everything below the
// commands (scripts, pump, blocked consumers, registry) sees each shard as a queue of its own; the
// commands map the client's queue to its shards and fold the shards back in their replies.
//
// A job's shard follows from its id alone, so every command that names a job finds it:
//   a generated id carries it in K[6], the first random byte (PUBLISH chooses it round-robin);
//   a custom id is placed by FNV-1a of its K, modulo N.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.h"
#include "queue/model/queue_name.h"

namespace deferq::queue {

inline constexpr int kMaxShards = 256;
inline constexpr char kShardMark = '#';

// The shard count of a queue: the config's, 1 when the queue is not sharded.
int ShardCount(const Config& cfg, std::string_view ns, std::string_view queue);
inline int ShardCount(const Config& cfg, const QueueName& q) {
  return ShardCount(cfg, q.ns, q.queue);
}

// The stored queue name of shard `i` of `queue`: the name itself for shard 0, "queue#i" else.
std::string ShardQueueName(std::string_view queue, int i);
inline QueueName Shard(const QueueName& q, int i) { return {q.ns, ShardQueueName(q.queue, i)}; }
// The queue a client names, from a stored queue name (a shard's or a plain queue's).
inline std::string_view ClientQueueName(std::string_view stored) {
  return stored.substr(0, stored.find(kShardMark));
}

// The shard (0..n-1) of the job with canonical key K.
int ShardOf(std::string_view key, int n);
// 32-bit FNV-1a: the placement hash of custom ids (fixed forever: it decides where jobs live).
uint32_t Fnv1a(std::string_view data);

// The stored queue names to consume from for CONSUME's `queues` (in the client's priority
// order): a sharded queue becomes its shards, starting at shard `turn` % n and going round,
// so successive CONSUMEs start at successive shards.
std::vector<std::string> ConsumeOrder(const Config& cfg, std::string_view ns,
                                      std::span<const std::string_view> queues, uint32_t turn);

}  // namespace deferq::queue
