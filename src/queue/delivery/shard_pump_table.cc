#include "queue/delivery/shard_pump_table.h"

#include <charconv>

#include "base/check.h"
#include "queue/model/queue_name.h"
#include "queue/model/shards.h"

namespace deferq::queue {

size_t ShardOwnerIndex(std::string_view tag, int shard, size_t members) {
  DQ_CHECK(members > 0);
  // Rotated by the queue's hash, so that with shard counts that members do not divide, the
  // first members of the roster do not own the extra shards of every queue.
  return (static_cast<uint64_t>(Fnv1a(tag)) + static_cast<uint64_t>(shard)) % members;
}

ShardPumpTable::ShardPumpTable(const Config& config) {
  for (const auto& [tag, n] : config.queue_shards) {
    std::string_view ns, queue;
    if (n < 2 || !QueueName::Split(tag, &ns, &queue)) continue;
    by_tag_.emplace(tag, queues_.size());
    queues_.push_back(Queue{tag, std::string(ns), std::string(queue), n, size_});
    size_ += static_cast<size_t>(n);
  }
  state_ = std::make_unique<std::atomic<uint8_t>[]>(size_);
  for (size_t i = 0; i < size_; ++i) state_[i].store(kNone, std::memory_order_relaxed);
}

int64_t ShardPumpTable::Find(std::string_view tag) const {
  if (queues_.empty()) return -1;
  // "ns/queue#i": the mark cannot occur in a namespace or a client's queue name.
  const size_t mark = tag.find(kShardMark);
  auto it = by_tag_.find(tag.substr(0, mark));
  if (it == by_tag_.end()) return -1;
  const Queue& q = queues_[it->second];
  if (mark == std::string_view::npos) return static_cast<int64_t>(q.first);
  // Shard i > 0, written as ShardQueueName writes it (no sign, no leading zero).
  const std::string_view digits = tag.substr(mark + 1);
  int i = 0;
  auto r = std::from_chars(digits.data(), digits.data() + digits.size(), i);
  if (r.ec != std::errc() || r.ptr != digits.data() + digits.size() || digits[0] == '0' ||
      i >= q.shards) {
    return -1;
  }
  return static_cast<int64_t>(q.first + static_cast<size_t>(i));
}

void ShardPumpTable::Set(size_t index, State s) {
  DQ_DCHECK(index < size_);
  const auto was = static_cast<State>(state_[index].exchange(s, std::memory_order_relaxed));
  if (was == kOwned && s != kOwned) owned_.fetch_sub(1, std::memory_order_relaxed);
  if (was != kOwned && s == kOwned) owned_.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace deferq::queue
