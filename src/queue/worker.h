// The queue room's state on one loop thread: its upstream pool clients, its id generator, the
// consumers blocked in CONSUME on this thread, and the pump that moves due jobs and expired
// leases to ready for the queues this thread owns.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "config.h"
#include "persist/pool.h"
#include "queue/client_port.h"
#include "queue/job_id.h"
#include "queue/lateness.h"
#include "queue/timing_wheel.h"

namespace deferq::queue {

// Coordination between the loop threads of one instance (implemented by net::Server).
// Blocked consumers are registered globally per queue tag ("ns/queue") with a global sequence
// number, so a queue that gets ready jobs is offered to the oldest consumer blocked on it,
// whichever thread that consumer is on (first come, first served across threads).
class Notifier {
 public:
  // Jobs became ready on `tag`: wakes the loop holding the oldest consumer blocked on it (at once
  // when that is the calling thread).
  virtual void QueueReady(const std::string& tag) = 0;
  // Cheap check so publishers skip the work while nobody is blocked anywhere.
  virtual bool AnyBlocked() const = 0;
  virtual uint64_t NextWaiterSeq() = 0;
  virtual void AddWaiter(const std::string& tag, uint64_t seq, int loop) = 0;
  virtual void RemoveWaiter(const std::string& tag, uint64_t seq) = 0;
  // True when `seq` is the oldest consumer blocked on `tag` in this instance.
  virtual bool IsOldest(const std::string& tag, uint64_t seq) const = 0;
  // Queue `tag` has work falling due at due_wall_ms (unix ms): makes sure the thread that pumps
  // it knows the queue and schedules its pump no later than that.
  virtual void QueueSeen(const std::string& tag, int64_t due_wall_ms) = 0;
  // This instance's id (random per process), for the pump leases in Redis.
  virtual const std::string& instance_id() const = 0;

 protected:
  ~Notifier() = default;
};

// A queue as the scripts see it.
struct QueueName {
  std::string ns;
  std::string queue;
  std::string tag() const { return ns + "/" + queue; }
  // KEYS[1] of every script: all keys of the queue share this prefix and its hash tag.
  std::string prefix() const { return "dq:{" + ns + "/" + queue + "}:"; }
};

// A client blocked in CONSUME.
struct Waiter {
  ClientPort* port = nullptr;  // where `ticket` is owed (the connection, or an EXEC collecting it)
  ReplyTicket ticket;
  uint64_t seq = 0;  // global arrival order (Notifier::NextWaiterSeq)
  std::string ns;
  std::vector<std::string> queues;  // priority order
  int64_t ttr_ms = 0;
  int count = 0;            // 0: no COUNT given (reply is one job, not an array)
  int64_t deadline_ms = 0;  // monotonic; 0 = forever
  bool attempt_in_flight = false;
  bool blocked = false;  // parked (TIMEOUT > 0 and nothing was ready)
  bool done = false;     // answered, or the client left
};

struct JobEntry;

class Worker {
 public:
  Worker(const Config& config, ClientPort& port, Notifier& notifier, LatenessStats& lateness,
         int thread_index, int threads);
  ~Worker();

  void AddPool(std::unique_ptr<persist::PoolClient> pool);
  // The pool a namespace's queues live in (namespace administration will bind namespaces to
  // pools; today every namespace lives in pool "default").
  persist::PoolClient* PoolFor(const std::string& ns);
  const std::vector<std::unique_ptr<persist::PoolClient>>& pools() const { return pools_; }

  const Config& config() const { return config_; }
  IdGenerator& ids() { return ids_; }
  ClientPort& port() { return port_; }
  Notifier& notifier() { return notifier_; }
  int64_t now_ms() const { return now_ms_; }    // monotonic
  int64_t wall_ms() const { return wall_ms_; }  // unix ms

