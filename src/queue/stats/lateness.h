// Delivery lateness per queue: how late each delayed job became ready against its due time.
// Recorded by the pumps of every thread, read by INFO and the metrics endpoint.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/thread_annotations.h"

namespace deferq::queue {

// A fixed histogram of milliseconds: exact up to 16 ms, then 8 buckets per power of two up to
// ~4.6 hours; the last bucket is open-ended (quantiles falling there report the maximum).
class LatenessHistogram {
 public:
  static constexpr int kBuckets = 16 + 8 * 20;
  void Record(int64_t ms);
  uint64_t count() const { return count_.load(std::memory_order_relaxed); }
  int64_t max() const { return max_.load(std::memory_order_relaxed); }
  int64_t sum_ms() const { return sum_ms_.load(std::memory_order_relaxed); }
  uint64_t bucket(int b) const { return buckets_[b].load(std::memory_order_relaxed); }
  // The q-quantile (0..1) as the upper bound of its bucket, in ms.
  int64_t Quantile(double q) const;

  static int BucketOf(int64_t ms);
  static int64_t UpperBound(int bucket);

 private:
  std::array<std::atomic<uint64_t>, kBuckets> buckets_{};
  std::atomic<uint64_t> count_{0};
  std::atomic<int64_t> max_{0};
  std::atomic<int64_t> sum_ms_{0};
};

// Bounded: at most `cap` queues have a histogram (the metrics endpoint's queue cap), so a flood
// of queue names costs at most cap x ~1.5 KB and a snapshot copies at most cap entries. A queue
// that gets no record for kIdleMs loses its histogram when a new queue needs the room; a record
// for a queue that finds no room is dropped and counted (dropped()).
class LatenessStats {
 public:
  static constexpr int64_t kIdleMs = 600 * 1000;
  // How often a full table is searched for idle histograms (the search holds the lock).
  static constexpr int64_t kEvictEveryMs = 1000;

  explicit LatenessStats(size_t cap = 1000) : cap_(cap) {}
  // Records the lateness of jobs made ready on queue `tag` ("ns/queue") at now_ms (monotonic).
  void Record(const std::string& tag, const std::vector<int64_t>& late_ms, int64_t now_ms);
  // The queues whose latest record is older than `before_ms` (monotonic), in name order.
  std::vector<std::string> QuietSince(int64_t before_ms) const;
  // Drops queue `tag`'s histogram (the queue finished: nothing of it is left in Redis).
  void Forget(const std::string& tag);
  // "tag" -> histogram, in name order, for reporting (at most cap entries).
  std::vector<std::pair<std::string, std::shared_ptr<const LatenessHistogram>>> Snapshot() const;
  // Records dropped because their queue found no room (one per Record call).
  uint64_t dropped() const { return dropped_.load(std::memory_order_relaxed); }

 private:
  struct Entry {
    std::shared_ptr<LatenessHistogram> h;
    int64_t last_ms = 0;  // the latest Record (monotonic ms)
  };
  // Drops the histograms idle since before now_ms - kIdleMs. Holds mu_.
  void EvictIdle(int64_t now_ms) DQ_REQUIRES(mu_);

  const size_t cap_;
  mutable base::Mutex mu_;
  std::map<std::string, Entry> by_queue_ DQ_GUARDED_BY(mu_);
  int64_t next_evict_ms_ DQ_GUARDED_BY(mu_) = 0;
  std::atomic<uint64_t> dropped_{0};
};

}  // namespace deferq::queue
