#include "queue/delivery/pump.h"

#include <atomic>
#include <ctime>
#include <functional>
#include <span>
#include <vector>

#include "base/check.h"
#include "base/clock.h"
#include "queue/context/loop.h"
#include "queue/context/server_context.h"
#include "queue/delivery/waiters.h"
#include "queue/model/job_codec.h"
#include "queue/model/queue_name.h"
#include "queue/stats/queue_stats.h"

namespace deferq::queue {

using base::MonotonicMs;

namespace {

constexpr int kPumpLimit = 1000;  // jobs per pump call; more are moved by the next call at once
// Pump ownership of a pool: held for kPumpLeaseMs, renewed (or tried for) every
// kPumpLeaseRenewMs, so a pool whose owning instance died gets a new one within kPumpLeaseMs plus
// one try.
// Queues read from the due index per poll; a full page is read again at once.
constexpr int kDuePage = 1000;
constexpr int kRegistryPage = 1000;
// A busy queue (DueRate: 8 or more jobs falling due per ms) waits kCoalesceMs before its next
// call, so due times a few ms apart share one call (fewer, fuller calls: Redis CPU per job;
// lateness grows by at most kCoalesceMs, bench/lateness). Below that rate a call per due ms costs
// Redis little, and a burst of a few jobs at once does not hold the jobs after it back.
constexpr int64_t kCoalesceMs = 3;
// While no consumer waits on a queue, its due staged jobs are moved up to kLazyMoveMs after their
// due time, many per call (pump.lua lazy_ms): a consume, peek or job moves the due ones itself
// before reading, and QSTAT counts them as ready, so clients see every job at its due ms. A
// queue's first waiter has it pumped at once (Waiters::MarkBlocked), and from then on at its
// due ms. Without cross-instance wake-ups (no marker) or without the wheel, every move is exact.
constexpr int64_t kLazyMoveMs = 100;
// A pump that found its due time not yet reached by this much is run again at that time.
constexpr int64_t kJustMissedMs = 5;
// Pump calls in a row on a queue with work already due, before it waits for the next ms.
constexpr int kRoundsInARow = 16;
// How often passed due times and ended busy spells are forgotten: every second, or once per
// kForgetPerSecond due times told when more are kept (a sweep of 100,000 entries every second was
// most of an idle deferq's CPU with 100,000 queues holding far-future jobs; a passed due time
// kept longer changes nothing, ScheduleDue ignores it).
constexpr int64_t kForgetMs = 1000;
constexpr size_t kForgetPerSecond = 10000;

}  // namespace

bool Pump::Follows(const std::string& tag) {
  const int64_t shard = shards_.Find(tag);
  if (shard >= 0) return shards_.Pumps(static_cast<size_t>(shard));
  return OwnsPoolOf(tag);
}

bool Pump::OwnsPoolOf(const std::string& tag) {
  const std::optional<QueueName> name = QueueName::Parse(tag);
  if (!name) return false;
  const persist::PoolClient* pool = loop_.PoolFor(name->ns);
  const auto& pools = loop_.pools();
  for (size_t i = 0; i < pools.size(); ++i) {
    if (pools[i].get() == pool) return loop_.flags().pump_owner(i).load(std::memory_order_relaxed);
  }
  return false;
}

int OwnerOf(std::string_view tag, int threads) {
  return static_cast<int>(std::hash<std::string_view>{}(tag) % static_cast<size_t>(threads));
}

void PumpOwnership::Tick() {
  // One instance pumps a pool: the owner reads the due index, which costs one call per poll
  // however many queues the pool holds, and routes each queue due soon to the thread that
  // pumps it. Other instances pump only at the due times of the jobs they published.
  const int64_t now_ms = loop_.now_ms();
  if (now_ms < next_sweep_ms_) return;
  next_sweep_ms_ = now_ms + loop_.config().sweep_ms;
  if (now_ms >= next_lease_ms_) {
    next_lease_ms_ = now_ms + kPumpLeaseRenewMs;
    Renew();
  }
  if (!loop_.flags().pump_owner(pool_index_).load(std::memory_order_relaxed)) return;
  PollDue();
  if (now_ms >= next_compact_ms_) {
    next_compact_ms_ = now_ms + kCompactEveryMs;
    CompactIndexes();
  }
}

void PumpOwnership::CompactIndexes() {
  persist::PoolClient* pool = loop_.pools()[pool_index_].get();
  // A Redis Cluster keeps these indexes per slot (few members each); not copied there.
  if (pool->cluster()) return;
  struct Index {
    std::string_view key;
    bool sorted;
  };
  static constexpr Index kIndexes[] = {
      {persist::kDueKey, true}, {persist::kRegistryKey, false}, {kActiveQueuesKey, true}};
  for (const Index& index : kIndexes) {
    const std::string_view usage[] = {"MEMORY", "USAGE", index.key};
    pool->Command(usage, 0, [pool, index](const persist::UpstreamResult& r) {
      int64_t bytes = 0;
      if (!r.view().Int(&bytes) || bytes < kCompactMinBytes) return;
      const std::string_view card[] = {index.sorted ? "ZCARD" : "SCARD", index.key};
      pool->Command(card, 0, [pool, index, bytes](const persist::UpstreamResult& c) {
        int64_t members = 0;
        if (!c.view().Int(&members)) return;
        if (!IndexNeedsCompaction(bytes, members)) return;
        // Atomic: what other instances add or remove meanwhile lands before or after the copy.
        const std::string_view zcopy[] = {"ZUNIONSTORE", index.key, "1", index.key};
        const std::string_view scopy[] = {"SUNIONSTORE", index.key, index.key};
        pool->Command(index.sorted ? std::span<const std::string_view>(zcopy)
                                   : std::span<const std::string_view>(scopy),
                      0, [](const persist::UpstreamResult&) {});
      });
    });
  }
}

void PumpOwnership::Found(std::string tag, int64_t due_wall_ms) {
  // A thread that never served the queue's namespace then still pumps it in this pool.
  if (loop_.pools().size() > 1) {
    if (std::optional<QueueName> name = QueueName::Parse(tag)) {
      loop_.namespaces().Learn(name->ns, loop_.pools()[pool_index_]->name());
    }
  }
  pump_.Route(tag, due_wall_ms);
}

void PumpOwnership::Renew() {
  persist::PoolClient* pool = loop_.pools()[pool_index_].get();
  const std::string_view keys[] = {persist::kLeasePrefix};  // own.lua's key: "dq:own"
  const std::string lease = std::to_string(kPumpLeaseMs);
  const std::string_view args[] = {loop_.peers().instance_id(), lease};
  // The lease runs from when Redis ran own.lua, which is after this.
  const int64_t sent_ms = MonotonicMs();
  pool->Eval(
      persist::Script::kOwn, keys, args, 0, [this, sent_ms](const persist::UpstreamResult& r) {
        int64_t mine = 0;
        if (!r.view().Int(&mine)) return;  // unknown: keep as is
        if (pool_index_ == 0) {
          loop_.flags().ConfirmLease(mine == 1 ? sent_ms + kPumpLeaseMs : 0);
        }
        const bool was =
            loop_.flags().pump_owner(pool_index_).exchange(mine == 1, std::memory_order_relaxed);
        if (mine == 1 && !was) PumpRegistered("0");
      });
}

void PumpOwnership::PumpRegistered(std::string cursor) {
  persist::PoolClient* pool = loop_.pools()[pool_index_].get();
  pool->ScanRegistry(cursor, kRegistryPage, [this](persist::RegistryRead& r) {
    if (!r.error.empty()) return;
    for (std::string& tag : r.tags) Found(std::move(tag), loop_.wall_ms());
    if (r.cursor != "0") PumpRegistered(std::move(r.cursor));
  });
}

void PumpOwnership::PollDue() {
  persist::PoolClient* pool = loop_.pools()[pool_index_].get();
  if (poll_in_flight_) return;
  poll_in_flight_ = true;
  // Everything falling due within the horizon; the timing wheels take it from there.
  const int64_t until = loop_.wall_ms() + DueHorizonMs(loop_.config().sweep_ms);
  pool->ReadDue(until, kDuePage, 0, [this](persist::DueRead& r) {
    poll_in_flight_ = false;
    if (!r.error.empty()) return;
    for (auto& [tag, due] : r.entries) {
      // A shard another instance owns is its owner's to pump (queue/delivery/shard_pump.h).
      if (const int64_t shard = pump_.shards().Find(tag);
          shard >= 0 && !pump_.shards().Pumps(static_cast<size_t>(shard))) {
        continue;
      }
      Found(std::move(tag), due);
    }
    // A full page: the next one at once (the pumps run meanwhile and move their entries on).
    if (r.entries.size() == static_cast<size_t>(kDuePage)) next_sweep_ms_ = loop_.now_ms();
  });
}

Pump::Pump(Loop& loop, Waiters& waiters, LatenessStats& lateness, ShardPumpTable& shards)
    : loop_(loop), waiters_(waiters), lateness_(lateness), shards_(shards) {}

Pump::~Pump() = default;

namespace {

// Queue `tag`, pumped by thread `owner`, has work falling due at due_wall_ms: that thread's
// Pump::OnQueueSeen runs.
void PostSeen(Loop& loop, int owner, const std::string& tag, int64_t due_wall_ms) {
  loop.peers().Post(owner, [tag, due_wall_ms](Loop& l) { l.pump().OnQueueSeen(tag, due_wall_ms); });
}

}  // namespace

void Pump::ScheduleDue(const std::string& tag, int64_t due_wall_ms) {
  const int owner = OwnerOf(tag, loop_.threads());
  if (owner == loop_.thread_index()) return OnQueueSeen(tag, due_wall_ms);
  if (!loop_.config().wheel) return;
  // Tell the owning thread only about a due time earlier than any it was told of and that has
  // not passed yet: steady traffic costs a message per queue now and then, not per job.
  auto it = told_.find(tag);
  if (it != told_.end() && it->second <= due_wall_ms && it->second > loop_.wall_ms()) return;
  told_[tag] = due_wall_ms;
  PostSeen(loop_, owner, tag, due_wall_ms);
}

void Pump::Route(const std::string& tag, int64_t due_wall_ms) {
  const int owner = OwnerOf(tag, loop_.threads());
  if (owner == loop_.thread_index()) return OnQueueSeen(tag, due_wall_ms);
  PostSeen(loop_, owner, tag, due_wall_ms);
}

void Pump::OnQueueSeen(const std::string& tag, int64_t due_wall_ms) {
  if (due_wall_ms < 0) return;
  // Without the wheel only the due-index poll moves jobs: what it finds due is pumped now, the
  // rest at a later poll.
  if (!loop_.config().wheel) {
    if (due_wall_ms <= loop_.wall_ms()) PumpQueue(tag, 0);
    return;
  }
  SchedulePump(tag, due_wall_ms);
}

void Pump::SchedulePump(const std::string& tag, int64_t due_wall_ms) {
  if (!loop_.config().wheel) return;
  const int64_t now_ms = loop_.now_ms();
  int64_t at = now_ms + std::max<int64_t>(0, due_wall_ms - loop_.wall_ms());
  QueuePump& q = queues_.try_emplace(tag, tag).first->second;
  // A busy queue's due times a few ms apart are coalesced into one pump call.
  if (q.quiet_until_ms > now_ms) at = std::max(at, q.quiet_until_ms);
  if (q.armed() && q.at_ms() <= at) return;  // an earlier pump is already due
  q.Arm(wheel_, at);
  q.due_wall_ms = due_wall_ms;
}

void Pump::RunTimers() {
  if (wheel_.size() == 0) return;
  std::vector<uint64_t> fired;
  wheel_.Advance(loop_.now_ms(), &fired);
  // Tags first: pumping one queue never touches another's QueuePump, but a tag stays valid
  // whatever happens to the entries meanwhile.
  std::vector<std::string> tags;
  tags.reserve(fired.size());
  const int64_t wall_ms = loop_.wall_ms();
  for (uint64_t value : fired) {
    auto* q = static_cast<QueuePump*>(WheelTimer::FromValue(value));
    q->Fired();
    if (q->due_wall_ms > wall_ms && q->due_wall_ms <= wall_ms + 1) {
      q->Arm(wheel_, loop_.now_ms() + 1);  // the wall clock's ms has not begun yet (see pump.h)
      continue;
    }
    q->due_wall_ms = -1;
    tags.push_back(q->tag);
  }
  for (const std::string& tag : tags) {
    auto it = queues_.find(tag);
    if (it == queues_.end()) continue;
    if (it->second.pumping) {
      it->second.repump = true;  // runs as soon as the pump in flight answers
    } else {
      PumpQueue(tag, 0);
      Retire(tag);
    }
  }
}

bool DueRate::Note(int64_t made_ready, int64_t now_ms) {
  // The first call has no call before it to measure from.
  if (last_ms != 0) {
    const double span_ms = static_cast<double>(std::max<int64_t>(1, now_ms - last_ms));
    per_ms += kWeight * (static_cast<double>(made_ready) / span_ms - per_ms);
  }
  last_ms = now_ms;
  return per_ms >= kBusyPerMs;
}

void Pump::Retire(const std::string& tag) {
  auto it = queues_.find(tag);
  if (it == queues_.end()) return;
  const QueuePump& q = it->second;
  if (q.armed() || q.pumping) return;  // Retire runs again when its timer fires or call answers
  if (q.quiet_until_ms <= loop_.now_ms()) {
    queues_.erase(it);
  } else {
    lingering_.insert(tag);  // forgotten by Tick once its busy spell ends
  }
}

void Pump::Tick() {
  const int64_t now_ms = loop_.now_ms();
  if (now_ms >= next_forget_ms_) {
    next_forget_ms_ = now_ms + kForgetMs * static_cast<int64_t>(std::max<size_t>(
                                               1, told_.size() / kForgetPerSecond));
    // Due times told to other threads that have passed need no throttling any more: forgotten,
    // so one-off queues leave nothing behind in this thread.
    const int64_t wall_ms = loop_.wall_ms();
    std::erase_if(told_, [wall_ms](const auto& t) { return t.second <= wall_ms; });
    // So are the queues kept only for a busy spell that has ended (Retire drops the others
    // itself, when their timer fires or their call answers): only those are visited, not the
    // queues whose timers wait.
    std::erase_if(lingering_, [this, now_ms](const std::string& tag) {
      auto it = queues_.find(tag);
      if (it == queues_.end()) return true;
      const QueuePump& q = it->second;
      if (q.armed() || q.pumping) return true;  // its timer or call ends in Retire
      if (q.quiet_until_ms > now_ms) return false;
      queues_.erase(it);
      return true;
    });
  }
  if (loop_.thread_index() == 0) {
    // Each pool has its own owner; the pools are added after the pump is made.
    while (ownership_.size() < loop_.pools().size()) {
      ownership_.push_back(std::make_unique<PumpOwnership>(loop_, *this, ownership_.size()));
    }
    for (auto& o : ownership_) o->Tick();
  }
}

void Pump::PumpQueue(const std::string& tag, int rounds) {
  const std::optional<QueueName> name = QueueName::Parse(tag);
  if (!name) return;
  auto found = queues_.find(tag);
  if (found != queues_.end() && found->second.pumping) return;
  persist::PoolClient* pool = loop_.PoolFor(name->ns);
  if (pool == nullptr) return;
  QueuePump& q =
      found != queues_.end() ? found->second : queues_.try_emplace(tag, tag).first->second;
  q.pumping = true;
  const std::string prefix = name->prefix();
  const std::string now = std::to_string(loop_.wall_ms());
  const std::string limit = std::to_string(kPumpLimit);
  const std::string ahead = std::to_string(loop_.config().lookahead_ms);
  const bool lazy = loop_.config().cross_instance_wake && loop_.config().wheel;
  const std::string lazy_ms = lazy ? std::to_string(kLazyMoveMs) : "0";
  // Jobs this instance's blocked consumers take are theirs, unannounced (pump.lua serve): one
  // consume call per job, where an announcement would wake a consumer in every instance.
  const int64_t serve = waiters_.ServeCapacity(tag);
  const std::string serve_arg = std::to_string(serve);
  // And the oldest of them, when it is this thread's, gets its jobs leased by this very call
  // (pump.lua lease_count): no consume call after it. Not where state changes wait for replicas
  // (the pump's calls do not wait; a consume's do).
  std::optional<Waiters::PumpLease> lease;
  if (serve > 0 && !pool->replicated()) lease = waiters_.ReserveForPump(tag);
  std::string ttr_arg, count_arg;
  if (lease) {
    ttr_arg = std::to_string(lease->waiter->ttr_ms);
    count_arg = std::to_string(std::max(1, lease->waiter->count));
  }
  const std::string_view keys[] = {prefix};
  const std::string_view args[] = {now, limit, ahead, lazy_ms, serve_arg, ttr_arg, count_arg};
  pool->Eval(persist::Script::kPump, keys, std::span<const std::string_view>(args, lease ? 7 : 5),
             std::hash<std::string>{}(tag),
             [this, tag, rounds, serve, lease = std::move(lease)](
                 const persist::UpstreamResult& r) { OnPumped(tag, rounds, serve, lease, r); });
}

void Pump::OnPumped(const std::string& tag, int rounds, int64_t serve,
                    const std::optional<Waiters::PumpLease>& lease,
                    const persist::UpstreamResult& r) {
  NoteQueueActivity(loop_.flags(),
                    tag);  // the per-queue metrics read its figures again (queue_stats.h)
  // The consumer a lease was asked for is answered whatever happens (no jobs: it waits on).
  std::vector<JobEntry> leased;
  int64_t ready_left = -1;
  struct AnswerLease {
    Waiters& waiters;
    const std::optional<Waiters::PumpLease>& lease;
    std::vector<JobEntry>& jobs;
    int64_t& ready_left;
    bool done = false;
    void Now() {
      if (done || !lease) return;
      done = true;
      waiters.PumpAnswered(*lease, jobs, ready_left);
    }
    ~AnswerLease() { Now(); }
  } answer{waiters_, lease, leased, ready_left};
  bool again = false;
  if (auto it = queues_.find(tag); it != queues_.end()) {
    it->second.pumping = false;
    again = it->second.repump;
    it->second.repump = false;
  }
  struct RetireAtEnd {
    Pump* pump;
    const std::string& tag;
    ~RetireAtEnd() { pump->Retire(tag); }
  } retire{this, tag};
  // pump.lua answers {made_ready, more, next_due_ms, lateness_ms...}, with a lease
  // {made_ready, more, next_due_ms, ready_left, n, lateness_ms1..n, jobs...}. On failure (Redis
  // down or slow) the sweep retries.
  if (!r.view().is_array() || r.view().size() < 3) return;
  int64_t made_ready = 0, more = 0, next_due = -1;
  r.view()[0].Int(&made_ready);
  r.view()[1].Int(&more);
  r.view()[2].Int(&next_due);
  size_t late_from = 3, late_end = r.view().size();
  if (lease) {
    int64_t n = 0;
    if (r.view().size() < 5 || !r.view()[3].Int(&ready_left) || !r.view()[4].Int(&n) || n < 0 ||
        r.view().size() < 5 + size_t(n)) {
      return;
    }
    late_from = 5;
    late_end = 5 + static_cast<size_t>(n);
    const std::optional<QueueName> name = QueueName::Parse(tag);
    if (!DecodeJobs(r.view(), late_end, name->ns, name->queue, &leased)) {
      // Leased but not understood: given back by their TTR, as after a lost consume reply.
      leased.clear();
      ready_left = -1;
    }
  }
  if (late_end > late_from) {
    std::vector<int64_t> late;
    late.reserve(late_end - late_from);
    for (size_t i = late_from; i < late_end; ++i) {
      int64_t ms = 0;
      if (r.view()[i].Int(&ms)) late.push_back(ms);
    }
    lateness_.Record(tag, late, loop_.now_ms());
  }
  // The consumer is answered first, so what is left goes to the next one.
  const int64_t left = made_ready - static_cast<int64_t>(leased.size());
  answer.Now();
  if (left > 0 && made_ready <= serve) {
    waiters_.OfferHeld(tag);
  } else if (left > 0) {
    waiters_.OfferReady(tag);
  }
  const int64_t wall_ms = loop_.wall_ms();
  if (auto it = queues_.find(tag); it != queues_.end()) {
    const int64_t now_ms = loop_.now_ms();
    if (it->second.rate.Note(made_ready, now_ms)) it->second.quiet_until_ms = now_ms + kCoalesceMs;
  }
  // Work already due (a backlog, or a bucket being staged): pump again at once, a few calls
  // in a row; past that, at the next millisecond, so neither the loop nor Redis is hogged and
  // nothing waits for the sweep.
  const bool due_now = more || (next_due >= 0 && next_due <= wall_ms);
  if ((due_now && rounds < kRoundsInARow) || again) {
    PumpQueue(tag, rounds + 1);
  } else if (due_now) {
    SchedulePump(tag, wall_ms + 1);
  } else if (next_due >= 0 && next_due < wall_ms + DueHorizonMs(loop_.config().sweep_ms) &&
             Follows(tag)) {
    // The pump owner follows a queue's next due time when it is near (a later one comes back
    // through the due index), and so does the owner of a shard of a sharded queue; other
    // instances only pump at the due times of the jobs they published themselves (ScheduleDue).
    SchedulePump(tag, next_due);
  } else if (next_due >= 0 && next_due <= wall_ms + kJustMissedMs) {
    // Any instance: a timer that fired a ms before its due time (the wheel runs on the monotonic
    // clock, jobs on the wall clock) tries again at once rather than leaving the job to the
    // owner's next poll, or to a new owner when the last one died.
    SchedulePump(tag, next_due);
  }
}

}  // namespace deferq::queue
