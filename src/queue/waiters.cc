#include "queue/waiters.h"

#include <hiredis/hiredis.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <map>
#include <optional>

#include "persist/cluster_slots.h"
#include "queue/job_codec.h"
#include "queue/queue_name.h"
#include "queue/queue_stats.h"
#include "queue/worker.h"

namespace deferq::queue {

namespace {

// The marker P.."wt" of a queue consumers wait on lives kMarkerMs and is renewed every
// kMarkerRenewMs while they wait, in batches of at most kMarkBatch queues (marks.lua): 10,000
// blocked queues cost Redis one call of 100 SETs every 1.2 s. It lingers up to kMarkerMs after
// the last waiter left (the queue's ready jobs are announced, and its pump kept exact, that
// long; docs/architecture.md).
constexpr const char* kMarkerMs = "300000";
constexpr int64_t kMarkerRenewMs = 120000;
constexpr size_t kMarkBatch = 100;
// The safety net under the announcements (a news lost while the subscriber reconnected, a
// marker that expired during an outage): every kSafetyPollMs, the ready gauges of up to
// kSafetyBatch of this thread's blocked queues (round robin) are read in one qstats call, and
// those with ready jobs are offered to their waiters. Its rate does not grow with the number
// of blocked queues.
constexpr int64_t kSafetyPollMs = 2000;
constexpr size_t kSafetyBatch = 50;
// A consume call pops at most count + 1000 list entries; stale entries beyond that are passed
// by calling again (the list compaction keeps them fewer than the live ones, docs/storage.md).
constexpr int kConsumeRetries = 8;
// Queues per consumes.lua call (its bound).
constexpr size_t kConsumesMax = 1000;

// How many times the pool's wake-up channel was (re)subscribed: a thread that has not swept its
// blocked queues since reads them all once (news may have been lost meanwhile).
std::atomic<uint64_t> g_subscribed_epoch{0};

}  // namespace

void WaiterOrder::AddAll(const std::vector<std::string>& tags, uint64_t seq, int thread) {
  base::MutexLock lock(&mu_);
  for (const std::string& tag : tags) {
    if (by_tag_[tag].emplace(seq, thread).second) blocked_.fetch_add(1, std::memory_order_relaxed);
  }
}

void WaiterOrder::RemoveAll(const std::vector<std::string>& tags, uint64_t seq) {
  base::MutexLock lock(&mu_);
  for (const std::string& tag : tags) {
    auto it = by_tag_.find(tag);
    if (it == by_tag_.end() || it->second.erase(seq) == 0) continue;
    blocked_.fetch_sub(1, std::memory_order_relaxed);
    if (it->second.empty()) by_tag_.erase(it);
  }
}

bool WaiterOrder::IsOldest(const std::string& tag, uint64_t seq) const {
  base::MutexLock lock(&mu_);
  auto it = by_tag_.find(tag);
  return it != by_tag_.end() && !it->second.empty() && it->second.begin()->first == seq;
}

int WaiterOrder::OldestThread(const std::string& tag) const {
  base::MutexLock lock(&mu_);
  auto it = by_tag_.find(tag);
  if (it == by_tag_.end() || it->second.empty()) return -1;
  return it->second.begin()->second;
}

void Waiters::AnnounceReady(const std::string& tag) {
  if (!order_.AnyBlocked()) return;
  const int thread = order_.OldestThread(tag);
  if (thread < 0) return;
  if (thread == worker_.thread_index()) {
    OnQueueReady(tag);
  } else {
    worker_.peers().PostReady(thread, tag);
  }
}

void Waiters::Mark(std::vector<std::string> tags, bool news) {
  if (!worker_.config().cross_instance_wake || tags.empty()) return;
  // By pool (a namespace's queues live in its pool), then by slot on a cluster.
  std::map<persist::PoolClient*, std::vector<std::string>> by_pool;
  for (std::string& tag : tags) {
    const std::optional<QueueName> name = QueueName::Parse(tag);
    persist::PoolClient* pool = name ? worker_.PoolFor(name->ns) : nullptr;
    if (pool != nullptr) by_pool[pool].push_back(std::move(tag));
  }
  for (auto& [pool, list] : by_pool) {
    for (std::vector<std::string>& batch : QstatsBatches(list, pool->cluster(), kMarkBatch)) {
      std::vector<std::string> prefixes;
      for (const std::string& tag : batch) prefixes.push_back(QueueName::Parse(tag)->prefix());
      std::vector<std::string_view> keys(prefixes.begin(), prefixes.end());
      const std::string n = std::to_string(batch.size());
      const std::string_view args[] = {kMarkerMs, n, news ? "1" : ""};
      // A marker this call created had no waiter behind it: a job made ready through another
      // instance just before it existed was announced to nobody. Offered here, as if announced.
      pool->Eval(persist::Script::kMarks, keys, args, 0,
                 [this, news, batch = std::move(batch)](const persist::UpstreamResult& r) {
                   if (!news || r.reply == nullptr || r.reply->type != REDIS_REPLY_ARRAY ||
                       r.reply->elements != batch.size()) {
                     return;
                   }
                   for (size_t i = 0; i < batch.size(); ++i) {
                     int64_t created = 0;
                     if (ReplyInt(r.reply->element[i], &created) && created == 1) {
                       OnQueueReady(batch[i]);
                     }
                   }
                 });
    }
  }
}

void Waiters::Block(std::shared_ptr<Waiter> w) {
  w->state.blocked = true;
  w->seq = order_.NextSeq();
  const int64_t now = worker_.now_ms();
  std::vector<std::string> unmarked;
  for (size_t i = 0; i < w->tags.size(); ++i) {
    const std::string& tag = w->tags[i];
    by_queue_[tag].emplace(w->seq, Parked{w, i});  // a queue named twice: its first place
    // A queue this thread marked less than kMarkerRenewMs ago keeps its marker meanwhile.
    int64_t& until = marked_until_[tag];
    if (until <= now) {
      until = now + kMarkerRenewMs;
      unmarked.push_back(tag);
    }
  }
  order_.AddAll(w->tags, w->seq, worker_.thread_index());
  if (w->deadline_ms > 0) deadlines_.emplace(std::make_pair(w->deadline_ms, w->seq), w);
  if (!w->auth.token_digest.empty()) {
    rechecks_.emplace(std::make_pair(w->auth.valid_until_ms, w->seq), w);
  }
  by_client_.emplace(w->ticket.client_id, w);
  ++blocked_count_;
  Mark(std::move(unmarked), /*news=*/true);
}

void Waiters::Unregister(const std::shared_ptr<Waiter>& w) {
  if (!w->state.blocked) return;
  w->state.blocked = false;
  --blocked_count_;
  for (const std::string& tag : w->tags) {
    auto it = by_queue_.find(tag);
    if (it == by_queue_.end()) continue;
    it->second.erase(w->seq);
    if (it->second.empty()) by_queue_.erase(it);
  }
  order_.RemoveAll(w->tags, w->seq);
  if (w->deadline_ms > 0) deadlines_.erase(std::make_pair(w->deadline_ms, w->seq));
  if (!w->auth.token_digest.empty()) {
    rechecks_.erase(std::make_pair(w->auth.valid_until_ms, w->seq));
  }
  auto [from, to] = by_client_.equal_range(w->ticket.client_id);
  for (auto it = from; it != to; ++it) {
    if (it->second == w) {
      by_client_.erase(it);
      break;
    }
  }
}

void Waiters::OnQueueReady(const std::string& tag) {
  auto it = by_queue_.find(tag);
  if (it == by_queue_.end()) return;
  // First come, first served: only the oldest waiter of the whole instance tries; when it is
  // served, the next one is offered the queue (see Reply). It tries this queue only (its other
  // queues had nothing when it blocked, and their own news comes on its own), and remembers it
  // (pending) while an attempt is in flight or its binding is due for its re-check.
  const Parked& first = it->second.begin()->second;
  const std::shared_ptr<Waiter> head = first.waiter;
  if (!order_.IsOldest(tag, head->seq)) return;
  head->pending.insert(first.index);
  if (head->state.attempt_in_flight) return;
  if (BindingStale(*head)) return RecheckBinding(head);
  TryPending(head);
}

void Waiters::TryPending(const std::shared_ptr<Waiter>& w) {
  if (w->pending.empty() || w->state.attempt_in_flight || w->state.done) return;
  std::vector<size_t> order(w->pending.begin(), w->pending.end());
  w->pending.clear();
  Attempt(w, std::move(order));
}

bool Waiters::BindingStale(const Waiter& w) const {
  return !w.auth.token_digest.empty() && worker_.now_ms() >= w.auth.valid_until_ms;
}

void Waiters::RecheckBinding(const std::shared_ptr<Waiter>& w) {
  if (w->auth.check_in_flight || w->state.done) return;
  NamespaceDirectory& dir = worker_.namespaces();
  if (const NamespaceEntry* e = dir.Fresh(w->ns, worker_.now_ms())) return ApplyBinding(w, *e);
  w->auth.check_in_flight = true;
  // `this` outlives the lookup: the directory drops answers once it is gone, and the Worker
  // destroys it after the Waiters.
  dir.Refresh(w->ns, worker_.now_ms(), [this, w](std::string_view error) {
    w->auth.check_in_flight = false;
    if (w->state.done) return;
    // A failed lookup proves nothing: the waiter keeps waiting, takes no job, and the next
    // tick asks again.
    if (!error.empty()) return;
    if (const NamespaceEntry* e = worker_.namespaces().Known(w->ns)) ApplyBinding(w, *e);
  });
}

void Waiters::ApplyBinding(const std::shared_ptr<Waiter>& w, const NamespaceEntry& e) {
  if (w->state.done) return;
  if (!e.Accepts(w->auth.token_digest)) {
    // The token was revoked (or the namespace deleted) while the consumer was parked. An
    // attempt still in flight finds `done` and gives its jobs back (Consume).
    std::vector<JobEntry> none;
    return Reply(w, none, "NOAUTH Authentication required.", {});
  }
  // At least for this instant (the loop's clock stands still within an event), so that with
  // cache_seconds = 0 the answer just received still lets the offer below go through.
  const int64_t until =
      std::max(e.fetched_ms + worker_.namespaces().cache_ms(), worker_.now_ms() + 1);
  if (w->state.blocked) {
    rechecks_.erase(std::make_pair(w->auth.valid_until_ms, w->seq));
    rechecks_.emplace(std::make_pair(until, w->seq), w);
  }
  w->auth.valid_until_ms = until;
  // The queues announced while it was stale were remembered: tried now.
  TryPending(w);
}

namespace {

// Leases up to `want` jobs from the waiter's queues `order` (indices into its queues, in
// priority order): one consumes.lua call for all of them on a standalone pool, one per run of
// queues of one hash slot on a cluster (a call's keys must share a slot), consume.lua for a
// single queue (so a pipeline of one-queue CONSUMEs still merges into one call, call_batch.h).
struct ConsumeRun : std::enable_shared_from_this<ConsumeRun> {
  Worker* worker;
  std::shared_ptr<Waiter> waiter;
  std::vector<size_t> order;
  size_t want;
  size_t next = 0;  // position in order
  int retries = 0;  // calls again on the same single queue (see kConsumeRetries)
  std::vector<JobEntry> jobs;
  std::vector<std::string> still_ready;  // tags whose ready gauge stayed above 0
  std::string error;
  std::function<void(ConsumeRun&)> done;

