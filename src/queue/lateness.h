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

class LatenessStats {
 public:
  // Records the lateness of jobs made ready on queue `tag` ("ns/queue").
  void Record(const std::string& tag, const std::vector<int64_t>& late_ms);
  // "tag" -> histogram, for reporting.
  std::vector<std::pair<std::string, std::shared_ptr<const LatenessHistogram>>> Snapshot() const;

 private:
  mutable base::Mutex mu_;
  std::map<std::string, std::shared_ptr<LatenessHistogram>> by_queue_ DQ_GUARDED_BY(mu_);
};

}  // namespace deferq::queue
