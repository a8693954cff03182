#include "queue/stats/lateness.h"

#include <algorithm>
#include <cstdint>

namespace deferq::queue {

int LatenessHistogram::BucketOf(int64_t ms) {
  if (ms < 0) ms = 0;
  if (ms < 16) return static_cast<int>(ms);
  const int log = 63 - __builtin_clzll(static_cast<uint64_t>(ms));  // >= 4
  const int sub = static_cast<int>((ms >> (log - 3)) & 7);
  return std::min(kBuckets - 1, 16 + (log - 4) * 8 + sub);
}

int64_t LatenessHistogram::UpperBound(int bucket) {
  if (bucket < 16) return bucket;
  if (bucket == kBuckets - 1) return INT64_MAX;  // open-ended: quantiles there report the max
  const int log = (bucket - 16) / 8 + 4;
  const int sub = (bucket - 16) % 8;
  return ((int64_t{8} + sub + 1) << (log - 3)) - 1;
}

void LatenessHistogram::Record(int64_t ms) {
  buckets_[BucketOf(ms)].fetch_add(1, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
  sum_ms_.fetch_add(ms < 0 ? 0 : ms, std::memory_order_relaxed);
  int64_t m = max_.load(std::memory_order_relaxed);
  while (ms > m && !max_.compare_exchange_weak(m, ms, std::memory_order_relaxed)) {
  }
}

int64_t LatenessHistogram::Quantile(double q) const {
  const uint64_t n = count();
  if (n == 0) return 0;
  const uint64_t rank =
      std::max<uint64_t>(1, static_cast<uint64_t>(q * static_cast<double>(n) + 0.5));
  uint64_t seen = 0;
  for (int b = 0; b < kBuckets; ++b) {
    seen += buckets_[b].load(std::memory_order_relaxed);
    if (seen >= rank) return std::min(UpperBound(b), max());
  }
  return max();
}

void LatenessStats::Record(const std::string& tag, const std::vector<int64_t>& late_ms,
                           int64_t now_ms) {
  if (late_ms.empty()) return;
  std::shared_ptr<LatenessHistogram> h;
  {
    base::MutexLock lock(&mu_);
    auto it = by_queue_.find(tag);
    if (it == by_queue_.end()) {
      if (by_queue_.size() >= cap_ && now_ms >= next_evict_ms_) {
        next_evict_ms_ = now_ms + kEvictEveryMs;
        EvictIdle(now_ms);
      }
      if (by_queue_.size() >= cap_) {
        dropped_.fetch_add(1, std::memory_order_relaxed);
        return;
      }
      it = by_queue_.emplace(tag, Entry{std::make_shared<LatenessHistogram>(), now_ms}).first;
    }
    it->second.last_ms = now_ms;
    h = it->second.h;
  }
  for (int64_t ms : late_ms) h->Record(ms);
}

std::vector<std::string> LatenessStats::QuietSince(int64_t before_ms) const {
  std::vector<std::string> out;
  base::MutexLock lock(&mu_);
  for (const auto& [tag, entry] : by_queue_) {
    if (entry.last_ms < before_ms) out.push_back(tag);
  }
  return out;
}

void LatenessStats::Forget(const std::string& tag) {
  base::MutexLock lock(&mu_);
  by_queue_.erase(tag);
}

void LatenessStats::EvictIdle(int64_t now_ms) {
  for (auto it = by_queue_.begin(); it != by_queue_.end();) {
    if (it->second.last_ms < now_ms - kIdleMs) {
      it = by_queue_.erase(it);
    } else {
      ++it;
    }
  }
}

std::vector<std::pair<std::string, std::shared_ptr<const LatenessHistogram>>>
LatenessStats::Snapshot() const {
  std::vector<std::pair<std::string, std::shared_ptr<const LatenessHistogram>>> out;
  base::MutexLock lock(&mu_);
  out.reserve(by_queue_.size());
  for (const auto& [tag, entry] : by_queue_) out.emplace_back(tag, entry.h);
  return out;
}

}  // namespace deferq::queue