  std::string Prefix(size_t pos) const {
    return QueueName{waiter->ns, waiter->queues[order[pos]]}.prefix();
  }

  void Fail(std::string e) {
    error = std::move(e);
    done(*this);
  }

  void Step() {
    if (next >= order.size() || jobs.size() >= want) return done(*this);
    persist::PoolClient* pool = worker->PoolFor(waiter->ns);
    // The run: order[next, end), every queue of one slot on a cluster.
    size_t end = next + 1;
    const int slot = pool->cluster() ? persist::KeySlot(Prefix(next)) : -1;
    while (end < order.size() && end - next < kConsumesMax &&
           (slot < 0 || persist::KeySlot(Prefix(end)) == slot)) {
      ++end;
    }
    const std::string now = std::to_string(worker->wall_ms());
    const std::string ttr = std::to_string(waiter->ttr_ms);
    const std::string count = std::to_string(want - jobs.size());
    auto self = shared_from_this();
    if (end - next == 1) {
      const std::string prefix = Prefix(next);
      const std::string_view keys[] = {prefix};
      const std::string_view args[] = {now, ttr, count};
      const size_t index = order[next++];
      return pool->Eval(
          persist::Script::kConsume, keys, args, waiter->ticket.client_id,
          [self, index](const persist::UpstreamResult& r) { self->OnConsume(index, r); });
    }
    std::vector<std::string> prefixes;
    std::vector<size_t> indices;
    for (size_t pos = next; pos < end; ++pos) {
      prefixes.push_back(Prefix(pos));
      indices.push_back(order[pos]);
    }
    next = end;
    std::vector<std::string_view> keys(prefixes.begin(), prefixes.end());
    const std::string n = std::to_string(prefixes.size());
    const std::string_view args[] = {now, ttr, count, n};
    pool->Eval(persist::Script::kConsumes, keys, args, waiter->ticket.client_id,
               [self, indices = std::move(indices)](const persist::UpstreamResult& r) {
                 self->OnConsumes(indices, r);
               });
  }

