// Per-queue job counters and backlog (SPEC §5, §8) as the storage scripts keep them in Redis.
//
// API:
//   QueueStatsPoller  loop 0, once per loop tick: every kPollMs reads each pool's queue registry
//                     (SSCAN, at most `cap` queues) and runs qstat.lua once per queue, pipelined,
//                     then stores one snapshot in the book. Never scans a queue: qstat reads the
//                     gauges and counters every script updates in the same atomic step as the job.
//   QueueStatsBook    the latest snapshot, read by /metrics and INFO queues on any thread.
//
// Why Redis and not counts of this instance: expiries and deaths happen inside the pump, consume
// and nack scripts, whose replies do not report them; the counters in Redis are exact for every
// event whichever instance caused it. So the figures are fleet-wide, and only the pool's pump
// owner exports them on /metrics (docs/metrics.md "Counting across instances"): summing over
// instances counts each once.
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

class Worker;

// One queue's figures, in the order qstat.lua answers them.
struct QueueFigures {
  enum Field {
    kReady,
    kDelayed,
    kLeased,
    kDead,
    kPublished,
    kConsumed,
    kAcked,
    kExpired,
    kDeadTotal,
    kNacked,
    kRespawned,
    kCancelled,
    kPaused,  // 1 while the queue is paused (QPAUSE); a state, not a counter
    kFields
  };
  std::array<int64_t, kFields> v{};
  bool empty() const {
    for (int64_t x : v) {
      if (x != 0) return false;
    }
    return true;
  }
};

struct QueueStatsSnapshot {
  int64_t taken_wall_ms = 0;                   // when the read started (unix ms)
  uint64_t dropped = 0;                        // registered queues left out over the cap
  std::map<std::string, QueueFigures> queues;  // "ns/queue" -> figures, in name order
};

class QueueStatsBook {
 public:
  explicit QueueStatsBook(size_t cap = 1000) : cap_(cap) {}

  void Store(std::shared_ptr<const QueueStatsSnapshot> snapshot);
  // The latest snapshot, or null before the first read completed.
  std::shared_ptr<const QueueStatsSnapshot> Load() const;

  // A job command ran on queue `tag` (any thread). A queue whose jobs are consumed and acked
  // within a poll period would never be in the registry when the poller looks, so the poller
  // publishes the queues noted here to the pool's active-queue index (dq:active) and every
  // instance reads them from there. Cheap: each thread takes the lock once per queue per poll.
  void NoteActive(const std::string& tag);
  // The queues noted since the last call (at most the cap), for the poller.
  std::vector<std::string> TakeActive();

 private:
  const size_t cap_;
  mutable base::Mutex mu_;  // held for a pointer copy, or one insert
  std::shared_ptr<const QueueStatsSnapshot> snapshot_ DQ_GUARDED_BY(mu_);
  std::vector<std::string> active_ DQ_GUARDED_BY(mu_);
  std::atomic<uint64_t> epoch_{0};  // bumped by TakeActive: threads forget what they noted
};

class QueueStatsPoller {
 public:
  // How often the figures are read: /metrics gauges are at most this (plus one round trip) old.
  static constexpr int64_t kPollMs = 2000;
  // A queue stays in the active-queue index this long after its last job command.
  static constexpr int64_t kActiveMs = 3600 * 1000;
  // Every queue in the registries and the index is read again this often (heals notes lost
  // with an instance that died between a script call and its next read).
  static constexpr int64_t kFullReadMs = 600 * 1000;
  static constexpr int64_t kSlackMs = 5000;  // see ReadActive
  static constexpr size_t kBatch = 100;      // queues per qstats call

  QueueStatsPoller(Worker& worker, QueueStatsBook& book, size_t cap);
  ~QueueStatsPoller();
  // Called on every loop tick of the worker's thread; starts a read when one is due.
  void Tick();

 private:
  struct Round;
  void ReadActive(const std::shared_ptr<Round>& round, size_t pool,
                  const std::vector<std::string>& noted);
  void Scan(const std::shared_ptr<Round>& round, size_t pool, std::string cursor);
  void ScanDone(const std::shared_ptr<Round>& round, size_t pool);
  void ReadQueues(const std::shared_ptr<Round>& round);
  void Finish(const std::shared_ptr<Round>& round);

  Worker& worker_;
  QueueStatsBook& book_;
  const size_t cap_;
  int64_t next_poll_ms_ = 0;
  int64_t next_full_ms_ = 0;       // monotonic: the next full read
  int64_t last_read_wall_ms_ = 0;  // when the last complete read started (unix ms)
  bool in_flight_ = false;
  uint64_t dropped_ = 0;  // from the last full read
  // Every queue read so far (bounded by the cap), with its latest figures: a queue nobody
  // worked on since keeps them, since only scripts change them and scripts are noted.
  std::map<std::string, QueueFigures> known_;
  std::shared_ptr<bool> alive_;  // callbacks outliving the poller do nothing
};

// A script ran (or will run) on queue `tag`: job commands, consumes and pump calls note their
// queue, so the poller reads it again (at most once per queue per thread per poll period).
void NoteQueueActivity(const std::string& tag);

}  // namespace deferq::queue
