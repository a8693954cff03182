// Per-queue job counters and backlog (docs/metrics.md) as the storage scripts keep them in Redis.
//
// API:
//   QueueStatsPoller  loop 0, once per loop tick: every kPollMs reads the queues some instance
//                     worked on since its last read (the pool's active-queue index; at start and
//                     every kFullReadMs also the registry), at most `cap` of them, with qstats.lua,
//                     one call per kBatch (25) queues (on a Redis Cluster pool per kBatch queues
//                     of one hash slot: QstatsBatches), then stores one snapshot in the book.
//                     Never scans a queue: qstats reads the gauges and counters every script
//                     updates in the same atomic step as the job.
//   QueueStatsBook    the latest snapshot, read by /metrics and INFO queues on any thread.
//
// Why Redis and not counts of this instance: expiries and deaths happen inside the pump, consume
// and nack scripts, whose replies do not report them; the counters in Redis are exact for every
// event whichever instance caused it. So the figures are fleet-wide, and only the pool's pump
// owner exports them on /metrics (docs/metrics.md "Counting across instances"): summing over
// instances counts each once.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/thread_annotations.h"
#include "persist/keys.h"
#include "queue/model/queue_figures.h"
#include "queue/stats/figures_table.h"

namespace deferq::queue {

class InstanceFlags;

// The pool's active-queue index (persist::kActiveQueuesKey, docs/storage.md): entries older than
// the poller's active window (the retention, server.retain_seconds, plus kActiveMarginMs) are
// trimmed by every poll.
using persist::kActiveQueuesKey;

class LatenessStats;
class Loop;

struct QueueStatsSnapshot {
  int64_t taken_wall_ms = 0;  // when the read started (unix ms)
  // Since start (a counter): queues a read left out over the cap, and queues evicted from the
  // figures kept to make room for busier ones.
  uint64_t dropped_total = 0;
  // "ns/queue" -> figures, in name order (<= cap); shares what did not change with the
  // snapshot before it.
  FiguresTable queues;
};

class QueueStatsBook {
 public:
  // `cap` is the export cap; more queues than that are noted (up to kMinNotes per poll), so the
  // poller can count the queues over the cap.
  static constexpr size_t kMinNotes = 10000;
  explicit QueueStatsBook(size_t cap = 1000) : cap_(std::max(cap, kMinNotes)) {}

  void Store(std::shared_ptr<const QueueStatsSnapshot> snapshot);
  // The latest snapshot, or null before the first read completed.
  std::shared_ptr<const QueueStatsSnapshot> Load() const;

  // A job command ran on queue `tag` (any thread). A queue whose jobs are consumed and acked
  // within a poll period would never be in the registry when the poller looks, so the poller
  // publishes the queues noted here to the pool's active-queue index (dq:active) and every
  // instance reads them from there. Cheap: each thread takes the lock once per queue per poll.
  void NoteActive(const std::string& tag);
  // The queues noted since the last call (at most the note bound), for the poller.
  std::vector<std::string> TakeActive();
  // Notes refused over the bound since the last call (a flood of queue names).
  uint64_t TakeNotesDropped() { return notes_dropped_.exchange(0, std::memory_order_relaxed); }

 private:
  const size_t cap_;  // the bound on notes per poll
  std::atomic<uint64_t> notes_dropped_{0};
  mutable base::Mutex mu_;  // held for a pointer copy, or one insert
  std::shared_ptr<const QueueStatsSnapshot> snapshot_ DQ_GUARDED_BY(mu_);
  std::vector<std::string> active_ DQ_GUARDED_BY(mu_);
  std::atomic<uint64_t> epoch_{0};  // bumped by TakeActive: threads forget what they noted
};

class QueueStatsPoller {
 public:
  // How often the figures are read: /metrics gauges are at most this (plus one round trip) old.
  static constexpr int64_t kPollMs = 2000;
  // A queue stays in the active-queue index this much longer than its retention
  // (server.retain_seconds) after its last job command: long enough for a read after its
  // counters went, so a finished queue leaves the index (and its series /metrics) with them.
  static constexpr int64_t kActiveMarginMs = 3 * kPollMs + 5000;
  // Every queue in the registries and the index is read again this often (heals notes lost
  // with an instance that died between a script call and its next read).
  static constexpr int64_t kFullReadMs = 600 * 1000;
  static constexpr int64_t kSlackMs = 5000;  // see ReadActive
  // After a round that left activity unread (over the cap), every queue in the figures is read
  // again within this long, active or not (only then: an idle queue is not read).
  static constexpr int64_t kRefreshMs = 10000;
  // Queues per qstats call: ~0.4 ms of Redis each under load, so a pump call queued behind one
  // is not held back long (100 per call: ~1.8 ms, visible in the lateness p99 of 1,000 queues).
  static constexpr size_t kBatch = 25;
  // A pool whose read failed keeps its figures in the snapshot for one missed round (a blip),
  // then they leave it until a read succeeds: the other pools' figures stay fresh meanwhile.
  static constexpr int64_t kKeepFailedMs = kPollMs + 1000;

