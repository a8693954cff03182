// Blocked consumers: the clients parked in CONSUME ... TIMEOUT until one of their queues gets
// ready jobs, served first come, first served across the threads of an instance.
//
// API (in the manner of Redis's blocked.c):
//   Waiters::Consume(w, block)   runs CONSUME: leases from the queues not known to hold nothing
//                                (none known: no call at all); with nothing leased and `block`,
//                                parks the waiter until one of its queues gets ready jobs or
//                                its deadline
//   Waiters::AnnounceReady(tag)  jobs became ready on `tag` (a publish, a pump, a wake-up from
//                                another instance): recorded in every queue set naming `tag`,
//                                and routed to the thread holding the instance's oldest consumer
//                                blocked on it, which runs OnQueueReady
//   Waiters::OnQueueReady(tag)   that consumer tries that queue (one consume call); one whose
//                                attempt is in flight remembers it (pending)
//   Waiters::OnClientGone(id)    a client left: its waiter is forgotten, the queues announced to
//                                it and not tried offered on
//   (resubscribed)               the pool's wake-up channel is (again) subscribed
//                                (InstanceFlags::Resubscribed): news may have been lost, so what
//                                is known is forgotten and every blocked queue is read once
//   Waiters::Tick()              deadlines (null replies), re-checks of parked consumers'
//                                namespace bindings, the safety-net read (a bounded number of
//                                blocked queues per second, whatever their number), the markers
//                                that ask every instance to announce ready jobs (renewed in
//                                batches), the sets nobody used for a while
//   Waiters::ReleaseAll()        server stop: every parked consumer gets its null reply now
//   WaiterOrder                  the instance-wide state: the queue sets, who is blocked on each
//                                and in which order, and what is known of their queues (the one
//                                shared, locked structure)
//
// Cost (issue 21). Consumers that name the same queues (one namespace, the same list in the same
// order) share a QueueSet: blocking, waking and answering one costs the same whatever the
// number of queues it names. A set remembers which of its queues were found empty and had no
// news since ("known empty"), trusted only while this instance's wait markers on them stand
// (every ready job of a marked queue is announced); a CONSUME reads only the others, so a
// consumer back from its jobs costs Redis nothing while its 1,000 queues hold none. A queue
// nobody publishes to costs nothing while consumers wait on it but its marker's renewal (one
// batched call per 100 queues every two minutes) and its share of the safety-net read.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "base/thread_annotations.h"
#include "persist/keys.h"
#include "queue/context/client_port.h"

namespace deferq::queue {

// The pool's wake-up channel: the storage scripts publish "ns/queue" there when jobs become ready
// on a queue some instance has consumers blocked on (common/moving.lua announce_ready), QRESUME
// too; and an instance whose consumers start waiting on a queue publishes kWaitNews .. "ns/queue",
// so the instance that pumps it moves its due jobs at their due ms from then on (pump.lua
// lazy_ms). Queue names hold no space, so the two cannot be confused.
using persist::kReadyChannel;
inline constexpr std::string_view kWaitNews = "wait ";
// And the scripts publish kEmptyNews .. "ns/queue" when the ready list of a queue with a marker
// went empty (common/keys.lua announce_empty): no instance need read it until its next ready news.
inline constexpr std::string_view kEmptyNews = "empty ";

class Loop;
struct QueueSet;
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
// revoked binding is answered -NOAUTH instead of a job (docs/commands.md, errors and limits).
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
  int64_t ttr_ms = 0;
  int count = 0;            // 0: no COUNT given (reply is one job, not an array)
  int64_t deadline_ms = 0;  // monotonic; 0 = forever
  WaiterState state;
  QueueSet* set = nullptr;  // its queues (priority order), shared (Waiters::Consume)
  // Indices of queues announced and not tried yet (an attempt was in flight, or the binding was
  // due for its re-check): tried next, in priority order.
  std::set<size_t> pending;
  // Called with the number of jobs when the reply is written (the rate limiter's refund).
  std::function<void(size_t jobs)> on_reply;
  WaiterAuth auth;
};

// The queues consumers name in one CONSUME: a namespace and its queues in priority order. Every
// consumer naming the same list, on any thread of the instance, shares one (WaiterOrder interns
// them). `tags` never changes; the rest belongs to the WaiterOrder's lock.
struct QueueSet {
  std::string key;                    // the interning key (namespace and list)
  std::vector<std::string> queues;    // the names, priority order
  std::vector<std::string> tags;      // "ns/queue" of each
  std::vector<std::string> prefixes;  // its keys' prefix P of each
  // Consumers blocked on it: arrival seq -> their thread and how many jobs each takes at most.
  std::map<uint64_t, std::pair<int, int>> waiting;
  int64_t capacity = 0;           // the jobs those consumers take at most, in all
  std::vector<uint64_t> news_at;  // per queue: `news` when its last news came
  // Per queue: known empty until then (monotonic ms; found empty, and no news since).
  std::vector<int64_t> empty_until;
  uint64_t news = 0;  // news recorded in this set so far
  int refs = 0;       // threads using it
  int marked = 0;     // threads keeping its queues' markers
};

