#include "queue/waiters.h"

#include <hiredis/hiredis.h>

#include <algorithm>
#include <functional>

#include "queue/job_codec.h"
#include "queue/queue_name.h"
#include "queue/queue_stats.h"
#include "queue/worker.h"

namespace deferq::queue {

namespace {

constexpr const char* kBlockedMarkerMs = "3000";  // renewed every second while blocked
constexpr int64_t kMarkerRenewMs = 1000;
// A consume call pops at most count + 1000 list entries; stale entries beyond that are passed
// by calling again (the list compaction keeps them fewer than the live ones, docs/storage.md).
constexpr int kConsumeRetries = 8;

}  // namespace

void WaiterOrder::Add(const std::string& tag, uint64_t seq, int thread) {
  base::MutexLock lock(&mu_);
  by_tag_[tag].emplace(seq, thread);
  blocked_.fetch_add(1, std::memory_order_relaxed);
}

void WaiterOrder::Remove(const std::string& tag, uint64_t seq) {
  base::MutexLock lock(&mu_);
  auto it = by_tag_.find(tag);
  if (it == by_tag_.end() || it->second.erase(seq) == 0) return;
  blocked_.fetch_sub(1, std::memory_order_relaxed);
  if (it->second.empty()) by_tag_.erase(it);
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

void Waiters::MarkBlocked(const std::string& tag, bool news) {
  if (!worker_.config().cross_instance_wake) return;
  // The marker tells the scripts of every instance to announce this queue's ready jobs on the
  // channel. It expires by itself when nobody renews it.
  const std::optional<QueueName> name = QueueName::Parse(tag);
  persist::PoolClient* pool = name ? worker_.PoolFor(name->ns) : nullptr;
  if (pool == nullptr) return;
  const std::string key = name->prefix() + "wt";  // P.."wt" in the scripts (common.lua)
  if (!news) {
    const std::string_view args[] = {"SET", key, "1", "PX", kBlockedMarkerMs};
    return pool->Command(args, 0, [](const persist::UpstreamResult&) {});
  }
  // A queue nobody waited on has its due jobs moved lazily (pump.lua lazy_ms): when this SET
  // created the marker (GET answers nil), the news tells the instance that pumps the queue to
  // pump it now, after which it moves them at their due ms (Worker::AddPool). A marker that was
  // there already has had its news; a pool that refused the SET hears nothing.
  const std::string_view args[] = {"SET", key, "1", "PX", kBlockedMarkerMs, "GET"};
  pool->Command(args, 0, [pool, tag](const persist::UpstreamResult& r) {
    if (r.reply == nullptr || r.reply->type != REDIS_REPLY_NIL) return;
    const std::string payload = std::string(kWaitNews) + tag;
    const std::string_view pub[] = {"PUBLISH", kReadyChannel, payload};
    pool->Command(pub, 0, [](const persist::UpstreamResult&) {});
  });
}

void Waiters::Block(std::shared_ptr<Waiter> w) {
  w->state.blocked = true;
  w->seq = order_.NextSeq();
  for (const std::string& name : w->queues) {
    const std::string tag = QueueName{w->ns, name}.tag();
    auto& q = by_queue_[tag];
    if (q.empty()) MarkBlocked(tag, /*news=*/true);
    q.push_back(w);
    order_.Add(tag, w->seq, worker_.thread_index());
  }
  all_.push_back(w);
  ++blocked_count_;
}

void Waiters::Unregister(const std::shared_ptr<Waiter>& w) {
  if (!w->state.blocked) return;
  w->state.blocked = false;
  --blocked_count_;
  for (const std::string& q : w->queues) order_.Remove(QueueName{w->ns, q}.tag(), w->seq);
}

void Waiters::OnQueueReady(const std::string& tag) {
  auto it = by_queue_.find(tag);
  if (it == by_queue_.end()) return;
  auto& q = it->second;
  while (!q.empty() && q.front()->state.done) q.pop_front();
  if (q.empty()) {
    by_queue_.erase(it);
    return;
  }
  // First come, first served: only the oldest waiter of the whole instance tries; when it is
  // served, the next one is offered the queue (see Reply). A waiter whose binding is due for
  // its re-check takes nothing until it is renewed (the queue waits for that lookup).
  const std::shared_ptr<Waiter> head = q.front();
  if (head->state.attempt_in_flight || !order_.IsOldest(tag, head->seq)) return;
  if (BindingStale(*head)) return RecheckBinding(head);
  Consume(head, /*block_if_empty=*/false);
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
    return Reply(w, none, "NOAUTH Authentication required.");
  }
  // At least for this instant (the loop's clock stands still within an event), so that with
  // cache_seconds = 0 the answer just received still lets the offer below go through.
  w->auth.valid_until_ms =
      std::max(e.fetched_ms + worker_.namespaces().cache_ms(), worker_.now_ms() + 1);
  // Notifications that came while it was stale were passed over: offer its queues again.
  for (const std::string& q : w->queues) OnQueueReady(QueueName{w->ns, q}.tag());
}

namespace {

// Leases up to `want` jobs from the waiter's queues, in priority order, one consume script per
// queue (queues may live in different cluster slots), then calls done.
struct ConsumeRun : std::enable_shared_from_this<ConsumeRun> {
  Worker* worker;
  std::shared_ptr<Waiter> waiter;
  size_t want;
  size_t next = 0;
  int retries = 0;  // calls again on the same queue (see kConsumeRetries)
  std::vector<JobEntry> jobs;
  std::string error;
  std::function<void(ConsumeRun&)> done;