  // `lateness`, when given, forgets the histogram of a queue whose counters went (a finished
  // queue leaves no series).
  QueueStatsPoller(Loop& loop, QueueStatsBook& book, size_t cap, LatenessStats* lateness = nullptr);
  ~QueueStatsPoller();
  // Called on every loop tick of the worker's thread; starts a read when one is due.
  void Tick();

 private:
  struct Round;
  // The index in Loop::pools() of the pool queue `tag` ("ns/queue") lives in, if any.
  std::optional<size_t> PoolIndexOf(const std::string& tag);
  void ReadActive(const std::shared_ptr<Round>& round, size_t pool,
                  const std::vector<std::string>& noted);
  void Scan(const std::shared_ptr<Round>& round, size_t pool, std::string cursor);
  void ScanDone(const std::shared_ptr<Round>& round, size_t pool);
  void ReadQueues(const std::shared_ptr<Round>& round);
  void ReadNext(const std::shared_ptr<Round>& round);
  void Finish(const std::shared_ptr<Round>& round);
  // Queue `tag` has nothing left in Redis (or left the figures): its lateness histogram goes.
  void Forget(const std::string& tag);

  Loop& loop_;
  QueueStatsBook& book_;
  const size_t cap_;
  LatenessStats* const lateness_;
  const int64_t retain_ms_;  // server.retain_seconds: how long a finished queue keeps counters
  const int64_t active_ms_;  // how long a queue stays in the active-queue index
  int64_t next_poll_ms_ = 0;
  // Per pool (by index in Loop::pools()): the next full read (monotonic), and when its last
  // successful read started (unix ms).
  std::vector<int64_t> next_full_ms_;
  std::vector<int64_t> last_ok_wall_ms_;
  bool in_flight_ = false;
  uint64_t dropped_total_ = 0;  // QueueStatsSnapshot::dropped_total
  // Until then (unix ms) the queues kept are read again every kRefreshMs: a round left activity
  // unread (Finish).
  int64_t refresh_until_wall_ms_ = 0;
  // Every queue read so far (at most the cap), with its latest figures: a queue nobody worked
  // on since keeps them, since only scripts change them and scripts are noted. Over the cap,
  // the queues read longest ago (the least recently active) make room.
  struct Known {
    QueueFigures figures;
    int64_t read_wall_ms = 0;  // the round that last read it
    // When it was first read holding no job in any state with these figures (0: it holds
    // jobs). Its counters go retain_ms_ later (docs/storage.md "Retention"): from then on every
    // round reads it again, until it reads as nothing and leaves the figures.
    int64_t finished_wall_ms = 0;
    size_t pool = 0;
  };
  // known_ changes only through these two, which keep the counts below and note the change
  // for the next snapshot. SetKnown's `it` may be a new entry (try_emplace: read_wall_ms 0).
  std::map<std::string, Known>::iterator EraseKnown(std::map<std::string, Known>::iterator it);
  void SetKnown(std::map<std::string, Known>::iterator it, const Known& k);
  void Count(const Known& k, int sign);
  std::map<std::string, Known> known_;
  std::vector<size_t> per_pool_;  // entries of known_ per pool (by index in Loop::pools())
  size_t finished_ = 0;           // entries of known_ with finished_wall_ms set
  // The figures of known_ as the last snapshot has them, and what changed since: each round's
  // snapshot is that table with those changes (only their chunks copied).
  FiguresTable table_;
  std::map<std::string, std::optional<QueueFigures>> changes_;
  // Queues with a lateness histogram but no figures here (over the cap), quiet for the
  // retention: when each was last read to see whether it is gone (monotonic ms).
  std::map<std::string, int64_t> quiet_checked_;
  std::shared_ptr<bool> alive_;  // callbacks outliving the poller do nothing
};

// The qstats calls of one pool's read: `tags` ("ns/queue", each parseable) in batches of at most
// `batch`, in the order given. A Redis Cluster (`by_slot`) refuses a call whose keys lie in
// different hash slots (CROSSSLOT), and each queue's keys carry its own tag, so there the queues
// are grouped by slot first: one call per slot that holds queues to read (a few queues share a
// slot, most have one of their own), each sent to that slot's master. Standalone pools: one
// call per `batch` queues, whatever their slots.
std::vector<std::vector<std::string>> QstatsBatches(const std::vector<std::string>& tags,
                                                    bool by_slot, size_t batch);

// A script ran (or will run) on queue `tag`: job commands, consumes and pump calls note their
// queue, so the poller reads it again (at most once per queue per thread per poll period).
// The book is the one its poller registered in `flags` (none: nothing is noted).
void NoteQueueActivity(InstanceFlags& flags, const std::string& tag);

}  // namespace deferq::queue