// The consumers blocked anywhere in this instance and what is known of their queues: the only
// state the threads' Waiters share. One per instance (net::Server owns it); every thread may
// call it. Touched when a client blocks or unblocks, by news of ready jobs on queues someone
// named, and by consume results, so a mutex is cheap here; never held while anything else is.
class WaiterOrder {
 public:
  // How long a queue found empty (with no news since) stays known empty: past it, a consumer
  // coming back reads it again. Bounds what a pool losing the wait markers unannounced (a
  // FLUSHALL) can hide from a consumer. Each time it is set it lasts kKnownEmptyMs plus up to
  // as much again (spread by KnownEmptyUntil), so the queues of a set found empty together are
  // not all read again in one long call (1,000 queues: ~10 ms of Redis) but a few at a time.
  static constexpr int64_t kKnownEmptyMs = 2000;

  // The oldest consumer blocked on a queue: its set, arrival seq, the queue's place in its set,
  // and its thread (-1: nobody waits there).
  struct Oldest {
    QueueSet* set = nullptr;
    uint64_t seq = 0;
    size_t index = 0;
    int thread = -1;
  };

  uint64_t NextSeq() { return next_seq_.fetch_add(1, std::memory_order_relaxed); }
  // The set of `queues` of `ns`, interned under `key`; each call takes a reference for the
  // caller's thread, which Release gives back (the last one destroys the set).
  QueueSet* Acquire(const std::string& key, const std::string& ns,
                    std::span<const std::string_view> queues);
  void Release(QueueSet* set);
  // A consumer (arrival `seq`, on `thread`, taking up to `want` jobs) blocks on `set` / stops
  // waiting.
  void Add(QueueSet* set, uint64_t seq, int thread, int want);
  void Remove(QueueSet* set, uint64_t seq);
  // Jobs may be ready on `tag`: no set naming it knows it empty any more. Returns the oldest
  // consumer blocked on it.
  Oldest News(const std::string& tag);
  // The oldest consumer blocked on `tag`.
  Oldest FindOldest(const std::string& tag) const;
  // The queues of `set` not known empty, in priority order, and the set's news count now (what
  // a consume begun now passes to NoteEmpty). `seq`: a consumer that just blocked on the set
  // (0: none); none at all while an older one of this instance waits on the set and its markers
  // stand (news reaches that one first and what it leaves is passed on).
  std::vector<size_t> Candidates(QueueSet* set, int64_t now_ms, uint64_t* news,
                                 uint64_t seq = 0) const;
  uint64_t NewsCount(QueueSet* set) const;
  // Queues `indices` of `set` held nothing ready in a consume begun at news count `since`: known
  // empty, unless news of them came since.
  void NoteEmpty(QueueSet* set, const std::vector<size_t>& indices, uint64_t since, int64_t now_ms);
  // The ready list of `tag` went empty (kEmptyNews): known empty in every set whose markers some
  // thread keeps (its next ready news follows on the channel).
  void Emptied(const std::string& tag, int64_t now_ms);
  // A thread starts (+1) or stops (-1) keeping the markers of `set`'s queues.
  void NoteMarked(QueueSet* set, int delta);
  // What is known of `tags` / of every queue is forgotten (a marker that may be gone, a
  // resubscription): the next consume reads them again.
  void Forget(const std::vector<std::string>& tags);
  void ForgetAll();
  // How many jobs the consumers blocked on `tag` in this instance take at most (capped at
  // kServeMax): what a pump call may make ready on it without announcing them (pump.lua serve).
  static constexpr int64_t kServeMax = 1000;
  int64_t Capacity(const std::string& tag) const;
  // Whether some thread keeps the wait markers of `tag` (then every job made ready there is
  // announced on the pool's channel, this instance included).
  bool Marked(const std::string& tag) const;
  // Held news: jobs made ready on `tag` for this instance's consumers and announced to no other
  // instance (a pump call told `serve`). Should they be left with no consumer here to take them,
  // the instance announces them itself (TakeHeld). Cleared when the channel announces the queue
  // or a consume finds it empty.
  void Hold(const std::string& tag);
  bool TakeHeld(const std::string& tag);
  void ClearHeld(const std::string& tag);
  // Queues `indices` of `set` found empty by a consume begun at news count `since`.
  void ClearHeld(QueueSet* set, const std::vector<size_t>& indices, uint64_t since);
  // Cheap check so publishers skip the work while no consumer names any queue.
  bool AnyInterest() const { return sets_.load(std::memory_order_relaxed) > 0; }
  // Consumers blocked in CONSUME ... TIMEOUT now.
  int64_t blocked() const { return blocked_.load(std::memory_order_relaxed); }

