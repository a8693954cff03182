// The pump: moves a queue's due delayed jobs and expired leases to ready (pump.lua), at the
// millisecond its next work falls due, on the one thread of the one instance that pumps it.
//
// API:
//   OwnerOf(tag, threads)       which loop thread pumps a queue (the only place that says so)
//   Pump::ScheduleDue(tag, due) a publish on this thread made work due at `due` (unix ms): the
//                               owning thread schedules its queue's pump no later than that
//   Pump::OnQueueSeen(tag, due) the owning thread's side of it (from the due-index poll, from
//                               another thread's ScheduleDue, or this thread's own)
//   Pump::RunTimers()           every loop iteration: pumps the queues whose time has come
//   Pump::Tick()                every loop tick (100 ms): pump ownership and the due-index poll
//                               (thread 0), forgetting what no longer matters
//   Pump::Follows(tag)          whether this instance follows the queue's next due times: it owns
//                               the pool's pump, or, for a shard of a sharded queue, that shard
//                               (queue/delivery/shard_pump.h)
//
// A queue this thread pumps is a QueuePump while it has work: an armed timer on the wheel, a
// pump call in flight, or a busy spell (coalescing). A queue with nothing falling due costs
// nothing here.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "persist/upstream_connection.h"
#include "queue/delivery/shard_pump_table.h"
#include "queue/delivery/timing_wheel.h"
#include "queue/delivery/waiters.h"
#include "queue/stats/lateness.h"

namespace deferq::queue {

class Loop;

// Pump leases (the pool's, own.lua; a sharded queue's roster, pumpers.lua): held for
// kPumpLeaseMs, renewed every kPumpLeaseRenewMs, so what a dead instance pumped is taken over
// within kPumpLeaseMs + kPumpLeaseRenewMs.
inline constexpr int64_t kPumpLeaseMs = 2000;
inline constexpr int64_t kPumpLeaseRenewMs = 500;

// The thread (of `threads`) that pumps queue `tag` ("ns/queue") in this instance.
int OwnerOf(std::string_view tag, int threads);

// How far ahead of now the due-index reads route a queue, and a pump call's next due time is
// followed: two read periods (server.sweep_ms), so one read skipped (the last still in flight)
// or answered late makes no job late. A queue routed twice keeps its earlier pump.
inline int64_t DueHorizonMs(int64_t sweep_ms) { return 2 * sweep_ms; }

// How fast a queue's jobs fall due, from its pump calls' answers: a moving average of the jobs
// each call made ready per ms since the call before. A queue at kBusyPerMs or more is busy, and
// its calls are coalesced (pump.cc, kCoalesceMs). Pure (tests/unit/queue/due_rate_test.cc).
struct DueRate {
  static constexpr double kBusyPerMs = 8;
  static constexpr double kWeight = 0.125;  // of each call's figure in the average
  double per_ms = 0;
  int64_t last_ms = 0;  // monotonic: when the last call answered (0: none yet)
  // A call answered at now_ms having made `made_ready` jobs ready; true when the queue is busy.
  bool Note(int64_t made_ready, int64_t now_ms);
};

// One queue this thread pumps; its timer is its next pump, armed on the thread's wheel.
struct QueuePump : WheelTimer {
  explicit QueuePump(std::string t) : tag(std::move(t)) {}
  const std::string tag;
  bool pumping = false;        // a pump call is in flight
  bool repump = false;         // its timer fired meanwhile: pump again once it answers
  int64_t quiet_until_ms = 0;  // monotonic: busy, no pump before this (see kCoalesceMs)
  // The unix ms the armed timer is for (-1: none). The wheel runs on the monotonic clock, whose
  // ms begin at another instant than the wall clock's: a timer fires in the wall ms before its
  // due ms about half the time, when a pump call would move nothing and only be made again a ms
  // later (Pump::RunTimers waits that ms instead).
  int64_t due_wall_ms = -1;
  DueRate rate;
};

class Pump;

// The pool-wide indexes (the registry, the due index, the active-queue index) are one key each.
// Redis 7.0 keeps a set's or sorted set's hash table at the size it once grew to (10,000
// one-off queues leave 128 KiB per index after they went), and a sorted set that once held
// more than 128 members stays a skiplist (17 KiB for the last one or two). So the pump owner
// looks at them every kCompactEveryMs (MEMORY USAGE, sampled: it counts the table exactly) and
// copies an index onto itself (ZUNIONSTORE / SUNIONSTORE: one atomic command; the copy's table
// fits its members, a small sorted set is a listpack again) when its table is mostly empty.
// Pure: tests/unit/queue/due_rate_test.cc.
inline constexpr int64_t kCompactEveryMs = 10000;
inline constexpr int64_t kCompactMinBytes = 8 * 1024;  // smaller tables are left alone
inline constexpr int64_t kCompactMaxMembers = 50000;   // bounds the copy (a few ms of Redis)
// Whether an index of `members` members using `bytes` (MEMORY USAGE) should be copied: it uses
// more than four times what its members need (128 bytes each at most, the table included).
inline bool IndexNeedsCompaction(int64_t bytes, int64_t members) {
  return bytes >= kCompactMinBytes && members <= kCompactMaxMembers && bytes > 4 * 128 * members;
}

// Thread 0's part, one per pool: the pool's pump ownership (own.lua on "dq:own" in that pool)
// and, while this instance owns it, the due-index poll that routes each queue due soon to the
// thread that pumps it.
class PumpOwnership {
 public:
  PumpOwnership(Loop& loop, Pump& pump, size_t pool_index)
      : loop_(loop), pump_(pump), pool_index_(pool_index) {}
  // Every loop tick: renews or tries for the ownership, and polls the due index as owner.
  void Tick();

