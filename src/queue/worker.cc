#include "queue/worker.h"

#include <hiredis/hiredis.h>

#include <atomic>
#include <cstdio>
#include <functional>

#include "queue/job_codec.h"

namespace deferq::queue {

namespace {

constexpr int kPumpLimit = 1000;  // jobs per pump call; more are moved by the next call at once
constexpr const char* kReadyChannel = "dq:ready";
constexpr const char* kBlockedMarkerMs = "3000";  // renewed every second while blocked
constexpr int64_t kMarkerRenewMs = 1000;
// Pump ownership of a pool: held for kLeaseMs, renewed (or tried for) every kLeaseRenewMs, so a
// pool whose owning instance died gets a new one within kLeaseMs.
constexpr const char* kLeaseMs = "2000";
constexpr int64_t kLeaseRenewMs = 500;
constexpr const char* kOwnerPrefix = "dq:";  // own.lua's key: "dq:own"
// Queues read from the due index per poll; a full page is read again at once.
constexpr int kDuePage = 1000;
constexpr int kRegistryPage = 1000;
// A pump call that made at least kBusyPump jobs ready marks its queue busy: the next call waits
// kCoalesceMs, so due times a few ms apart share one call (fewer, fuller calls; lateness grows
// by at most kCoalesceMs, bench/lateness).
constexpr int kBusyPump = 4;
constexpr int64_t kCoalesceMs = 3;
// A pump that found its due time not yet reached by this much is run again at that time.
constexpr int64_t kJustMissedMs = 5;

// Whether this instance (process) holds the pump ownership of the pools: set by thread 0, read
// by every thread's OnPumped. A relaxed flag: a stale view costs one pump call, never a job.
std::atomic<bool>& PumpOwner() {
  static std::atomic<bool> owner{false};
  return owner;
}
// A consume call pops at most count + 1000 list entries; stale entries beyond that are passed
// by calling again (the list compaction keeps them fewer than the live ones, docs/storage.md).
constexpr int kConsumeRetries = 8;

}  // namespace

Worker::Worker(const Config& config, ClientPort& port, Notifier& notifier, LatenessStats& lateness,
               int thread_index, int threads)
    : config_(config),
      port_(port),
      notifier_(notifier),
      lateness_(lateness),
      thread_index_(thread_index),
      threads_(threads) {}

Worker::~Worker() = default;

void Worker::AddPool(std::unique_ptr<persist::PoolClient> pool) {
  // Cross-instance wake-ups: one thread per instance listens on the pool's channel, where the
  // storage scripts announce queues that got ready jobs while some instance has consumers
  // blocked on them (docs/architecture.md).
  if (thread_index_ == 0 && config_.cross_instance_wake) {
    pool->Subscribe(kReadyChannel, [this](std::string_view tag) {
      if (notifier_.AnyBlocked()) notifier_.QueueReady(std::string(tag));
    });
  }
  pools_.push_back(std::move(pool));
}

void Worker::MarkBlocked(const std::string& tag) {
  if (!config_.cross_instance_wake) return;
  // The marker tells the scripts of every instance to announce this queue's ready jobs on the
  // channel. It expires by itself when nobody renews it.
  const size_t slash = tag.find('/');
  persist::PoolClient* pool = PoolFor(tag.substr(0, slash));
  if (pool == nullptr) return;
  const std::string key = "dq:{" + tag + "}:wt";
  const std::string_view args[] = {"SET", key, "1", "PX", kBlockedMarkerMs};
  pool->Command(args, 0, [](const persist::UpstreamResult&) {});
}

persist::PoolClient* Worker::PoolFor(const std::string&) {
  for (auto& p : pools_) {
    if (p->name() == "default") return p.get();
  }
  return pools_.empty() ? nullptr : pools_.front().get();
}

bool Worker::Owns(const std::string& tag) const {
  return std::hash<std::string>{}(tag) % static_cast<size_t>(threads_) ==
         static_cast<size_t>(thread_index_);
}

void Worker::Block(std::shared_ptr<Waiter> w) {
  w->blocked = true;
  w->seq = notifier_.NextWaiterSeq();
  for (const std::string& name : w->queues) {
    const std::string tag = w->ns + "/" + name;
    auto& q = waiters_[tag];
    if (q.empty()) MarkBlocked(tag);
    q.push_back(w);
    notifier_.AddWaiter(tag, w->seq, thread_index_);
  }
  all_waiters_.push_back(w);
  ++blocked_count_;
}

void Worker::Unregister(const std::shared_ptr<Waiter>& w) {
  if (!w->blocked) return;
  w->blocked = false;
  --blocked_count_;
  for (const std::string& q : w->queues) notifier_.RemoveWaiter(w->ns + "/" + q, w->seq);
}

void Worker::OnQueueReady(const std::string& tag) { TryServe(tag); }

void Worker::AnnounceReady(const std::string& tag) {
  if (notifier_.AnyBlocked()) notifier_.QueueReady(tag);
}

void Worker::TryServe(const std::string& tag) {
  auto it = waiters_.find(tag);
  if (it == waiters_.end()) return;
  auto& q = it->second;
  while (!q.empty() && q.front()->done) q.pop_front();
  if (q.empty()) {
    waiters_.erase(it);
    return;
  }
  // First come, first served: only the oldest waiter of the whole instance tries; when it is
  // served, the next one is offered the queue (see Reply).
  const std::shared_ptr<Waiter>& head = q.front();
  if (!head->attempt_in_flight && notifier_.IsOldest(tag, head->seq)) {
    Consume(head, /*block_if_empty=*/false);
  }
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

void Worker::Consume(std::shared_ptr<Waiter> w, bool block_if_empty) {
  auto run = std::make_shared<ConsumeRun>();
  run->worker = this;
  run->waiter = w;
  run->want = w->count == 0 ? 1 : static_cast<size_t>(w->count);
  w->attempt_in_flight = true;
  run->done = [this, block_if_empty](ConsumeRun& r) {
    std::shared_ptr<Waiter> w = r.waiter;
    w->attempt_in_flight = false;
    if (w->done) {
      // The client left while the attempt was in flight: give its jobs back untouched.
      Release(r.jobs);
      return;
    }
    if (r.jobs.empty() && r.error.empty()) {
      if (block_if_empty) return Block(w);
      if (!w->blocked) return Reply(w, r.jobs, {});  // CONSUME without TIMEOUT: null
      return;  // still blocked: a later notification or tick tries again
    }
    Reply(w, r.jobs, r.error);
  };
  run->Step();
}

void Worker::Reply(const std::shared_ptr<Waiter>& w, std::vector<JobEntry>& jobs,
                   const std::string& error) {
  const bool was_blocked = w->blocked;
  w->done = true;
  Unregister(w);
  ClientPort& port = w->port != nullptr ? *w->port : port_;
  proto::ReplyWriter* out = port.Begin(w->ticket);
  if (out == nullptr) {
    Release(jobs);
    return;
  }
  if (!error.empty() && jobs.empty()) {
    out->Error(error);
  } else {
    WriteConsumeReply(*out, jobs, w->count != 0, wall_ms_);
  }
  port.Finish(w->ticket);
  if (was_blocked && !jobs.empty()) {
    // More jobs may be ready: offer the queues to the next oldest consumers.
    for (const std::string& q : w->queues) AnnounceReady(w->ns + "/" + q);
  }
}

void Worker::Release(const std::vector<JobEntry>& jobs) {
  // Leases taken for a client that is gone: undo them so the jobs are ready again at once, with
  // the delivery not counted.
  for (const JobEntry& j : jobs) {
    persist::PoolClient* pool = PoolFor(j.ns);
    const std::string prefix = QueueName{j.ns, j.queue}.prefix();
    const std::string now = std::to_string(wall_ms_);
    const std::string_view keys[] = {prefix};
    const std::string_view args[] = {now, j.key, "", "undo"};
    pool->Eval(persist::Script::kNack, keys, args, 0, [](const persist::UpstreamResult&) {});
  }
}

void Worker::OnClientGone(uint64_t client_id) {
  for (auto& w : all_waiters_) {
    if (w->ticket.client_id == client_id && !w->done) {
      w->done = true;
      Unregister(w);
      // The queues may have jobs this consumer was about to get: offer them to the next one.
      for (const std::string& q : w->queues) AnnounceReady(w->ns + "/" + q);
    }
  }
}

void Worker::ScheduleDue(const std::string& tag, int64_t due_wall_ms) {
  if (Owns(tag)) return OnQueueSeen(tag, due_wall_ms);
  if (!config_.wheel) return;
  // Tell the owning thread only about a due time earlier than any it was told of and that has
  // not passed yet: steady traffic costs a message per queue now and then, not per job.
  auto it = announced_.find(tag);
  if (it != announced_.end() && it->second <= due_wall_ms && it->second > wall_ms_) return;
  announced_[tag] = due_wall_ms;
  notifier_.QueueSeen(tag, due_wall_ms);
}

void Worker::OnQueueSeen(const std::string& tag, int64_t due_wall_ms) {
  if (due_wall_ms < 0) return;
  // Without the wheel only the due-index poll moves jobs: what it finds due is pumped now, the
  // rest at a later poll.
  if (!config_.wheel) {
    if (due_wall_ms <= wall_ms_) PumpQueue(tag, 0);
    return;
  }
  SchedulePump(tag, due_wall_ms);
}

void Worker::SchedulePump(const std::string& tag, int64_t due_wall_ms) {
  if (!config_.wheel) return;
  int64_t at = now_ms_ + std::max<int64_t>(0, due_wall_ms - wall_ms_);
  // A busy queue's due times a few ms apart are coalesced into one pump call.
  if (auto quiet = quiet_until_.find(tag); quiet != quiet_until_.end()) {
    if (quiet->second <= now_ms_) {
      quiet_until_.erase(quiet);
    } else {
      at = std::max(at, quiet->second);
    }
  }
  PumpTimer& t = pump_timers_[tag];
  if (t.id != 0) {
    if (t.at_ms <= at) return;  // an earlier pump is already due
    wheel_.Cancel(t.id);
  } else {
    t.number = next_tag_number_++;
    timer_tags_[t.number] = tag;
  }
  t.at_ms = at;
  t.id = wheel_.Schedule(at, t.number);
}

void Worker::RunTimers() {
  if (wheel_.size() == 0) return;
  std::vector<uint64_t> fired;
  wheel_.Advance(now_ms_, &fired);
  for (uint64_t number : fired) {
    auto node = timer_tags_.extract(number);
    if (node.empty()) continue;
    const std::string tag = std::move(node.mapped());
    pump_timers_.erase(tag);
    if (pumping_.count(tag)) {
      repump_.insert(tag);  // runs as soon as the pump in flight answers
    } else {
      PumpQueue(tag, 0);
    }
  }
}

void Worker::Tick(int64_t now_ms, int64_t wall_ms) {
  SetClock(now_ms, wall_ms);
  for (auto& p : pools_) p->Tick();
  // Blocked consumers: deadlines, and a poll of their queues for jobs made ready by other
  // deferq instances (this instance's own are announced at once).
  std::vector<std::shared_ptr<Waiter>> live;
  live.reserve(all_waiters_.size());
  for (auto& w : all_waiters_) {
    if (w->done) continue;
    if (w->deadline_ms > 0 && now_ms >= w->deadline_ms && !w->attempt_in_flight) {
      std::vector<JobEntry> none;
      Reply(w, none, {});
      continue;
    }
    live.push_back(w);
  }
  all_waiters_.swap(live);
  std::vector<std::string> tags;
  for (auto& [tag, q] : waiters_) tags.push_back(tag);
  for (const std::string& tag : tags) TryServe(tag);
  if (now_ms >= next_marker_ms_) {
    next_marker_ms_ = now_ms + kMarkerRenewMs;
    // Due times told to other threads that have passed need no throttling any more: forgotten,
    // so one-off queues leave nothing behind in this thread.
    std::erase_if(announced_, [this](const auto& a) { return a.second <= wall_ms_; });
    std::erase_if(quiet_until_, [now_ms](const auto& q) { return q.second <= now_ms; });
    for (auto& [tag, q] : waiters_) {
      if (!q.empty()) MarkBlocked(tag);
    }
  }
  if (now_ms >= next_sweep_ms_) {
    next_sweep_ms_ = now_ms + config_.sweep_ms;
    Pump();
  }
}

void Worker::Route(const std::string& tag, int64_t due_wall_ms) {
  if (Owns(tag)) return OnQueueSeen(tag, due_wall_ms);
  notifier_.QueueSeen(tag, due_wall_ms);
}

void Worker::RenewOwnership() {
  persist::PoolClient* pool = PoolFor("default");
  if (pool == nullptr) return;
  const std::string_view keys[] = {kOwnerPrefix};
  const std::string_view args[] = {notifier_.instance_id(), kLeaseMs};
  pool->Eval(persist::Script::kOwn, keys, args, 0, [this](const persist::UpstreamResult& r) {
    int64_t mine = 0;
    if (r.reply == nullptr || !ReplyInt(r.reply, &mine)) return;  // unknown: keep as is
    const bool was = PumpOwner().exchange(mine == 1, std::memory_order_relaxed);
    if (mine == 1 && !was) PumpRegistered("0");
  });
}

void Worker::PumpRegistered(std::string cursor) {
  persist::PoolClient* pool = PoolFor("default");
  if (pool == nullptr) return;
  const std::string page = std::to_string(kRegistryPage);
  const std::string_view args[] = {"SSCAN", persist::kRegistryKey, cursor, "COUNT", page};
  pool->Command(args, 0, [this](const persist::UpstreamResult& r) {
    // [cursor, [tag...]]
    if (r.reply == nullptr || r.reply->type != REDIS_REPLY_ARRAY || r.reply->elements != 2 ||
        r.reply->element[0]->type != REDIS_REPLY_STRING ||
        r.reply->element[1]->type != REDIS_REPLY_ARRAY) {
      return;
    }
    const redisReply* tags = r.reply->element[1];
    for (size_t i = 0; i < tags->elements; ++i) {
      if (tags->element[i]->type != REDIS_REPLY_STRING) continue;
      Route(std::string(tags->element[i]->str, tags->element[i]->len), wall_ms_);
    }
    std::string next(r.reply->element[0]->str, r.reply->element[0]->len);
    if (next != "0") PumpRegistered(std::move(next));
  });
}

void Worker::PollDue() {
  persist::PoolClient* pool = PoolFor("default");
  if (pool == nullptr || poll_in_flight_) return;
  poll_in_flight_ = true;
  // Everything falling due before the next poll; the timing wheels take it from there.
  const std::string until = std::to_string(wall_ms_ + config_.sweep_ms);
  const std::string page = std::to_string(kDuePage);
  const std::string_view args[] = {"ZRANGEBYSCORE", persist::kDueKey, "-inf", until,
                                   "WITHSCORES",    "LIMIT",          "0",    page};
  pool->Command(args, 0, [this](const persist::UpstreamResult& r) {
    poll_in_flight_ = false;
    if (r.reply == nullptr || r.reply->type != REDIS_REPLY_ARRAY) return;
    for (size_t i = 0; i + 1 < r.reply->elements; i += 2) {
      const redisReply* tag = r.reply->element[i];
      int64_t due = 0;
      if (tag->type != REDIS_REPLY_STRING || !ReplyInt(r.reply->element[i + 1], &due)) continue;
      Route(std::string(tag->str, tag->len), due);
    }
    // A full page: the next one at once (the pumps run meanwhile and move their entries on).
    if (r.reply->elements == 2 * static_cast<size_t>(kDuePage)) next_sweep_ms_ = now_ms_;
  });
}

void Worker::Pump() {
  // One instance pumps a pool: the owner reads the due index, which costs one call per poll
  // however many queues the pool holds, and routes each queue due soon to the thread that
  // pumps it. Other instances pump only at the due times of the jobs they published.
  if (thread_index_ != 0) return;
  if (now_ms_ >= next_lease_ms_) {
    next_lease_ms_ = now_ms_ + kLeaseRenewMs;
    RenewOwnership();
  }
  if (PumpOwner().load(std::memory_order_relaxed)) PollDue();
}

void Worker::PumpQueue(const std::string& tag, int rounds) {
  if (pumping_.count(tag)) return;
  const size_t slash = tag.find('/');
  if (slash == std::string::npos) return;
  QueueName q{tag.substr(0, slash), tag.substr(slash + 1)};
  persist::PoolClient* pool = PoolFor(q.ns);
  if (pool == nullptr) return;
  pumping_.insert(tag);
  const std::string prefix = q.prefix();
  const std::string now = std::to_string(wall_ms_);
  const std::string limit = std::to_string(kPumpLimit);
  const std::string ahead = std::to_string(config_.lookahead_ms);
  const std::string_view keys[] = {prefix};
  const std::string_view args[] = {now, limit, ahead};
  pool->Eval(persist::Script::kPump, keys, args, std::hash<std::string>{}(tag),
             [this, tag, rounds](const persist::UpstreamResult& r) { OnPumped(tag, rounds, r); });
}

void Worker::OnPumped(const std::string& tag, int rounds, const persist::UpstreamResult& r) {
  pumping_.erase(tag);
  const bool again = repump_.erase(tag) > 0;
  // pump.lua answers {made_ready, more, next_due_ms, lateness_ms...}. On failure (Redis down or
  // slow) the sweep retries.
  if (r.reply == nullptr || r.reply->type != REDIS_REPLY_ARRAY || r.reply->elements < 3) return;
  int64_t made_ready = 0, more = 0, next_due = -1;
  ReplyInt(r.reply->element[0], &made_ready);
  ReplyInt(r.reply->element[1], &more);
  ReplyInt(r.reply->element[2], &next_due);
  if (r.reply->elements > 3) {
    std::vector<int64_t> late;
    late.reserve(r.reply->elements - 3);
    for (size_t i = 3; i < r.reply->elements; ++i) {
      int64_t ms = 0;
      if (ReplyInt(r.reply->element[i], &ms)) late.push_back(ms);
    }
    lateness_.Record(tag, late);
  }
  if (made_ready > 0) AnnounceReady(tag);
  if (made_ready >= kBusyPump) quiet_until_[tag] = now_ms_ + kCoalesceMs;
  // Work already due (a backlog, or a bucket being staged): pump again at once, a few calls
  // in a row; past that, at the next millisecond, so neither the loop nor Redis is hogged and
  // nothing waits for the sweep.
  const bool due_now = more || (next_due >= 0 && next_due <= wall_ms_);
  if ((due_now && rounds < 16) || again) {
    PumpQueue(tag, rounds + 1);
  } else if (due_now) {
    SchedulePump(tag, wall_ms_ + 1);
  } else if (next_due >= 0 && next_due < wall_ms_ + 2 * static_cast<int64_t>(config_.sweep_ms) &&
             PumpOwner().load(std::memory_order_relaxed)) {
    // The pump owner follows a queue's next due time when it is near (a later one comes back
    // through the due index); other instances only pump at the due times of the jobs they
    // published themselves (ScheduleDue).
    SchedulePump(tag, next_due);
  } else if (next_due >= 0 && next_due <= wall_ms_ + kJustMissedMs) {
    // Any instance: a timer that fired a ms before its due time (the wheel runs on the monotonic
    // clock, jobs on the wall clock) tries again at once rather than leaving the job to the
    // owner's next poll, or to a new owner when the last one died.
    SchedulePump(tag, next_due);
  }
}

void Worker::Flush() {
  for (auto& p : pools_) p->Flush();
}

void Worker::ReleaseWaiters() {
  std::vector<std::shared_ptr<Waiter>> all;
  all.swap(all_waiters_);
  waiters_.clear();
  for (auto& w : all) {
    if (!w->done && !w->attempt_in_flight) {
      std::vector<JobEntry> none;
      Reply(w, none, {});
    }
    Unregister(w);
  }
}

void Worker::Shutdown() {
  for (auto& p : pools_) p->Shutdown();
}

bool Worker::quiescent() const {
  for (const auto& p : pools_) {
    if (!p->quiescent()) return false;
  }
  return true;
}

}  // namespace deferq::queue
