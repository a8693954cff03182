#include "base/histogram.h"

#include <algorithm>

#include "base/check.h"

namespace deferq::base {

namespace {

std::atomic<int> next_shard{0};

constexpr int64_t kLatencyBoundsUs[] = {50,     100,     250,     500,     1000,    2000,
                                        5000,   10000,   25000,   50000,   100000,  250000,
                                        500000, 1000000, 2500000, 5000000, 10000000};

}  // namespace

int MetricShard() {
  // Threads take shards round-robin; with more threads than shards two threads share one, which
  // stays correct (atomic adds), only less cheap.
  thread_local const int shard = next_shard.fetch_add(1, std::memory_order_relaxed) % kMetricShards;
  return shard;
}

uint64_t ShardedCounter::Read() const {
  uint64_t n = 0;
  for (const Shard& s : shards_) n += s.value.load(std::memory_order_relaxed);
  return n;
}

Histogram::Histogram(std::span<const int64_t> bounds_us) {
  DQ_CHECK(bounds_us.size() <= kMaxBounds);
  DQ_CHECK(std::is_sorted(bounds_us.begin(), bounds_us.end()));
  std::copy(bounds_us.begin(), bounds_us.end(), bounds_.begin());
  n_bounds_ = bounds_us.size();
}

void Histogram::Record(int64_t us) {
  if (us < 0) us = 0;
  const int64_t* begin = bounds_.data();
  const size_t bucket = static_cast<size_t>(std::lower_bound(begin, begin + n_bounds_, us) - begin);
  Shard& s = shards_[MetricShard()];
  s.buckets[bucket].fetch_add(1, std::memory_order_relaxed);
  s.sum_us.fetch_add(us, std::memory_order_relaxed);
}

Histogram::Snapshot Histogram::Read() const {
  Snapshot out;
  out.buckets.assign(n_bounds_ + 1, 0);
  for (const Shard& s : shards_) {
    for (size_t b = 0; b <= n_bounds_; ++b) {
      out.buckets[b] += s.buckets[b].load(std::memory_order_relaxed);
    }
    out.sum_us += s.sum_us.load(std::memory_order_relaxed);
  }
  for (uint64_t n : out.buckets) out.count += n;
  return out;
}

std::span<const int64_t> LatencyBoundsUs() { return kLatencyBoundsUs; }

}  // namespace deferq::base