  // consume.lua answered {ready_left, K1, payload1, ...} for queue `index`.
  void OnConsume(size_t index, const persist::UpstreamResult& r) {
    if (std::string e = FailureText(r); !e.empty()) return Fail(std::move(e));
    const std::string& queue = waiter->queues[index];
    const size_t before = jobs.size();
    int64_t ready_left = 0;
    if (r.reply->type != REDIS_REPLY_ARRAY || r.reply->elements < 1 ||
        !ReplyInt(r.reply->element[0], &ready_left) ||
        !DecodeJobs(r.reply, 1, waiter->ns, queue, &jobs)) {
      return Fail("ERR unexpected reply from the consume script");
    }
    if (jobs.size() > before) NoteQueueActivity(waiter->tags[index]);
    // Fewer jobs than asked while some are ready: the call stopped at its bound on stale list
    // entries. Ask the same queue again, so a non-blocking CONSUME is never short.
    if (jobs.size() < want && ready_left > 0 && retries < kConsumeRetries) {
      ++retries;
      --next;
    } else if (ready_left > 0) {
      still_ready.push_back(waiter->tags[index]);
    }
    Step();
  }

  // consumes.lua answered {ready_left_1..n, i1, K1, payload1, ..., i2, ...} for `indices`.
  void OnConsumes(const std::vector<size_t>& indices, const persist::UpstreamResult& r) {
    if (std::string e = FailureText(r); !e.empty()) return Fail(std::move(e));
    const redisReply* rep = r.reply;
    const size_t n = indices.size();
    constexpr size_t kFields = 1 + kJobFields;  // the queue's index, then consume's six
    if (rep->type != REDIS_REPLY_ARRAY || rep->elements < n || (rep->elements - n) % kFields) {
      return Fail("ERR unexpected reply from the consume script");
    }
    for (size_t i = 0; i < n; ++i) {
      int64_t left = 0;
      if (ReplyInt(rep->element[i], &left) && left > 0) {
        still_ready.push_back(waiter->tags[indices[i]]);
      }
    }
    for (size_t at = n; at < rep->elements; at += kFields) {
      int64_t i = 0;
      if (!ReplyInt(rep->element[at], &i) || i < 1 || static_cast<size_t>(i) > n) {
        return Fail("ERR unexpected reply from the consume script");
      }
      const size_t index = indices[static_cast<size_t>(i) - 1];
      if (!DecodeJobSpan(rep, at + 1, waiter->ns, waiter->queues[index], &jobs)) {
        return Fail("ERR unexpected reply from the consume script");
      }
      NoteQueueActivity(waiter->tags[index]);
    }
    Step();
  }

