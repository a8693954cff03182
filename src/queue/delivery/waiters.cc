#include "queue/delivery/waiters.h"

#include <algorithm>
#include <atomic>
#include <functional>
#include <map>
#include <optional>
#include <utility>

#include "persist/cluster_slots.h"
#include "queue/context/loop.h"
#include "queue/context/server_context.h"
#include "queue/model/job_codec.h"
#include "queue/model/queue_name.h"
#include "queue/stats/queue_stats.h"

namespace deferq::queue {

namespace {

// The marker P.."wt" of a queue consumers wait on lives MarkerMs() (5 min, shorter when
// server.retain_seconds is: a finished queue leaves nothing after its retention) and is renewed
// after 2/5 of that while they wait, in batches of at most kMarkBatch queues (marks.lua):
// 10,000 blocked queues cost Redis one call of 100 SETs every 1.2 s. It lingers up to its life
// after the last waiter left (the queue's ready jobs are announced, and its pump kept exact,
// that long; docs/architecture.md).
constexpr int64_t kMarkerMaxMs = 300000;
constexpr int64_t kMarkerMinMs = 3000;
constexpr size_t kMarkBatch = 100;
// A queue set this thread stopped using is kept this long (with what is known of its queues),
// for the consumer that comes back from its jobs with the same CONSUME.
constexpr int64_t kSetGraceMs = 10000;
// The safety net under the announcements (a news lost while the subscriber reconnected, a
// marker that expired during an outage): every kSafetyPollMs, the ready gauges of up to
// kSafetyBatch of this thread's blocked queues (round robin) are read in one qstats call, and
// those with ready jobs are offered to their waiters. Its rate does not grow with the number
// of blocked queues. Small calls, often: a call holds Redis ~0.4 ms under load (50 queues:
// ~0.9 ms, which a pump call queued behind it shows as lateness).
constexpr int64_t kSafetyPollMs = 1000;
constexpr size_t kSafetyBatch = 25;
// A consume call pops at most count + 1000 list entries; stale entries beyond that are passed
// by calling again (the list compaction keeps them fewer than the live ones, docs/storage.md).
constexpr int kConsumeRetries = 8;
// Queues per consumes.lua call (it takes up to 1,000): a read of 1,000 queues is four calls one
// after the other, each ~2 ms of Redis at most, so other clients run in between.
constexpr size_t kConsumesMax = 250;

}  // namespace

// ---- WaiterOrder: the instance-wide sets ----

QueueSet* WaiterOrder::Acquire(const std::string& key, const std::string& ns,
                               std::span<const std::string_view> queues) {
  base::MutexLock lock(&mu_);
  std::unique_ptr<QueueSet>& slot = by_key_[key];
  if (slot == nullptr) {
    slot = std::make_unique<QueueSet>();
    QueueSet* set = slot.get();
    set->key = key;
    set->queues.assign(queues.begin(), queues.end());
    set->tags.reserve(queues.size());
    set->prefixes.reserve(queues.size());
    for (std::string_view q : queues) {
      const QueueName name{ns, std::string(q)};
      set->tags.push_back(name.tag());
      set->prefixes.push_back(name.prefix());
    }
    set->news_at.assign(queues.size(), 0);
    set->empty_until.assign(queues.size(), 0);
    for (size_t i = 0; i < set->tags.size(); ++i) {
      auto& sets = by_tag_[set->tags[i]];
      const bool named_before =
          std::any_of(sets.begin(), sets.end(), [&](const auto& e) { return e.first == set; });
      if (!named_before) sets.emplace_back(set, i);  // a queue named twice: its first place
    }
    sets_.fetch_add(1, std::memory_order_relaxed);
  }
  ++slot->refs;
  return slot.get();
}

void WaiterOrder::Release(QueueSet* set) {
  base::MutexLock lock(&mu_);
  if (--set->refs > 0) return;
  for (const std::string& tag : set->tags) {
    auto it = by_tag_.find(tag);
    if (it == by_tag_.end()) continue;
    std::erase_if(it->second, [&](const auto& e) { return e.first == set; });
    if (it->second.empty()) {
      by_tag_.erase(it);
      held_.erase(tag);
    }
  }
  sets_.fetch_sub(1, std::memory_order_relaxed);
  by_key_.erase(set->key);  // destroys it
}

void WaiterOrder::Add(QueueSet* set, uint64_t seq, int thread, int want) {
  base::MutexLock lock(&mu_);
  if (set->waiting.try_emplace(seq, thread, want).second) {
    set->capacity += want;
    blocked_.fetch_add(1, std::memory_order_relaxed);
  }
}

void WaiterOrder::Remove(QueueSet* set, uint64_t seq) {
  base::MutexLock lock(&mu_);
  auto it = set->waiting.find(seq);
  if (it == set->waiting.end()) return;
  set->capacity -= it->second.second;
  set->waiting.erase(it);
  blocked_.fetch_sub(1, std::memory_order_relaxed);
}

int64_t WaiterOrder::Capacity(const std::string& tag) const {
  base::MutexLock lock(&mu_);
  auto it = by_tag_.find(tag);
  if (it == by_tag_.end()) return 0;
  int64_t n = 0;
  for (const auto& [set, index] : it->second) n += set->capacity;
  return std::min(n, kServeMax);
}

bool WaiterOrder::Marked(const std::string& tag) const {
  base::MutexLock lock(&mu_);
  auto it = by_tag_.find(tag);
  if (it == by_tag_.end()) return false;
  return std::any_of(it->second.begin(), it->second.end(),
                     [](const auto& e) { return e.first->marked > 0; });
}

void WaiterOrder::Hold(const std::string& tag) {
  base::MutexLock lock(&mu_);
  if (by_tag_.contains(tag)) held_.insert(tag);
}

bool WaiterOrder::TakeHeld(const std::string& tag) {
  base::MutexLock lock(&mu_);
  return held_.erase(tag) > 0;
}

void WaiterOrder::ClearHeld(const std::string& tag) {
  base::MutexLock lock(&mu_);
  held_.erase(tag);
}

void WaiterOrder::ClearHeld(QueueSet* set, const std::vector<size_t>& indices, uint64_t since) {
  base::MutexLock lock(&mu_);
  if (held_.empty()) return;
  // A result begun before the queue's last news says nothing of the jobs that news brought.
  for (size_t i : indices) {
    if (set->news_at[i] <= since) held_.erase(set->tags[i]);
  }
}

WaiterOrder::Oldest WaiterOrder::OldestLocked(const std::string& tag) const {
  Oldest best;
  auto it = by_tag_.find(tag);
  if (it == by_tag_.end()) return best;
  for (const auto& [set, index] : it->second) {
    if (set->waiting.empty()) continue;
    const auto& [seq, who] = *set->waiting.begin();
    if (best.thread < 0 || seq < best.seq) best = {set, seq, index, who.first};
  }
  return best;
}

WaiterOrder::Oldest WaiterOrder::News(const std::string& tag) {
  base::MutexLock lock(&mu_);
  auto it = by_tag_.find(tag);
  if (it == by_tag_.end()) return {};
  for (const auto& [set, index] : it->second) {
    set->news_at[index] = ++set->news;
    set->empty_until[index] = 0;
  }
  return OldestLocked(tag);
}

WaiterOrder::Oldest WaiterOrder::FindOldest(const std::string& tag) const {
  base::MutexLock lock(&mu_);
  return OldestLocked(tag);
}

std::vector<size_t> WaiterOrder::Candidates(QueueSet* set, int64_t now_ms, uint64_t* news,
                                            uint64_t seq) const {
  base::MutexLock lock(&mu_);
  std::vector<size_t> out;
  // Behind an older consumer of the same set: whatever becomes ready there is announced (the
  // markers stand) and offered to that one first, then passed on; reading now would only race
  // it (first come, first served).
  if (seq != 0 && set->marked > 0 && !set->waiting.empty() && set->waiting.begin()->first < seq) {
    *news = set->news;
    return out;
  }
  for (size_t i = 0; i < set->empty_until.size(); ++i) {
    if (set->empty_until[i] <= now_ms) out.push_back(i);
  }
  *news = set->news;
  return out;
}

uint64_t WaiterOrder::NewsCount(QueueSet* set) const {
  base::MutexLock lock(&mu_);
  return set->news;
}

int64_t WaiterOrder::KnownEmptyUntil(int64_t now_ms) {
  // A golden-ratio sequence: consecutive values spread evenly over [0, kKnownEmptyMs).
  spread_ += 0x9E3779B97F4A7C15ULL;
  const auto extra = static_cast<int64_t>((spread_ >> 32) % static_cast<uint64_t>(kKnownEmptyMs));
  return now_ms + kKnownEmptyMs + extra;
}

void WaiterOrder::NoteEmpty(QueueSet* set, const std::vector<size_t>& indices, uint64_t since,
                            int64_t now_ms) {
  base::MutexLock lock(&mu_);
  for (size_t i : indices) {
    if (set->news_at[i] <= since) set->empty_until[i] = KnownEmptyUntil(now_ms);
  }
}

void WaiterOrder::Emptied(const std::string& tag, int64_t now_ms) {
  base::MutexLock lock(&mu_);
  auto it = by_tag_.find(tag);
  if (it == by_tag_.end()) return;
  for (const auto& [set, index] : it->second) {
    if (set->marked > 0) set->empty_until[index] = KnownEmptyUntil(now_ms);
  }
}

void WaiterOrder::NoteMarked(QueueSet* set, int delta) {
  base::MutexLock lock(&mu_);
  set->marked += delta;
}

void WaiterOrder::Forget(const std::vector<std::string>& tags) {
  base::MutexLock lock(&mu_);
  for (const std::string& tag : tags) {
    auto it = by_tag_.find(tag);
    if (it == by_tag_.end()) continue;
    for (const auto& [set, index] : it->second) {
      set->news_at[index] = ++set->news;
      set->empty_until[index] = 0;
    }
  }
}

void WaiterOrder::ForgetAll() {
  base::MutexLock lock(&mu_);
  for (auto& [key, set] : by_key_) {
    ++set->news;
    std::fill(set->news_at.begin(), set->news_at.end(), set->news);
    std::fill(set->empty_until.begin(), set->empty_until.end(), 0);
  }
}

// ---- Waiters: one thread's blocked consumers ----

namespace {

// The interning key of a CONSUME's queues: its namespace and list, each followed by a space
// (names hold none, queue_tag.h ValidName, so the key is unambiguous).
std::string SetKey(const std::string& ns, std::span<const std::string_view> queues) {
  size_t size = ns.size() + 1;
  for (std::string_view q : queues) size += q.size() + 1;
  std::string key;
  key.reserve(size);
  key.append(ns).push_back(' ');
  for (std::string_view q : queues) key.append(q).push_back(' ');
  return key;
}

int64_t MarkerMs(const Loop& loop) {
  const int64_t retain = int64_t{loop.config().retain_seconds} * 1000;
  return std::clamp(retain, kMarkerMinMs, kMarkerMaxMs);
}

}  // namespace

void Waiters::AnnounceReady(const std::string& tag) {
  if (!order_.AnyInterest()) return;
  Offer(order_.News(tag), tag);
}

void Waiters::OnEmptied(const std::string& tag) { order_.Emptied(tag, loop_.now_ms()); }

void Waiters::OnChannelNews(const std::string& tag) {
  if (!order_.AnyInterest()) return;
  order_.ClearHeld(tag);
  AnnounceReady(tag);
}

void Waiters::OfferReady(const std::string& tag) {
  if (!order_.AnyInterest()) return;
  if (!loop_.config().cross_instance_wake) return AnnounceReady(tag);
  // The marker stands (or its call is on the way, and a marker it creates is announced, Mark):
  // the script announced the jobs, and the channel's news offers them here too. A marker lost
  // unannounced (a flush) is found by its renewal and the safety net.
  if (order_.Marked(tag)) return;
  Offer(order_.FindOldest(tag), tag);
}

int64_t Waiters::ServeCapacity(const std::string& tag) const {
  if (!loop_.config().cross_instance_wake || !order_.AnyInterest()) return 0;
  return order_.Capacity(tag);
}

void Waiters::OfferHeld(const std::string& tag) {
  if (!order_.AnyInterest() || !loop_.config().cross_instance_wake) {
    return PublishNews(tag);  // nobody here any more: everyone else hears of them
  }
  order_.Hold(tag);
  AnnounceReady(tag);
}

void Waiters::OfferLeft(const std::string& tag) { Offer(order_.FindOldest(tag), tag); }

void Waiters::PublishNews(const std::string& tag) {
  const std::optional<QueueName> name = QueueName::Parse(tag);
  persist::PoolClient* pool = name ? loop_.PoolFor(name->ns) : nullptr;
  if (pool == nullptr) return;
  const std::string_view args[] = {"PUBLISH", kReadyChannel, tag};
  pool->Command(args, 0, [](const persist::UpstreamResult&) {});
}

void Waiters::Offer(const WaiterOrder::Oldest& o, const std::string& tag) {
  if (o.thread < 0) {
    if (order_.TakeHeld(tag)) PublishNews(tag);
    return;
  }
  if (o.thread != loop_.thread_index()) {
    return loop_.peers().Post(o.thread, [tag](Loop& l) { l.waiters().OnQueueReady(tag); });
  }
  auto ls = local_.find(o.set);
  if (ls == local_.end()) return;
  auto it = ls->second.blocked.find(o.seq);
  if (it == ls->second.blocked.end()) return;
  // First come, first served: the instance's oldest consumer on the queue tries it (only it:
  // its other queues had nothing, and their own news comes on its own), and remembers it
  // (pending) while an attempt is in flight or its binding is due for its re-check. When it is
  // served, the next one is offered what it leaves (PassOn).
  const std::shared_ptr<Waiter> w = it->second;
  w->pending.insert(o.index);
  if (w->state.attempt_in_flight) return;
  if (BindingStale(*w)) return RecheckBinding(w);
  TryPending(w);
}

void Waiters::OnQueueReady(const std::string& tag) {
  // Routed here as the holder of the oldest consumer; the order may have changed on the way.
  Offer(order_.FindOldest(tag), tag);
}

void Waiters::Mark(std::vector<std::string> tags) {
  if (!loop_.config().cross_instance_wake || tags.empty()) return;
  // By pool (a namespace's queues live in its pool), then by slot on a cluster.
  std::map<persist::PoolClient*, std::vector<std::string>> by_pool;
  for (std::string& tag : tags) {
    const std::optional<QueueName> name = QueueName::Parse(tag);
    persist::PoolClient* pool = name ? loop_.PoolFor(name->ns) : nullptr;
    if (pool != nullptr) by_pool[pool].push_back(std::move(tag));
  }
  const std::string life = std::to_string(MarkerMs(loop_));
  for (auto& [pool, list] : by_pool) {
    for (std::vector<std::string>& batch : QstatsBatches(list, pool->cluster(), kMarkBatch)) {
      std::vector<std::string> prefixes;
      for (const std::string& tag : batch) prefixes.push_back(QueueName::Parse(tag)->prefix());
      std::vector<std::string_view> keys(prefixes.begin(), prefixes.end());
      const std::string n = std::to_string(batch.size());
      const std::string_view args[] = {life, n, "1"};
      // A marker this call created had no waiter behind it: a job made ready through another
      // instance just before it existed was announced to nobody. Announced here.
      pool->Eval(persist::Script::kMarks, keys, args, 0,
                 [this, batch = std::move(batch)](const persist::UpstreamResult& r) {
                   const bool ok = r.view().is_array() && r.view().size() == batch.size();
                   Marked(batch, ok);
                   if (!ok) return;
                   for (size_t i = 0; i < batch.size(); ++i) {
                     int64_t created = 0;
                     if (r.view()[i].Int(&created) && created == 1) {
                       AnnounceReady(batch[i]);
                     }
                   }
                 });
    }
  }
}

void Waiters::Marked(const std::vector<std::string>& tags, bool ok) {
  for (const std::string& tag : tags) {
    auto it = tags_.find(tag);
    if (it != tags_.end() && !ok) it->second.marked_until = 0;  // set again at its renewal
  }
  // Without the marker no news of these queues is sure to come: what is known of them goes.
  if (!ok) order_.Forget(tags);
}

void Waiters::Consume(std::shared_ptr<Waiter> w, std::span<const std::string_view> queues,
                      bool block_if_empty) {
  std::string key = SetKey(w->ns, queues);
  auto found = local_by_key_.find(key);
  if (found == local_by_key_.end()) {
    QueueSet* set = order_.Acquire(key, w->ns, queues);
    found = local_by_key_.emplace(std::move(key), set).first;
  }
  w->set = found->second;
  LocalSet& ls = local_[w->set];
  ls.idle_since_ms = 0;
  // A blocking CONSUME is registered before its first attempt: a queue announced while that
  // attempt is on its way is remembered (pending) and tried once it found nothing.
  if (block_if_empty) Block(w);
  // A blocking CONSUME reads only the queues not known to be empty (none: no call at all; news
  // of them wakes it). One that does not block answers what is there now: it reads them all.
  uint64_t since = 0;
  std::vector<size_t> order =
      order_.Candidates(w->set, loop_.now_ms(), &since, block_if_empty ? w->seq : 0);
  if (!block_if_empty) {
    order.resize(w->set->queues.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  } else if (order.empty()) {
    return;
  }
  Attempt(w, std::move(order), since);
}

void Waiters::Block(std::shared_ptr<Waiter> w) {
  w->state.blocked = true;
  w->seq = order_.NextSeq();
  LocalSet& ls = Local(w);
  ls.blocked.emplace(w->seq, w);
  order_.Add(w->set, w->seq, loop_.thread_index(), std::max(1, w->count));
  if (w->deadline_ms > 0) deadlines_.emplace(std::make_pair(w->deadline_ms, w->seq), w);
  if (!w->auth.token_digest.empty()) {
    rechecks_.emplace(std::make_pair(w->auth.valid_until_ms, w->seq), w);
  }
  by_client_.emplace(w->ticket.client_id, w);
  ++blocked_count_;
  if (ls.marked) return;
  // The set's first consumer to block on this thread: its queues get (or keep) their markers,
  // renewed while the set is in use here.
  ls.marked = true;
  order_.NoteMarked(w->set, +1);
  const int64_t now = loop_.now_ms();
  std::vector<std::string> unmarked;
  for (const std::string& tag : w->set->tags) {
    TagState& t = tags_[tag];
    ++t.refs;
    if (t.marked_until <= now) {
      t.marked_until = now + MarkerMs(loop_) * 2 / 5;
      unmarked.push_back(tag);
    }
  }
  Mark(std::move(unmarked));
}

void Waiters::Unregister(const std::shared_ptr<Waiter>& w) {
  if (!w->state.blocked) return;
  w->state.blocked = false;
  --blocked_count_;
  LocalSet& ls = Local(w);
  ls.blocked.erase(w->seq);
  order_.Remove(w->set, w->seq);
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
  MaybeIdle(w->set, ls);
}

void Waiters::MaybeIdle(QueueSet* set, LocalSet& ls) {
  if (!ls.blocked.empty() || ls.attempts > 0 || ls.idle_since_ms != 0) return;
  ls.idle_since_ms = loop_.now_ms();
  idle_.emplace_back(ls.idle_since_ms, set);
}

void Waiters::DropIdleSets(int64_t now_ms) {
  std::vector<std::string> unreferenced;
  while (!idle_.empty() && idle_.front().first + kSetGraceMs <= now_ms) {
    const auto [since, set] = idle_.front();
    idle_.pop_front();
    auto it = local_.find(set);
    if (it == local_.end() || it->second.idle_since_ms != since) continue;  // used again since
    if (it->second.marked) {
      order_.NoteMarked(set, -1);
      for (const std::string& tag : set->tags) {
        auto t = tags_.find(tag);
        if (t != tags_.end() && --t->second.refs == 0) unreferenced.push_back(tag);
      }
    }
    local_.erase(it);
    local_by_key_.erase(set->key);
    order_.Release(set);
  }
  // This thread no longer renews these markers: what is known of the queues is not sure to
  // stay true, so it goes (an entry is dropped once its marker needs renewal; RenewMarkers).
  if (!unreferenced.empty()) order_.Forget(unreferenced);
}

void Waiters::TryPending(const std::shared_ptr<Waiter>& w) {
  if (w->pending.empty() || w->state.attempt_in_flight || w->state.done) return;
  std::vector<size_t> order(w->pending.begin(), w->pending.end());
  w->pending.clear();
  Attempt(w, std::move(order), order_.NewsCount(w->set), /*announced=*/true);
}

void Waiters::NoteEmpty(const std::shared_ptr<Waiter>& w, const std::vector<size_t>& empty,
                        uint64_t since) {
  // Trusted only for queues whose marker this thread keeps (set, or its call on the way): their
  // next ready job is announced to every instance. A marker the call finds missing and creates
  // was not there when this consume ran: the call announces the queue (Mark), which undoes this;
  // a call that fails forgets it (Marked).
  order_.ClearHeld(w->set, empty, since);
  std::vector<size_t> known;
  const int64_t now = loop_.now_ms();
  for (size_t i : empty) {
    auto t = tags_.find(w->set->tags[i]);
    if (t != tags_.end() && t->second.refs > 0 && t->second.marked_until > now) {
      known.push_back(i);
    }
  }
  if (!known.empty()) order_.NoteEmpty(w->set, known, since, now);
}

bool Waiters::BindingStale(const Waiter& w) const {
  return !w.auth.token_digest.empty() && loop_.now_ms() >= w.auth.valid_until_ms;
}

void Waiters::RecheckBinding(const std::shared_ptr<Waiter>& w) {
  if (w->auth.check_in_flight || w->state.done) return;
  NamespaceDirectory& dir = loop_.namespaces();
  if (const NamespaceEntry* e = dir.Fresh(w->ns, loop_.now_ms())) return ApplyBinding(w, *e);
  w->auth.check_in_flight = true;
  // `this` outlives the lookup: the directory drops answers once it is gone, and the Worker
  // destroys it after the Waiters.
  dir.Refresh(w->ns, loop_.now_ms(), [this, w](std::string_view error) {
    w->auth.check_in_flight = false;
    if (w->state.done) return;
    // A failed lookup proves nothing: the waiter keeps waiting, takes no job, and the next
    // tick asks again.
    if (!error.empty()) return;
    if (const NamespaceEntry* e = loop_.namespaces().Known(w->ns)) ApplyBinding(w, *e);
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
  const int64_t until = std::max(e.fetched_ms + loop_.namespaces().cache_ms(), loop_.now_ms() + 1);
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
  Loop* loop;
  std::shared_ptr<Waiter> waiter;
  std::vector<size_t> order;
  size_t want;
  size_t next = 0;  // position in order
  int retries = 0;  // calls again on the same single queue (see kConsumeRetries)
  std::vector<JobEntry> jobs;
  std::vector<std::string> still_ready;  // tags whose ready gauge stayed above 0
  std::vector<size_t> found_empty;       // queues (indices) found with nothing ready
  std::string error;
  std::function<void(ConsumeRun&)> done;

  const std::string& Prefix(size_t pos) const { return waiter->set->prefixes[order[pos]]; }

  void Fail(std::string e) {
    error = std::move(e);
    done(*this);
  }

  void Step() {
    if (next >= order.size() || jobs.size() >= want) return done(*this);
    persist::PoolClient* pool = loop->PoolFor(waiter->ns);
    // The run: order[next, end), every queue of one slot on a cluster.
    size_t end = next + 1;
    const int slot = pool->cluster() ? persist::KeySlot(Prefix(next)) : -1;
    while (end < order.size() && end - next < kConsumesMax &&
           (slot < 0 || persist::KeySlot(Prefix(end)) == slot)) {
      ++end;
    }
    const std::string now = std::to_string(loop->wall_ms());
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
    if (std::string e = persist::FailureOf(r); !e.empty()) return Fail(std::move(e));
    const std::string& queue = waiter->set->queues[index];
    const size_t before = jobs.size();
    int64_t ready_left = 0;
    if (!r.view().is_array() || r.view().size() < 1 || !r.view()[0].Int(&ready_left) ||
        !DecodeJobs(r.view(), 1, waiter->ns, queue, &jobs)) {
      return Fail("ERR unexpected reply from the consume script");
    }
    if (jobs.size() > before) NoteQueueActivity(loop->flags(), waiter->set->tags[index]);
    // Fewer jobs than asked while some are ready: the call stopped at its bound on stale list
    // entries. Ask the same queue again, so a non-blocking CONSUME is never short.
    if (jobs.size() < want && ready_left > 0 && retries < kConsumeRetries) {
      ++retries;
      --next;
    } else if (ready_left > 0) {
      still_ready.push_back(waiter->set->tags[index]);
    } else if (ready_left == 0) {
      found_empty.push_back(index);
    }
    Step();
  }

  // consumes.lua answered {ready_left_1..n, i1, K1, payload1, ..., i2, ...} for `indices`.
  void OnConsumes(const std::vector<size_t>& indices, const persist::UpstreamResult& r) {
    if (std::string e = persist::FailureOf(r); !e.empty()) return Fail(std::move(e));
    persist::ReplyView rep = r.view();
    const size_t n = indices.size();
    constexpr size_t kFields = 1 + kJobFields;  // the queue's index, then consume's six
    if (!rep.is_array() || rep.size() < n || (rep.size() - n) % kFields) {
      return Fail("ERR unexpected reply from the consume script");
    }
    for (size_t i = 0; i < n; ++i) {
      int64_t left = 0;
      if (!rep[i].Int(&left)) continue;
      if (left > 0) {
        still_ready.push_back(waiter->set->tags[indices[i]]);
      } else if (left == 0) {
        found_empty.push_back(indices[i]);
      }
    }
    for (size_t at = n; at < rep.size(); at += kFields) {
      int64_t i = 0;
      if (!rep[at].Int(&i) || i < 1 || static_cast<size_t>(i) > n) {
        return Fail("ERR unexpected reply from the consume script");
      }
      const size_t index = indices[static_cast<size_t>(i) - 1];
      if (!DecodeJobSpan(rep, at + 1, waiter->ns, waiter->set->queues[index], &jobs)) {
        return Fail("ERR unexpected reply from the consume script");
      }
      NoteQueueActivity(loop->flags(), waiter->set->tags[index]);
    }
    Step();
  }
};

}  // namespace

void Waiters::Attempt(const std::shared_ptr<Waiter>& w, std::vector<size_t> order, uint64_t since,
                      bool announced) {
  auto run = std::make_shared<ConsumeRun>();
  run->loop = &loop_;
  run->waiter = w;
  run->order = std::move(order);
  run->want = w->count == 0 ? 1 : static_cast<size_t>(w->count);
  w->state.attempt_in_flight = true;
  ++Local(w).attempts;
  run->done = [this, since, announced](ConsumeRun& r) {
    if (announced) {
      for (size_t pos = r.next; pos < r.order.size(); ++pos) {
        r.still_ready.push_back(r.waiter->set->tags[r.order[pos]]);
      }
    }
    AttemptDone(r.waiter, r.jobs, r.error, r.found_empty, r.still_ready, since);
  };
  run->Step();
}

void Waiters::AttemptDone(const std::shared_ptr<Waiter>& w, std::vector<JobEntry>& jobs,
                          const std::string& error, const std::vector<size_t>& found_empty,
                          const std::vector<std::string>& still_ready, uint64_t since) {
  w->state.attempt_in_flight = false;
  LocalSet& ls = Local(w);
  --ls.attempts;
  if (error.empty()) NoteEmpty(w, found_empty, since);
  MaybeIdle(w->set, ls);
  if (w->state.done) {
    // The client left while the attempt was in flight: give its jobs back untouched.
    Release(jobs);
    return;
  }
  if (jobs.empty() && error.empty()) {
    if (!w->state.blocked) return Reply(w, jobs, {}, {});  // CONSUME without TIMEOUT: null
    // Its deadline passed while the attempt was in flight: the null reply is due now.
    if (w->deadline_ms > 0 && loop_.now_ms() >= w->deadline_ms) return Reply(w, jobs, {}, {});
    // Still blocked: what was announced meanwhile is tried now; else the next news does.
    if (BindingStale(*w)) return RecheckBinding(w);
    return TryPending(w);
  }
  Reply(w, jobs, error, still_ready);
}

std::optional<Waiters::PumpLease> Waiters::ReserveForPump(const std::string& tag) {
  if (!loop_.config().cross_instance_wake || !order_.AnyInterest()) return std::nullopt;
  // First come, first served: only the instance's oldest consumer on the queue, and only when
  // it is this thread's (another thread's is offered the jobs as before).
  const WaiterOrder::Oldest o = order_.FindOldest(tag);
  if (o.thread != loop_.thread_index()) return std::nullopt;
  auto ls = local_.find(o.set);
  if (ls == local_.end()) return std::nullopt;
  auto it = ls->second.blocked.find(o.seq);
  if (it == ls->second.blocked.end()) return std::nullopt;
  const std::shared_ptr<Waiter>& w = it->second;
  if (w->state.attempt_in_flight || w->state.done || BindingStale(*w)) return std::nullopt;
  // As an attempt in flight: news meanwhile is remembered (pending), tried once it answers.
  w->state.attempt_in_flight = true;
  ++ls->second.attempts;
  return PumpLease{w, o.index, order_.NewsCount(w->set)};
}

void Waiters::PumpAnswered(const PumpLease& lease, std::vector<JobEntry>& jobs,
                           int64_t ready_left) {
  const std::shared_ptr<Waiter>& w = lease.waiter;
  if (!jobs.empty()) NoteQueueActivity(loop_.flags(), w->set->tags[lease.index]);
  std::vector<size_t> empty;
  if (ready_left == 0) empty.push_back(lease.index);
  // Jobs left ready are offered by the pump's answer itself (OfferHeld, OfferReady).
  AttemptDone(w, jobs, {}, empty, {}, lease.since);
}

void Waiters::Reply(const std::shared_ptr<Waiter>& w, std::vector<JobEntry>& jobs,
                    const std::string& error, const std::vector<std::string>& still_ready) {
  w->state.done = true;
  Unregister(w);
  ClientPort& port = w->port != nullptr ? *w->port : loop_.port();
  proto::ReplyWriter* out = port.Begin(w->ticket);
  if (out == nullptr) {
    Release(jobs);
    PassOn(w, still_ready);
    return;
  }
  if (!error.empty() && jobs.empty()) {
    out->Error(error);
  } else {
    WriteConsumeReply(*out, jobs, w->count != 0, loop_.wall_ms());
  }
  port.Finish(w->ticket);
  if (w->on_reply) w->on_reply(jobs.size());
  PassOn(w, still_ready);
}

void Waiters::PassOn(const std::shared_ptr<Waiter>& w, const std::vector<std::string>& ready) {
  // What this consumer leaves: the queues its last call found still holding ready jobs, and
  // those announced to it that it did not get to try; offered to the next oldest consumers.
  // Not its other queues: they had nothing when it blocked, and their news comes on its own.
  for (const std::string& tag : ready) OfferLeft(tag);
  for (size_t i : w->pending) OfferLeft(w->set->tags[i]);
  w->pending.clear();
}

void Waiters::Release(const std::vector<JobEntry>& jobs) {
  // Leases taken for a client that is gone: undo them so the jobs are ready again at once, with
  // the delivery not counted.
  for (const JobEntry& j : jobs) {
    persist::PoolClient* pool = loop_.PoolFor(j.ns);
    const std::string prefix = QueueName{j.ns, j.queue}.prefix();
    const std::string now = std::to_string(loop_.wall_ms());
    const std::string_view keys[] = {prefix};
    const std::string_view args[] = {now, j.key, "", "undo"};
    // Ready again: offered to the next consumer waiting on the queue.
    pool->Eval(persist::Script::kNack, keys, args, 0,
               [this, tag = QueueName{j.ns, j.queue}.tag()](const persist::UpstreamResult& r) {
                 int64_t n = 0;
                 if (r.view().Int(&n) && n > 0) OfferReady(tag);
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
  const int64_t now_ms = loop_.now_ms();
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
  DropIdleSets(now_ms);
  const uint64_t epoch = loop_.flags().subscribed_epoch();
  if (epoch != subscribed_seen_ && !safety_in_flight_) {
    subscribed_seen_ = epoch;
    // News may have been lost while the channel was down, and the pool may have lost the
    // markers too (a failover to a replica behind, a flush): what is known goes, every blocked
    // queue is read, and the markers are set again now rather than at their renewal.
    order_.ForgetAll();
    for (auto& [tag, t] : tags_) t.marked_until = 0;
    next_marker_ms_ = 0;
    SafetyPoll(/*all=*/true);
  } else if (sweep_wanted_ && !safety_in_flight_) {
    sweep_wanted_ = false;
    SafetyPoll(/*all=*/true);
  } else if (now_ms >= next_safety_ms_) {
    next_safety_ms_ = now_ms + kSafetyPollMs;
    SafetyPoll(/*all=*/false);
  }
  if (now_ms >= next_marker_ms_) {
    next_marker_ms_ = now_ms + MarkerMs(loop_) / 25;
    RenewMarkers(now_ms);
  }
}

void Waiters::RenewMarkers(int64_t now_ms) {
  std::vector<std::string> due;
  for (auto it = tags_.begin(); it != tags_.end();) {
    TagState& t = it->second;
    if (t.marked_until > now_ms) {
      ++it;
    } else if (t.refs == 0) {
      it = tags_.erase(it);  // nobody here waits on it any more: forgotten
    } else {
      t.marked_until = now_ms + MarkerMs(loop_) * 2 / 5;
      due.push_back(it->first);
      ++it;
    }
  }
  Mark(std::move(due));
}

void Waiters::SafetyPoll(bool all) {
  if (tags_.empty() || safety_in_flight_) return;
  // The next kSafetyBatch blocked queues after the last one read (round robin, in tag order), or
  // all of them.
  std::vector<std::string> tags;
  auto it = tags_.upper_bound(safety_cursor_);
  const size_t most = all ? tags_.size() : kSafetyBatch;
  for (size_t wrapped = 0; tags.size() < most && wrapped < 2;) {
    if (it == tags_.end()) {
      ++wrapped;
      it = tags_.begin();
      continue;
    }
    if (!tags.empty() && it->first == tags.front()) break;  // all of them taken
    if (it->second.refs > 0) tags.push_back(it->first);
    ++it;
  }
  if (tags.empty()) return;
  safety_cursor_ = tags.back();
  std::map<persist::PoolClient*, std::vector<std::string>> by_pool;
  for (std::string& tag : tags) {
    const std::optional<QueueName> name = QueueName::Parse(tag);
    if (persist::PoolClient* pool = name ? loop_.PoolFor(name->ns) : nullptr) {
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
  const std::string now = std::to_string(loop_.wall_ms());
  for (auto& [pool, batch] : calls) {
    std::vector<std::string> prefixes;
    for (const std::string& tag : batch) prefixes.push_back(QueueName::Parse(tag)->prefix());
    std::vector<std::string_view> keys(prefixes.begin(), prefixes.end());
    const std::string n = std::to_string(batch.size());
    const std::string_view args[] = {n, now};
    pool->Eval(
        persist::Script::kQstats, keys, args, 0,
        [this, left, batch = std::move(batch)](const persist::UpstreamResult& r) {
          if (--*left == 0) safety_in_flight_ = false;
          if (!r.view().is_array() || r.view().size() != batch.size() * QueueFigures::kFields) {
            return;
          }
          for (size_t i = 0; i < batch.size(); ++i) {
            int64_t ready = 0;
            if (r.view()[i * QueueFigures::kFields].Int(&ready) && ready > 0) {
              AnnounceReady(batch[i]);
            }
          }
        });
  }
}

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