  void Step() {
    if (next >= waiter->queues.size() || jobs.size() >= want) return done(*this);
    QueueName q{waiter->ns, waiter->queues[next++]};
    NoteQueueActivity(q.tag());  // the per-queue metrics read its figures again (queue_stats.h)
    persist::PoolClient* pool = worker->PoolFor(q.ns);
    const std::string prefix = q.prefix();
    const std::string now = std::to_string(worker->wall_ms());
    const std::string ttr = std::to_string(waiter->ttr_ms);
    const std::string count = std::to_string(want - jobs.size());
    const std::string_view keys[] = {prefix};
    const std::string_view args[] = {now, ttr, count};
    auto self = shared_from_this();
    pool->Eval(
        persist::Script::kConsume, keys, args, waiter->ticket.client_id,
        [self, ns = q.ns, queue = q.queue](const persist::UpstreamResult& r) {
          if (r.reply == nullptr) {
            self->error = std::string(r.error);
            return self->done(*self);
          }
          if (r.reply->type == REDIS_REPLY_ERROR) {
            self->error = std::string(r.reply->str, r.reply->len);
            return self->done(*self);
          }
          // consume.lua answers {ready_left, K1, payload1, ...}.
          int64_t ready_left = 0;
          if (r.reply->type != REDIS_REPLY_ARRAY || r.reply->elements < 1 ||
              !ReplyInt(r.reply->element[0], &ready_left) ||
              !DecodeJobs(r.reply, 1, ns, queue, &self->jobs)) {
            self->error = "ERR unexpected reply from the consume script";
            return self->done(*self);
          }
          // Fewer jobs than asked while some are ready: the call stopped at its bound
          // on stale list entries. Ask the same queue again, so a non-blocking CONSUME
          // is never short while jobs are ready.
          if (self->jobs.size() < self->want && ready_left > 0 && self->retries < kConsumeRetries) {
            ++self->retries;
            --self->next;
          }
          self->Step();
        });
  }
};

}  // namespace

void Waiters::Consume(std::shared_ptr<Waiter> w, bool block_if_empty) {
  auto run = std::make_shared<ConsumeRun>();
  run->worker = &worker_;
  run->waiter = w;
  run->want = w->count == 0 ? 1 : static_cast<size_t>(w->count);
  w->state.attempt_in_flight = true;
  run->done = [this, block_if_empty](ConsumeRun& r) {
    std::shared_ptr<Waiter> w = r.waiter;
    w->state.attempt_in_flight = false;
    if (w->state.done) {
      // The client left while the attempt was in flight: give its jobs back untouched.
      Release(r.jobs);
      return;
    }
    if (r.jobs.empty() && r.error.empty()) {
      if (block_if_empty) return Block(w);
      if (!w->state.blocked) return Reply(w, r.jobs, {});  // CONSUME without TIMEOUT: null
      return;  // still blocked: a later notification or tick tries again
    }
    Reply(w, r.jobs, r.error);
  };
  run->Step();
}

void Waiters::Reply(const std::shared_ptr<Waiter>& w, std::vector<JobEntry>& jobs,
                    const std::string& error) {
  const bool was_blocked = w->state.blocked;
  w->state.done = true;
  Unregister(w);
  ClientPort& port = w->port != nullptr ? *w->port : worker_.port();
  proto::ReplyWriter* out = port.Begin(w->ticket);
  if (out == nullptr) {
    Release(jobs);
    return;
  }
  if (!error.empty() && jobs.empty()) {
    out->Error(error);
  } else {
    WriteConsumeReply(*out, jobs, w->count != 0, worker_.wall_ms());
  }
  port.Finish(w->ticket);
  if (w->on_reply) w->on_reply(jobs.size());
  if (was_blocked && !jobs.empty()) {
    // More jobs may be ready: offer the queues to the next oldest consumers.
    for (const std::string& q : w->queues) AnnounceReady(QueueName{w->ns, q}.tag());
  }
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
    pool->Eval(persist::Script::kNack, keys, args, 0, [](const persist::UpstreamResult&) {});
  }
}