  // Runs CONSUME for `w`: leases from its queues in priority order and replies; when nothing is
  // ready and block_if_empty, parks it until one of its queues gets ready jobs or its deadline.
  void Consume(std::shared_ptr<Waiter> w, bool block_if_empty);
  // Jobs became ready on `tag`: offered to this thread's oldest consumer blocked on it (the
  // Notifier routes the news to the thread holding the instance's oldest one).
  void OnQueueReady(const std::string& tag);
  // Announces ready jobs on `tag` to every consumer of this instance that may want them.
  void AnnounceReady(const std::string& tag);
  // Work on queue `tag` falls due at due_wall_ms (a delayed job, a lease end): the thread that
  // pumps the queue runs its pump at that millisecond (through the timing wheel).
  void ScheduleDue(const std::string& tag, int64_t due_wall_ms);
  // The owning thread's side of ScheduleDue, also reached through the Notifier.
  void OnQueueSeen(const std::string& tag, int64_t due_wall_ms);
  // Runs the pumps whose time has come (every loop iteration).
  void RunTimers();
  // Monotonic ms of the next pump timer, or -1: the loop's wait timeout.
  int64_t NextWakeup() const { return wheel_.NextWakeup(); }
  void OnClientGone(uint64_t client_id);

  // Once per loop tick (100 ms) and per loop iteration.
  void Tick(int64_t now_ms, int64_t wall_ms);
  void SetClock(int64_t now_ms, int64_t wall_ms) {
    now_ms_ = now_ms;
    wall_ms_ = wall_ms;
  }
  void Flush();
  // Server stop: blocked consumers are answered null at once; then, once every client is gone,
  // Shutdown() closes the upstream connections.
  void ReleaseWaiters();
  void Shutdown();
  bool quiescent() const;
  size_t blocked() const { return blocked_count_; }
  size_t timers() const { return wheel_.size(); }  // pump timers pending (metrics)

 private:
  void Block(std::shared_ptr<Waiter> w);
  void Unregister(const std::shared_ptr<Waiter>& w);
  void MarkBlocked(const std::string& tag);
  void TryServe(const std::string& tag);
  void Reply(const std::shared_ptr<Waiter>& w, std::vector<JobEntry>& jobs,
             const std::string& error);
  // Gives back leases taken for a client that left before its reply was written.
  void Release(const std::vector<JobEntry>& jobs);
  void Pump();
  void PumpQueue(const std::string& tag, int rounds);
  void SchedulePump(const std::string& tag, int64_t due_wall_ms);
  void OnPumped(const std::string& tag, int rounds, const persist::UpstreamResult& r);
  // Thread 0: takes or keeps the pool's pump ownership (own.lua on "dq:own").
  void RenewOwnership();
  // The pump owner: queues whose work falls due before the next poll, from the due index.
  void PollDue();
  // Newly the owner: every registered queue is pumped once, which (re)writes its due index entry
  // (a due index lost in Redis, or data from a version without one).
  void PumpRegistered(std::string cursor);
  void Route(const std::string& tag, int64_t due_wall_ms);
  bool Owns(const std::string& tag) const;

  const Config& config_;
  ClientPort& port_;
  Notifier& notifier_;
  LatenessStats& lateness_;
  const int thread_index_;
  const int threads_;
  std::vector<std::unique_ptr<persist::PoolClient>> pools_;
  IdGenerator ids_;
  int64_t now_ms_ = 0;
  int64_t wall_ms_ = 0;

  std::unordered_set<std::string> pumping_;  // pump call in flight per queue
  std::unordered_set<std::string> repump_;   // a timer fired while its pump was in flight
  int64_t next_sweep_ms_ = 0;
  int64_t next_marker_ms_ = 0;
  int64_t next_lease_ms_ = 0;
  bool poll_in_flight_ = false;  // thread 0: a due index read is on its way

  // Pump timers of the queues this thread owns: one per queue, at its next due millisecond. An
  // entry lives while its timer is armed, so queues without work cost nothing here.
  struct PumpTimer {
    TimingWheel::TimerId id = 0;
    int64_t at_ms = 0;    // monotonic
    uint64_t number = 0;  // the wheel's value: key of timer_tags_
  };
  TimingWheel wheel_;
  std::unordered_map<std::string, PumpTimer> pump_timers_;
  std::unordered_map<uint64_t, std::string> timer_tags_;  // wheel value -> queue tag
  uint64_t next_tag_number_ = 1;
  // Busy queues: no pump before this monotonic ms (coalescing, see kCoalesceMs).
  std::unordered_map<std::string, int64_t> quiet_until_;
  // Due times this thread already announced to other threads' pumps (throttles ScheduleDue).
  std::unordered_map<std::string, int64_t> announced_;

  // Blocked consumers by queue tag, first come first served.
  std::unordered_map<std::string, std::deque<std::shared_ptr<Waiter>>> waiters_;
  std::vector<std::shared_ptr<Waiter>> all_waiters_;
  size_t blocked_count_ = 0;
};

}  // namespace deferq::queue