 private:
  void Renew();
  // The owner: queues whose work falls due before the next poll, from the due index (but shards
  // of sharded queues that another instance owns).
  void PollDue();
  // Newly the owner: every registered queue is pumped once, which (re)writes its due index entry
  // (a due index lost in Redis, or data from a version without one).
  void PumpRegistered(std::string cursor);
  // A queue found in this pool's registry or due index: pumped in this pool.
  void Found(std::string tag, int64_t due_wall_ms);
  // The owner of a standalone pool: copies each mostly-empty index onto itself (see above).
  void CompactIndexes();

  Loop& loop_;
  Pump& pump_;
  const size_t pool_index_;  // in Loop::pools() (every thread adds the pools in config order)
  int64_t next_sweep_ms_ = 0;
  int64_t next_lease_ms_ = 0;
  int64_t next_compact_ms_ = 0;
  bool poll_in_flight_ = false;  // a due index read is on its way
};

class Pump {
 public:
  Pump(Loop& loop, Waiters& waiters, LatenessStats& lateness, ShardPumpTable& shards);
  ~Pump();

  void ScheduleDue(const std::string& tag, int64_t due_wall_ms);
  void OnQueueSeen(const std::string& tag, int64_t due_wall_ms);
  // To the thread that pumps `tag`: this one at once, another through its mailbox.
  void Route(const std::string& tag, int64_t due_wall_ms);
  void RunTimers();
  void Tick();
  // Monotonic ms of the next pump timer, or -1: the loop's wait timeout.
  int64_t NextWakeup() const { return wheel_.NextWakeup(); }
  size_t timers() const { return wheel_.size(); }    // pump timers pending (metrics)
  size_t tracked() const { return queues_.size(); }  // queues this thread keeps state of (tests)
  bool Follows(const std::string& tag);
  // Whether this instance owns the pump of the pool `tag`'s queue lives in.
  bool OwnsPoolOf(const std::string& tag);
  const ShardPumpTable& shards() const { return shards_; }

 private:
  void PumpQueue(const std::string& tag, int rounds);
  void SchedulePump(const std::string& tag, int64_t due_wall_ms);
  // `serve`: the jobs this instance's consumers take, told to pump.lua (Waiters::ServeCapacity).
  // `lease`: the consumer the call leased for (Waiters::ReserveForPump).
  void OnPumped(const std::string& tag, int rounds, int64_t serve,
                const std::optional<Waiters::PumpLease>& lease, const persist::UpstreamResult& r);
  // Drops the queue's QueuePump once it has nothing left to do.
  void Retire(const std::string& tag);

  Loop& loop_;
  Waiters& waiters_;
  LatenessStats& lateness_;
  ShardPumpTable& shards_;
  TimingWheel wheel_;  // before queues_: their timers cancel themselves on it when destroyed
  std::unordered_map<std::string, QueuePump> queues_;
  // Due times this thread already told other threads' pumps (throttles ScheduleDue).
  std::unordered_map<std::string, int64_t> told_;
  // Queues of queues_ kept only for a busy spell (quiet_until_ms): Tick forgets them once it
  // ended. At most one entry per queue of queues_.
  std::unordered_set<std::string> lingering_;
  int64_t next_forget_ms_ = 0;
  std::vector<std::unique_ptr<PumpOwnership>> ownership_;  // thread 0 only: one per pool
};

}  // namespace deferq::queue
