// The few relaxed flags every thread of an instance reads, owned by queue::Instance (one per
// process) and reached through each thread's Loop, so that no part keeps process globals:
// whether this instance holds each pool's pump ownership, until when the first pool's lease is
// known to be its own, how often the pool's wake-up channel was (re)subscribed, and the book of
// per-queue figures that job activity is noted in. A stale read costs a pump call or a sweep,
// never a job.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "base/check.h"

namespace deferq::queue {

class QueueStatsBook;

class InstanceFlags {
 public:
  static constexpr size_t kMaxPools = 64;

  // Whether this instance holds the pump ownership of pool `pool_index` (its index in the
  // config): set by thread 0's PumpOwnership, read by every thread's pumps.
  std::atomic<bool>& pump_owner(size_t pool_index) {
    DQ_CHECK(pool_index < kMaxPools);
    return pump_owner_[pool_index];
  }
  // Until when (monotonic ms) the pump lease of pool 0 is known to be this instance's: the send
  // time of the last renewal Redis confirmed, plus the lease. The owner flag survives an error
  // reply (a stale view costs a pump call); this does not, so the fleet-wide figures are
  // exported by one instance only, even while an owner is cut off from Redis.
  void ConfirmLease(int64_t until_ms) { confirmed_until_ms_.store(until_ms, kRelaxed); }
  // With several pools, the owner of the first configured pool's pump, while its lease is
  // confirmed: one instance, so the gauges are exported once (/metrics, INFO stats pump_owner).
  bool IsPumpOwner(int64_t now_ms) const {
    return pump_owner_[0].load(kRelaxed) && now_ms < confirmed_until_ms_.load(kRelaxed);
  }

  // The pool's wake-up channel was (re)subscribed: news may have been lost, so every thread
  // reads its blocked queues and parked calls again (Waiters, Calls compare the epoch).
  void Resubscribed() { subscribed_epoch_.fetch_add(1, kRelaxed); }
  uint64_t subscribed_epoch() const { return subscribed_epoch_.load(kRelaxed); }

  // The book of per-queue figures (queue_stats.h) while its poller runs; nullptr otherwise.
  void SetBook(QueueStatsBook* book) { book_.store(book, kRelaxed); }
  QueueStatsBook* book() const { return book_.load(kRelaxed); }

 private:
  static constexpr std::memory_order kRelaxed = std::memory_order_relaxed;
  std::array<std::atomic<bool>, kMaxPools> pump_owner_{};
  std::atomic<int64_t> confirmed_until_ms_{0};
  std::atomic<uint64_t> subscribed_epoch_{0};
  std::atomic<QueueStatsBook*> book_{nullptr};
};

}  // namespace deferq::queue