  static std::string FailureText(const persist::UpstreamResult& r) {
    if (r.reply == nullptr) return std::string(r.error);
    if (r.reply->type == REDIS_REPLY_ERROR) return std::string(r.reply->str, r.reply->len);
    return {};
  }
};

}  // namespace

void Waiters::Consume(std::shared_ptr<Waiter> w, bool block_if_empty) {
  w->tags.reserve(w->queues.size());
  for (const std::string& q : w->queues) w->tags.push_back(QueueName{w->ns, q}.tag());
  // A blocking CONSUME is registered before its first attempt: a queue announced while that
  // attempt is on its way is remembered (pending) and tried once it found nothing.
  if (block_if_empty) Block(w);
  std::vector<size_t> all(w->queues.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  Attempt(w, std::move(all));
}

void Waiters::Attempt(const std::shared_ptr<Waiter>& w, std::vector<size_t> order) {
  auto run = std::make_shared<ConsumeRun>();
  run->worker = &worker_;
  run->waiter = w;
  run->order = std::move(order);
  run->want = w->count == 0 ? 1 : static_cast<size_t>(w->count);
  w->state.attempt_in_flight = true;
  run->done = [this](ConsumeRun& r) {
    std::shared_ptr<Waiter> w = r.waiter;
    w->state.attempt_in_flight = false;
    if (w->state.done) {
      // The client left while the attempt was in flight: give its jobs back untouched.
      Release(r.jobs);
      return;
    }
    if (r.jobs.empty() && r.error.empty()) {
      if (!w->state.blocked) return Reply(w, r.jobs, {}, {});  // CONSUME without TIMEOUT: null
      // Its deadline passed while the attempt was in flight: the null reply is due now.
      if (w->deadline_ms > 0 && worker_.now_ms() >= w->deadline_ms) {
        return Reply(w, r.jobs, {}, {});
      }
      // Still blocked: what was announced meanwhile is tried now; else the next news does.
      if (BindingStale(*w)) return RecheckBinding(w);
      return TryPending(w);
    }
    Reply(w, r.jobs, r.error, r.still_ready);
  };
  run->Step();
}

void Waiters::Reply(const std::shared_ptr<Waiter>& w, std::vector<JobEntry>& jobs,
                    const std::string& error, const std::vector<std::string>& still_ready) {
  w->state.done = true;
  Unregister(w);
  ClientPort& port = w->port != nullptr ? *w->port : worker_.port();
  proto::ReplyWriter* out = port.Begin(w->ticket);
  if (out == nullptr) {
    Release(jobs);
    PassOn(w, still_ready);
    return;
  }
  if (!error.empty() && jobs.empty()) {
    out->Error(error);
  } else {
    WriteConsumeReply(*out, jobs, w->count != 0, worker_.wall_ms());
  }
  port.Finish(w->ticket);
  if (w->on_reply) w->on_reply(jobs.size());
  PassOn(w, still_ready);
}

void Waiters::PassOn(const std::shared_ptr<Waiter>& w, const std::vector<std::string>& ready) {
  // What this consumer leaves: the queues its last call found still holding ready jobs, and
  // those announced to it that it did not get to try; offered to the next oldest consumers.
  // Not its other queues: they had nothing when it blocked, and their news comes on its own.
  for (const std::string& tag : ready) AnnounceReady(tag);
  for (size_t i : w->pending) AnnounceReady(w->tags[i]);
  w->pending.clear();
}

void Waiters::Release(const std::vector<JobEntry>& jobs) {
  // Leases taken for a client that is gone: undo them so the jobs are ready again at once, with
  // the delivery not counted.
  for (const JobEntry& j : jobs) {
    persist::PoolClient* pool = worker_.PoolFor(j.ns);
    const std::string prefix = QueueName{j.ns, j.queue}.prefix();
    const std::string now = std::to_string(worker_.wall_ms());
    const std::string_view keys[] = {prefix};
    const std::string_view args[] = {now, j.key, "", "undo"};
    // Ready again: offered to the next consumer waiting on the queue.
    pool->Eval(persist::Script::kNack, keys, args, 0,
               [this, tag = QueueName{j.ns, j.queue}.tag()](const persist::UpstreamResult& r) {
                 int64_t n = 0;
                 if (r.reply != nullptr && ReplyInt(r.reply, &n) && n > 0) AnnounceReady(tag);
               });
  }
}

void Waiters::OnClientGone(uint64_t client_id) {
  std::vector<std::shared_ptr<Waiter>> gone;
  auto [from, to] = by_client_.equal_range(client_id);
  for (auto it = from; it != to; ++it) gone.push_back(it->second);
  for (auto& w : gone) {
    if (w->state.done) continue;
    w->state.done = true;
    Unregister(w);
    // The queues announced to it that it did not try: offered to the next one.
    PassOn(w, {});
  }
}

void Waiters::Tick() {
  const int64_t now_ms = worker_.now_ms();
  // Deadlines (null replies; one whose attempt is in flight is answered when it returns), then
  // parked consumers whose binding is due for its re-check: the work is what is due, not what
  // is parked.
  std::vector<std::shared_ptr<Waiter>> due;
  for (auto it = deadlines_.begin(); it != deadlines_.end() && it->first.first <= now_ms; ++it) {
    if (!it->second->state.attempt_in_flight) due.push_back(it->second);
  }
  for (const auto& w : due) {
    std::vector<JobEntry> none;
    Reply(w, none, {}, {});
  }
  due.clear();
  // A revoked consumer is told within cache_seconds plus a tick and a lookup.
  for (auto it = rechecks_.begin(); it != rechecks_.end() && it->first.first <= now_ms; ++it) {
    due.push_back(it->second);
  }
  for (const auto& w : due) RecheckBinding(w);
  const uint64_t epoch = g_subscribed_epoch.load(std::memory_order_relaxed);
  if (epoch != subscribed_seen_ && !safety_in_flight_) {
    subscribed_seen_ = epoch;
    SafetyPoll(/*all=*/true);
    // The pool may have lost the markers too (a failover to a replica behind, a flush): set
    // again now rather than at their renewal.
    for (auto& [tag, until] : marked_until_) until = 0;
    next_marker_ms_ = 0;
  } else if (now_ms >= next_safety_ms_) {
    next_safety_ms_ = now_ms + kSafetyPollMs;
    SafetyPoll(/*all=*/false);
  }
  if (now_ms >= next_marker_ms_) {
    next_marker_ms_ = now_ms + kMarkerRenewMs / 10;
    RenewMarkers(now_ms);
  }
}

void Waiters::RenewMarkers(int64_t now_ms) {
  std::vector<std::string> due;
  std::erase_if(marked_until_, [&](const auto& kv) {
    auto q = by_queue_.find(kv.first);
    const bool waited = q != by_queue_.end() && !q->second.empty();
    return !waited && kv.second <= now_ms;  // nobody waits here any more: forgotten
  });
  for (auto& [tag, until] : marked_until_) {
    auto q = by_queue_.find(tag);
    if (until > now_ms || q == by_queue_.end() || q->second.empty()) continue;
    until = now_ms + kMarkerRenewMs;
    due.push_back(tag);
  }
  Mark(std::move(due), /*news=*/false);
}

void Waiters::SafetyPoll(bool all) {
  if (by_queue_.empty() || safety_in_flight_) return;
  // The next kSafetyBatch blocked queues after the last one read (round robin, in tag order), or
  // all of them.
  std::vector<std::string> tags;
  auto it = by_queue_.upper_bound(safety_cursor_);
  const size_t most = all ? by_queue_.size() : kSafetyBatch;
  for (size_t wrapped = 0; tags.size() < most && wrapped < 2;) {
    if (it == by_queue_.end()) {
      ++wrapped;
      it = by_queue_.begin();
      continue;
    }
    if (!tags.empty() && it->first == tags.front()) break;  // all of them taken
    if (!it->second.empty()) tags.push_back(it->first);
    ++it;
  }
  if (tags.empty()) return;
  safety_cursor_ = tags.back();
  std::map<persist::PoolClient*, std::vector<std::string>> by_pool;
  for (std::string& tag : tags) {
    const std::optional<QueueName> name = QueueName::Parse(tag);
    if (persist::PoolClient* pool = name ? worker_.PoolFor(name->ns) : nullptr) {
      by_pool[pool].push_back(std::move(tag));
    }
  }
  safety_in_flight_ = true;
  auto left = std::make_shared<size_t>(0);
  std::vector<std::pair<persist::PoolClient*, std::vector<std::string>>> calls;
  for (auto& [pool, list] : by_pool) {
    for (auto& batch : QstatsBatches(list, pool->cluster(), kSafetyBatch)) {
      calls.emplace_back(pool, std::move(batch));
    }
  }
  *left = calls.size();
  const std::string now = std::to_string(worker_.wall_ms());
  for (auto& [pool, batch] : calls) {
    std::vector<std::string> prefixes;
    for (const std::string& tag : batch) prefixes.push_back(QueueName::Parse(tag)->prefix());
    std::vector<std::string_view> keys(prefixes.begin(), prefixes.end());
    const std::string n = std::to_string(batch.size());
    const std::string_view args[] = {n, now};
    pool->Eval(persist::Script::kQstats, keys, args, 0,
               [this, left, batch = std::move(batch)](const persist::UpstreamResult& r) {
                 if (--*left == 0) safety_in_flight_ = false;
                 if (r.reply == nullptr || r.reply->type != REDIS_REPLY_ARRAY ||
                     r.reply->elements != batch.size() * QueueFigures::kFields) {
                   return;
                 }
                 for (size_t i = 0; i < batch.size(); ++i) {
                   int64_t ready = 0;
                   if (ReplyInt(r.reply->element[i * QueueFigures::kFields], &ready) && ready > 0) {
                     OnQueueReady(batch[i]);
                   }
                 }
               });
  }
}

void Waiters::OnSubscribed() { g_subscribed_epoch.fetch_add(1, std::memory_order_relaxed); }

void Waiters::ReleaseAll() {
  std::vector<std::shared_ptr<Waiter>> all;
  for (auto& [id, w] : by_client_) all.push_back(w);
  for (auto& w : all) {
    if (!w->state.done && !w->state.attempt_in_flight) {
      std::vector<JobEntry> none;
      Reply(w, none, {}, {});
    }
    Unregister(w);
  }
}

}  // namespace deferq::queue