 private:
  Oldest OldestLocked(const std::string& tag) const DQ_REQUIRES(mu_);
  int64_t KnownEmptyUntil(int64_t now_ms) DQ_REQUIRES(mu_);

  std::atomic<int64_t> blocked_{0};
  std::atomic<int64_t> sets_{0};
  std::atomic<uint64_t> next_seq_{1};
  mutable base::Mutex mu_;
  std::unordered_map<std::string, std::unique_ptr<QueueSet>> by_key_ DQ_GUARDED_BY(mu_);
  // The sets naming each queue, and its (first) place in each.
  std::unordered_map<std::string, std::vector<std::pair<QueueSet*, size_t>>> by_tag_
      DQ_GUARDED_BY(mu_);
  std::unordered_set<std::string> held_ DQ_GUARDED_BY(mu_);
  uint64_t spread_ DQ_GUARDED_BY(mu_) = 0;  // KnownEmptyUntil's sequence
};

// One thread's blocked consumers.
class Waiters {
 public:
  Waiters(Loop& loop, WaiterOrder& order) : loop_(loop), order_(order) {}

  // Runs CONSUME for `w` over `queues` (priority order; read before it returns): leases from
  // them in that order and replies; when nothing is ready and block_if_empty, parks it until one
  // of its queues gets ready jobs or its deadline.
  void Consume(std::shared_ptr<Waiter> w, std::span<const std::string_view> queues,
               bool block_if_empty);
  // Jobs became ready on `tag`: offered to this thread's oldest consumer blocked on it (the news
  // is routed to the thread holding the instance's oldest one).
  void OnQueueReady(const std::string& tag);
  // News of ready jobs on `tag` (the pool's channel, the safety net, a marker found missing):
  // recorded in the sets naming it, and offered to the thread holding the instance's oldest
  // consumer blocked on it (this one at once, another through Peers::Post).
  void AnnounceReady(const std::string& tag);
  // News of `tag` from the pool's channel (every instance heard it): as AnnounceReady, and news
  // this instance held is no longer its alone.
  void OnChannelNews(const std::string& tag);
  // What a script's answer here says made jobs ready on `tag` (a publish, a pump, a nack): with
  // the channel on and the queue marked, the script announced it and the channel's news does
  // the rest (it comes in the pool's order with its "empty" news; this answer may arrive after
  // both, and acting on it too would wake a second consumer for the same job). Otherwise offered
  // to the oldest consumer blocked on it here.
  void OfferReady(const std::string& tag);
  // How many jobs this instance's consumers blocked on `tag` would take now (0 without the
  // channel): a pump call on it announces no more than that many to the other instances
  // (pump.lua serve; WaiterOrder::kServeMax).
  int64_t ServeCapacity(const std::string& tag) const;
  // A pump call made jobs ready on `tag` for this instance's consumers alone (not announced):
  // recorded as news here and offered; left with nobody here to take them, announced on the
  // pool's channel (WaiterOrder::Hold).
  void OfferHeld(const std::string& tag);
  // A pump call on `tag` may lease its jobs to the instance's oldest consumer blocked on it
  // (pump.lua lease_count), when that consumer is this thread's and free (no attempt in flight,
  // binding fresh): reserved as if an attempt were in flight until PumpAnswered. One consume call
  // and one wake-up per job fewer. Nothing: nobody to lease for.
  struct PumpLease {
    std::shared_ptr<Waiter> waiter;
    size_t index = 0;    // the queue's place in its set
    uint64_t since = 0;  // the set's news count when reserved
  };
  std::optional<PumpLease> ReserveForPump(const std::string& tag);
  // The pump call answered: the jobs leased to the consumer (none when the call failed or made
  // nothing ready) and the queue's ready gauge after the lease (-1: unknown).
  void PumpAnswered(const PumpLease& lease, std::vector<JobEntry>& jobs, int64_t ready_left);
  // PUBLISH kReadyChannel `tag`: every instance (this one too) hears of ready jobs there.
  void PublishNews(const std::string& tag);
  void OnClientGone(uint64_t client_id);
  // kEmptyNews of `tag` from the pool's channel.
  void OnEmptied(const std::string& tag);
  // The mailbox dropped hints meant for this thread: every blocked queue is read once.
  void OnHintsDropped() { sweep_wanted_ = true; }
  // Once per loop tick (100 ms).
  void Tick();
  void ReleaseAll();
  size_t blocked() const { return blocked_count_; }

