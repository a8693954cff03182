// Blocked consumers: the clients parked in CONSUME ... TIMEOUT until one of their queues gets
// ready jobs, served first come, first served across the threads of an instance.
//
// API (in the manner of Redis's blocked.c):
//   Waiters::Consume(w, block)   runs CONSUME; with nothing ready and `block`, parks the waiter
//   Waiters::AnnounceReady(tag)  jobs became ready on `tag` (a publish, a pump, a wake-up from
//                                another instance): routed to the thread holding the instance's
//                                oldest consumer blocked on it, which runs OnQueueReady
//   Waiters::OnQueueReady(tag)   jobs became ready on `tag`: this thread's oldest waiter on it
//                                tries a consume script, if it is the instance's oldest
//   Waiters::OnClientGone(id)    a client left: its waiter is forgotten, its queues offered on
//   Waiters::Tick()              deadlines (null replies), the safety-net poll, the markers
//                                that ask other instances to announce ready jobs, and the
//                                re-check of parked consumers' namespace bindings
//   Waiters::ReleaseAll()        server stop: every parked consumer gets its null reply now
//   WaiterOrder                  the instance-wide arrival order: which thread holds the oldest
//                                consumer blocked on a queue (the one shared, locked structure)
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/thread_annotations.h"
#include "queue/client_port.h"

namespace deferq::queue {

// The pool's wake-up channel: the storage scripts publish "ns/queue" there when jobs become ready
// on a queue some instance has consumers blocked on (common.lua announce_ready), QRESUME too;
// and an instance whose consumers start waiting on a queue publishes kWaitNews .. "ns/queue",
// so the instance that pumps it moves its due jobs at their due ms from then on (pump.lua
// lazy_ms). Queue names hold no space, so the two cannot be confused.
inline constexpr const char* kReadyChannel = "dq:ready";
inline constexpr std::string_view kWaitNews = "wait ";

class Worker;
struct JobEntry;
struct NamespaceEntry;

// Where a waiter stands in its life.
struct WaiterState {
  bool attempt_in_flight = false;  // a consume script for it is in flight
  bool blocked = false;            // parked (TIMEOUT > 0 and nothing was ready)
  bool done = false;               // answered, or the client left
};

// The token binding a CONSUME ran under (auth.required, a namespace connection; empty
// otherwise) and until when (monotonic ms) it was last found valid. A parked consumer takes no
// job past that time until the binding is checked again, as NamespaceGate does for a command; a
// revoked binding is answered -NOAUTH instead of a job (SPEC §8).
struct WaiterAuth {
  std::string token_digest;
  int64_t valid_until_ms = 0;
  bool check_in_flight = false;
};

// A client blocked in CONSUME.
struct Waiter {
  ClientPort* port = nullptr;  // where `ticket` is owed (the connection, or an EXEC collecting it)
  ReplyTicket ticket;
  uint64_t seq = 0;  // instance-wide arrival order (WaiterOrder::NextSeq)
  std::string ns;
  std::vector<std::string> queues;  // priority order
  int64_t ttr_ms = 0;
  int count = 0;            // 0: no COUNT given (reply is one job, not an array)
  int64_t deadline_ms = 0;  // monotonic; 0 = forever
  WaiterState state;
  // Called with the number of jobs when the reply is written (the rate limiter's refund).
  std::function<void(size_t jobs)> on_reply;
  WaiterAuth auth;
};

// The consumers blocked anywhere in this instance, per queue tag, oldest first: the only state
// the threads' Waiters share. One per instance (net::Server owns it); every thread may call it.
// Touched only when a client blocks or unblocks, and by the wake-ups of queues somebody is
// blocked on, so a mutex is cheap here; it is never held while anything else is locked.
class WaiterOrder {
 public:
  uint64_t NextSeq() { return next_seq_.fetch_add(1, std::memory_order_relaxed); }
  void Add(const std::string& tag, uint64_t seq, int thread);
  void Remove(const std::string& tag, uint64_t seq);
  // True when `seq` is the oldest consumer blocked on `tag` in this instance.
  bool IsOldest(const std::string& tag, uint64_t seq) const;
  // The thread holding the oldest consumer blocked on `tag`, or -1.
  int OldestThread(const std::string& tag) const;
  // Cheap check so publishers skip the work while nobody is blocked anywhere.
  bool AnyBlocked() const { return blocked_.load(std::memory_order_relaxed) > 0; }
  // Registrations (a consumer blocked on several queues counts once per queue).
  int64_t blocked() const { return blocked_.load(std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> blocked_{0};
  std::atomic<uint64_t> next_seq_{1};
  mutable base::Mutex mu_;
  // seq -> thread index, per queue tag.
  std::unordered_map<std::string, std::map<uint64_t, int>> by_tag_ DQ_GUARDED_BY(mu_);
};

// One thread's blocked consumers.
class Waiters {
 public:
  Waiters(Worker& worker, WaiterOrder& order) : worker_(worker), order_(order) {}

  // Runs CONSUME for `w`: leases from its queues in priority order and replies; when nothing is
  // ready and block_if_empty, parks it until one of its queues gets ready jobs or its deadline.
  void Consume(std::shared_ptr<Waiter> w, bool block_if_empty);
  // Jobs became ready on `tag`: offered to this thread's oldest consumer blocked on it (the news
  // is routed to the thread holding the instance's oldest one).
  void OnQueueReady(const std::string& tag);
  // Announces ready jobs on `tag` to the thread holding the instance's oldest consumer blocked
  // on it (this one at once, another through Peers::PostReady).
  void AnnounceReady(const std::string& tag);
  void OnClientGone(uint64_t client_id);
  // Once per loop tick (100 ms).
  void Tick();
  void ReleaseAll();
  size_t blocked() const { return blocked_count_; }

 private:
  void Block(std::shared_ptr<Waiter> w);
  void Unregister(const std::shared_ptr<Waiter>& w);
  // Sets (renews) the marker key P.."wt" that asks every instance's scripts to announce `tag`'s
  // ready jobs; news: also tell the pool that consumers now wait on it (kWaitNews), for its pump.
  void MarkBlocked(const std::string& tag, bool news);
  void Reply(const std::shared_ptr<Waiter>& w, std::vector<JobEntry>& jobs,
             const std::string& error);
  // Gives back leases taken for a client that left before its reply was written.
  void Release(const std::vector<JobEntry>& jobs);
  // The token binding of `w` is older than auth.cache_seconds: it must be checked again before
  // `w` takes a job.
  bool BindingStale(const Waiter& w) const;
  // Checks it again (the namespace's cached entry if fresh, else an upstream lookup; never
  // blocks): renewed, `w` is offered its queues; revoked, `w` is answered -NOAUTH.
  void RecheckBinding(const std::shared_ptr<Waiter>& w);
  void ApplyBinding(const std::shared_ptr<Waiter>& w, const NamespaceEntry& e);

  Worker& worker_;
  WaiterOrder& order_;
  // Blocked consumers by queue tag, first come first served.
  std::unordered_map<std::string, std::deque<std::shared_ptr<Waiter>>> by_queue_;
  std::vector<std::shared_ptr<Waiter>> all_;
  size_t blocked_count_ = 0;
  int64_t next_marker_ms_ = 0;
};

}  // namespace deferq::queue
