// Which shards of the config's sharded queues this instance pumps now (the design of shard
// pumping is in queue/delivery/shard_pump.h): the process-wide table every thread's Pump reads and
// loop 0's ShardPumping writes, and the one function that says who owns a shard.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.h"

namespace deferq::queue {

// A shard this instance stopped owning is pumped this long after (two roster renewals).
inline constexpr int64_t kShardGraceMs = 1000;

// Shards this instance owns now, over every sharded queue (INFO stats pump_shards).

// The owner of shard `shard` of the sharded queue `tag` among `members` (the sorted roster,
// not empty): the one function every instance computes it with.
size_t ShardOwnerIndex(std::string_view tag, int shard, size_t members);

class ShardPumpTable {
 public:
  enum State : uint8_t {
    kNone = 0,   // pumped here only at the due times of jobs published here
    kGrace = 1,  // owned until recently: still pumped, handed over
    kOwned = 2,  // this instance's
  };
  struct Queue {
    std::string tag;  // "ns/queue" (shard 0's)
    std::string ns;
    std::string queue;
    int shards = 0;
    size_t first = 0;  // its shard 0's index in the table
  };

  explicit ShardPumpTable(const Config& config);

  const std::vector<Queue>& queues() const { return queues_; }
  size_t size() const { return size_; }
  // The index of the shard a tag names ("ns/queue" or "ns/queue#i" of a sharded queue), or -1
  // for any other queue.
  int64_t Find(std::string_view tag) const;
  // Whether this instance pumps shard `index` (owned or in its grace time).
  bool Pumps(size_t index) const { return state_[index].load(std::memory_order_relaxed) != kNone; }
  // Shards this instance owns, over every queue: written by loop 0 (Set), read by INFO.
  int owned() const { return owned_.load(std::memory_order_relaxed); }
  State state(size_t index) const {
    return static_cast<State>(state_[index].load(std::memory_order_relaxed));
  }
  // Loop 0 only.
  void Set(size_t index, State s);

 private:
  std::vector<Queue> queues_;
  std::map<std::string, size_t, std::less<>> by_tag_;  // tag -> index in queues_
  size_t size_ = 0;
  std::atomic<int> owned_{0};
  std::unique_ptr<std::atomic<uint8_t>[]> state_;
};

}  // namespace deferq::queue
