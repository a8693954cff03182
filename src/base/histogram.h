// Counters and fixed-bucket histograms written on hot paths by any thread and read only when
// metrics are scraped. Each thread writes its own cache-line-aligned shard with a relaxed atomic
// add (uncontended, so cheap); a reader sums the shards. Readers may see a count and a sum from
// slightly different instants, which Prometheus tolerates.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <span>
#include <vector>

namespace deferq::base {

// The calling thread's shard index, 0..kMetricShards-1, fixed for the thread's life.
inline constexpr int kMetricShards = 8;
int MetricShard();

class ShardedCounter {
 public:
  void Add(uint64_t n = 1) { shards_[MetricShard()].value.fetch_add(n, std::memory_order_relaxed); }
  uint64_t Read() const;

 private:
  struct alignas(64) Shard {
    std::atomic<uint64_t> value{0};
  };
  std::array<Shard, kMetricShards> shards_{};
};

// Bucket upper bounds (inclusive) in microseconds, ascending; an implicit +Inf bucket follows.
class Histogram {
 public:
  static constexpr size_t kMaxBounds = 23;
  explicit Histogram(std::span<const int64_t> bounds_us);

  void Record(int64_t us);

  struct Snapshot {
    std::vector<uint64_t> buckets;  // per bucket, not cumulative; bounds().size() + 1 entries
    uint64_t count = 0;
    int64_t sum_us = 0;
  };
  Snapshot Read() const;
  std::span<const int64_t> bounds() const { return {bounds_.data(), n_bounds_}; }

 private:
  struct alignas(64) Shard {
    std::array<std::atomic<uint64_t>, kMaxBounds + 1> buckets{};
    std::atomic<int64_t> sum_us{0};
  };
  std::array<int64_t, kMaxBounds> bounds_{};
  size_t n_bounds_ = 0;
  std::array<Shard, kMetricShards> shards_{};
};

// Latency bounds shared by command and upstream histograms: 50 µs .. 10 s.
std::span<const int64_t> LatencyBoundsUs();

}  // namespace deferq::base
