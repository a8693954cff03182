// Blocked consumers: the clients parked in CONSUME ... TIMEOUT until one of their queues gets
// ready jobs, served first come, first served across the threads of an instance.
//
// API (in the manner of Redis's blocked.c):
//   Waiters::Consume(w, block)   runs CONSUME; with nothing ready and `block`, parks the waiter
//   Waiters::AnnounceReady(tag)  jobs became ready on `tag` (a publish, a pump, a wake-up from
//                                another instance): routed to the thread holding the instance's
//                                oldest consumer blocked on it, which runs OnQueueReady
//   Waiters::OnQueueReady(tag)   jobs became ready on `tag`: this thread's oldest waiter on it
//                                tries that queue (one consume call), if it is the instance's
//                                oldest; a waiter whose attempt is in flight remembers it
//   Waiters::OnClientGone(id)    a client left: its waiter is forgotten, the queues announced to
//                                it and not tried offered on
//   Waiters::OnSubscribed()      the pool's wake-up channel is (again) subscribed: news may have
//                                been lost, so every blocked queue is read once
//   Waiters::Tick()              deadlines (null replies), the safety-net read (a bounded number
//                                of blocked queues per second, whatever their number), the
//                                markers that ask other instances to announce ready jobs
//                                (renewed in batches), and the re-check of parked consumers'
//                                namespace bindings
//
// Cost (issue 21): a CONSUME of n queues is one call (one per slot run on a cluster); a wake-up
// tries only the queue announced; a queue nobody publishes to costs nothing while consumers wait
// on it, but its marker's renewal (one batched call per 100 queues per 10 s) and its share of
// the safety-net read.
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
#include <set>
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
  std::vector<std::string> tags;  // "ns/queue" of each of `queues`
  // Indices of queues announced and not tried yet (an attempt was in flight, or the binding was
  // due for its re-check): tried next, in priority order.
  std::set<size_t> pending;
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
  // A consumer (arrival `seq`, on `thread`) blocks on each of `tags` / stops waiting; one lock
  // for all of them (a CONSUME may name 1,000 queues).
  void AddAll(const std::vector<std::string>& tags, uint64_t seq, int thread);
  void RemoveAll(const std::vector<std::string>& tags, uint64_t seq);
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
  void OnSubscribed();
  // Once per loop tick (100 ms).
  void Tick();
  void ReleaseAll();
  size_t blocked() const { return blocked_count_; }

 private:
  void Block(std::shared_ptr<Waiter> w);
  void Unregister(const std::shared_ptr<Waiter>& w);
  // One consume attempt of `w` over its queues `order` (indices, priority order).
  void Attempt(const std::shared_ptr<Waiter>& w, std::vector<size_t> order);
  // Tries the queues announced to `w` and not tried yet, when no attempt is in flight.
  void TryPending(const std::shared_ptr<Waiter>& w);
  // Sets (renews) the marker keys P.."wt" of `tags` that ask every instance's scripts to
  // announce their ready jobs (marks.lua, batched); news: for each marker created, also tell the
  // pool that consumers now wait on it (kWaitNews, for its pump), and offer the queue here (a job
  // made ready just before the marker existed was announced to nobody).
  void Mark(std::vector<std::string> tags, bool news);
  void RenewMarkers(int64_t now_ms);
  // The safety net: the ready gauges of the next kSafetyBatch blocked queues, or all of them
  // (qstats); queues with ready jobs are offered to their waiters.
  void SafetyPoll(bool all);
  void Reply(const std::shared_ptr<Waiter>& w, std::vector<JobEntry>& jobs,
             const std::string& error, const std::vector<std::string>& still_ready);
  // Offers the queues `w` leaves with ready jobs, and those announced to it and not tried, to
  // the next consumers.
  void PassOn(const std::shared_ptr<Waiter>& w, const std::vector<std::string>& still_ready);
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
  // A blocked consumer in one of its queues' lines: which of its queues that is.
  struct Parked {
    std::shared_ptr<Waiter> waiter;
    size_t index;
  };
  // Blocked consumers by queue tag, by arrival (first come, first served); a consumer leaves
  // every line when it is answered or gone. Ordered by tag: the safety net's round robin walks it.
  std::map<std::string, std::map<uint64_t, Parked>> by_queue_;
  // The blocked consumers by (deadline, seq), by (binding valid until, seq) when bound to a
  // token, and by client: what the tick and a disconnect look at, so neither walks them all.
  std::map<std::pair<int64_t, uint64_t>, std::shared_ptr<Waiter>> deadlines_;
  std::map<std::pair<int64_t, uint64_t>, std::shared_ptr<Waiter>> rechecks_;
  std::unordered_multimap<uint64_t, std::shared_ptr<Waiter>> by_client_;
  size_t blocked_count_ = 0;
  // Until when (monotonic ms) this thread's marker of a queue needs no renewal.
  std::unordered_map<std::string, int64_t> marked_until_;
  int64_t next_marker_ms_ = 0;
  int64_t next_safety_ms_ = 0;
  std::string safety_cursor_;  // the last tag the safety net read
  bool safety_in_flight_ = false;
  uint64_t subscribed_seen_ = 0;  // the instance's subscription epoch this thread last swept for
};

}  // namespace deferq::queue