 private:
  void Block(std::shared_ptr<Waiter> w);
  void Unregister(const std::shared_ptr<Waiter>& w);
  // One consume attempt of `w` over its queues `order` (indices, priority order), begun at the
  // set's news count `since` (WaiterOrder::Candidates). `announced`: the queues were announced
  // to it (pending), so those it does not get to read (its COUNT filled first) are offered on.
  void Attempt(const std::shared_ptr<Waiter>& w, std::vector<size_t> order, uint64_t since,
               bool announced = false);
  // Tries the queues announced to `w` and not tried yet, when no attempt is in flight.
  void TryPending(const std::shared_ptr<Waiter>& w);
  // Sets (renews) the marker keys P.."wt" of `tags` that ask every instance's scripts to
  // announce their ready jobs (marks.lua, batched); for each marker created, also tells the pool
  // that consumers now wait on it (kWaitNews, for its pump), and announces the queue (a job made
  // ready just before the marker existed was announced to nobody).
  void Mark(std::vector<std::string> tags);
  void RenewMarkers(int64_t now_ms);
  // The safety net: the ready gauges of the next kSafetyBatch blocked queues, or all of them
  // (qstats); queues with ready jobs are offered to their waiters.
  void SafetyPoll(bool all);
  // The end of an attempt (or of a pump call's lease) for `w`: jobs replied, or `w` parked
  // again; queues found empty noted as of news count `since`.
  void AttemptDone(const std::shared_ptr<Waiter>& w, std::vector<JobEntry>& jobs,
                   const std::string& error, const std::vector<size_t>& found_empty,
                   const std::vector<std::string>& still_ready, uint64_t since);
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

  // This thread's use of a QueueSet: its consumers blocked on it (by arrival), its attempts in
  // flight, whether its queues count in tags_ (once a consumer blocked on it), and since when
  // it is unused (0: in use; dropped kSetGraceMs later).
  struct LocalSet {
    std::map<uint64_t, std::shared_ptr<Waiter>> blocked;
    int attempts = 0;
    bool marked = false;
    int64_t idle_since_ms = 0;
  };
  // A queue some local set with blocked consumers names: how many such sets, and until when
  // its marker needs no renewal (0: not set, or its call failed). Only while it is set are
  // consume results on the queue trusted as "known empty".
  struct TagState {
    int refs = 0;
    int64_t marked_until = 0;
  };
  LocalSet& Local(const std::shared_ptr<Waiter>& w) { return local_[w->set]; }
  void MaybeIdle(QueueSet* set, LocalSet& ls);
  void DropIdleSets(int64_t now_ms);
  // Offers `tag` to the oldest consumer blocked on it (`o`), here or on its thread; with nobody
  // blocked on it here, held news of it goes out on the pool's channel.
  void Offer(const WaiterOrder::Oldest& o, const std::string& tag);
  // Ready jobs left on `tag` (by a consumer's call, or unread): to the next consumer.
  void OfferLeft(const std::string& tag);
  // The marker call's result: a failed call's queues are forgotten, marked at the next renewal.
  void Marked(const std::vector<std::string>& tags, bool ok);
  // Consume results of `w` over queues `empty` (found with nothing ready) begun at `since`.
  void NoteEmpty(const std::shared_ptr<Waiter>& w, const std::vector<size_t>& empty,
                 uint64_t since);

  Loop& loop_;
  WaiterOrder& order_;
  std::unordered_map<QueueSet*, LocalSet> local_;
  std::unordered_map<std::string, QueueSet*> local_by_key_;
  // Sets that became unused, oldest first (an entry whose set was used again since is skipped).
  std::deque<std::pair<int64_t, QueueSet*>> idle_;
  // Queues blocked consumers of this thread name (ordered: the safety net's round robin).
  std::map<std::string, TagState> tags_;
  // The blocked consumers by (deadline, seq), by (binding valid until, seq) when bound to a
  // token, and by client: what the tick and a disconnect look at, so neither walks them all.
  std::map<std::pair<int64_t, uint64_t>, std::shared_ptr<Waiter>> deadlines_;
  std::map<std::pair<int64_t, uint64_t>, std::shared_ptr<Waiter>> rechecks_;
  std::unordered_multimap<uint64_t, std::shared_ptr<Waiter>> by_client_;
  size_t blocked_count_ = 0;
  int64_t next_marker_ms_ = 0;
  int64_t next_safety_ms_ = 0;
  std::string safety_cursor_;  // the last tag the safety net read
  bool safety_in_flight_ = false;
  uint64_t subscribed_seen_ = 0;  // the instance's subscription epoch this thread last swept for
  bool sweep_wanted_ = false;     // hints to this thread were dropped: read every blocked queue
};

}  // namespace deferq::queue