void Waiters::OnClientGone(uint64_t client_id) {
  for (auto& w : all_) {
    if (w->ticket.client_id == client_id && !w->state.done) {
      w->state.done = true;
      Unregister(w);
      // The queues may have jobs this consumer was about to get: offer them to the next one.
      for (const std::string& q : w->queues) AnnounceReady(QueueName{w->ns, q}.tag());
    }
  }
}

void Waiters::Tick() {
  const int64_t now_ms = worker_.now_ms();
  // Deadlines, and a poll of the blocked queues for jobs made ready by other deferq instances
  // (this instance's own are announced at once).
  std::vector<std::shared_ptr<Waiter>> live;
  live.reserve(all_.size());
  for (auto& w : all_) {
    if (w->state.done) continue;
    if (w->deadline_ms > 0 && now_ms >= w->deadline_ms && !w->state.attempt_in_flight) {
      std::vector<JobEntry> none;
      Reply(w, none, {});
      continue;
    }
    live.push_back(w);
  }
  all_.swap(live);
  // Bindings older than auth.cache_seconds are checked again whether or not a job comes, so a
  // revoked consumer is told within cache_seconds plus a tick and a lookup (SPEC §8).
  std::vector<std::shared_ptr<Waiter>> stale;
  for (const auto& w : all_) {
    if (!w->state.done && BindingStale(*w)) stale.push_back(w);
  }
  for (const auto& w : stale) RecheckBinding(w);
  std::vector<std::string> tags;
  for (auto& [tag, q] : by_queue_) tags.push_back(tag);
  for (const std::string& tag : tags) OnQueueReady(tag);
  if (now_ms >= next_marker_ms_) {
    next_marker_ms_ = now_ms + kMarkerRenewMs;
    for (auto& [tag, q] : by_queue_) {
      if (!q.empty()) MarkBlocked(tag, /*news=*/false);
    }
  }
}

void Waiters::ReleaseAll() {
  std::vector<std::shared_ptr<Waiter>> all;
  all.swap(all_);
  by_queue_.clear();
  for (auto& w : all) {
    if (!w->state.done && !w->state.attempt_in_flight) {
      std::vector<JobEntry> none;
      Reply(w, none, {});
    }
    Unregister(w);
  }
}

}  // namespace deferq::queue
