#include "queue/stats/queue_stats.h"

#include <algorithm>
#include <atomic>
#include <iterator>
#include <optional>
#include <set>
#include <string_view>
#include <unordered_set>
#include <utility>

#include "persist/cluster_slots.h"
#include "queue/context/loop.h"
#include "queue/model/instance_flags.h"
#include "queue/model/job_codec.h"
#include "queue/model/queue_name.h"
#include "queue/stats/lateness.h"

namespace deferq::queue {

namespace {

constexpr size_t kScanPage = 1000;  // SSCAN COUNT of one registry page

}  // namespace

void QueueStatsBook::Store(std::shared_ptr<const QueueStatsSnapshot> snapshot) {
  base::MutexLock lock(&mu_);
  snapshot_ = std::move(snapshot);
}

std::shared_ptr<const QueueStatsSnapshot> QueueStatsBook::Load() const {
  base::MutexLock lock(&mu_);
  return snapshot_;
}

void QueueStatsBook::NoteActive(const std::string& tag) {
  struct Local {
    const QueueStatsBook* book = nullptr;
    uint64_t epoch = 0;
    std::unordered_set<std::string> seen;
  };
  thread_local Local local;
  const uint64_t epoch = epoch_.load(std::memory_order_relaxed);
  if (local.book != this || local.epoch != epoch) {
    local.book = this;
    local.epoch = epoch;
    local.seen.clear();
  }
  if (local.seen.size() >= cap_) {
    if (local.seen.count(tag) == 0) notes_dropped_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (!local.seen.insert(tag).second) return;
  base::MutexLock lock(&mu_);
  if (active_.size() < cap_) {
    active_.push_back(tag);
  } else {
    notes_dropped_.fetch_add(1, std::memory_order_relaxed);
  }
}

std::vector<std::string> QueueStatsBook::TakeActive() {
  std::vector<std::string> out;
  {
    base::MutexLock lock(&mu_);
    out.swap(active_);
  }
  epoch_.fetch_add(1, std::memory_order_relaxed);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

void NoteQueueActivity(InstanceFlags& flags, const std::string& tag) {
  if (QueueStatsBook* book = flags.book()) book->NoteActive(tag);
}

// One read of every pool: the active-queue index (and, on a pool's full read, its registry),
// then the figures of those queues, 100 per qstats call (of one slot on a cluster). `pending`
// counts the calls still out. A failed call spoils that pool's read only: the other pools' figures
// are stored as usual.
struct QueueStatsPoller::Round {
  std::weak_ptr<bool> alive;
  int64_t started_wall_ms = 0;
  std::vector<char> full;              // per pool: this is its full read
  std::vector<char> failed;            // per pool: a call of its read failed
  std::map<std::string, size_t> tags;  // tag -> pool index: the queues to read this round
  std::vector<uint64_t> scanned;       // per pool: registry entries its scan has seen
  uint64_t left_out = 0;               // queues over the cap (an upper bound)
  size_t pending = 0;
  // The qstats calls of the read, (pool, queues) each, sent one after the other (ReadNext).
  std::vector<std::pair<size_t, std::vector<std::string>>> batches;
  size_t next_batch = 0;
  std::map<std::string, QueueFigures> read;
  std::set<std::string> quiet;  // read only to see whether their lateness histogram can go
};

QueueStatsPoller::QueueStatsPoller(Loop& loop, QueueStatsBook& book, size_t cap,
                                   LatenessStats* lateness)
    : loop_(loop),
      book_(book),
      cap_(cap),
      lateness_(lateness),
      retain_ms_(int64_t{loop.config().retain_seconds} * 1000),
      active_ms_(retain_ms_ + kActiveMarginMs),
      alive_(std::make_shared<bool>(true)) {
  loop_.flags().SetBook(&book);
}

QueueStatsPoller::~QueueStatsPoller() {
  if (loop_.flags().book() == &book_) loop_.flags().SetBook(nullptr);
}

void QueueStatsPoller::Tick() {
  if (in_flight_ || loop_.now_ms() < next_poll_ms_ || loop_.pools().empty()) return;
  next_poll_ms_ = loop_.now_ms() + kPollMs;
  in_flight_ = true;
  const size_t pools = loop_.pools().size();
  next_full_ms_.resize(pools, 0);
  last_ok_wall_ms_.resize(pools, 0);
  auto round = std::make_shared<Round>();
  round->alive = alive_;
  round->started_wall_ms = loop_.wall_ms();
  // A full read (at start, then every kFullReadMs, and again after one that failed) reads every
  // queue in the pool's registry and index; the others only the queues some instance worked on
  // since the last read: an idle pool costs three commands per read, however many queues it
  // stores.
  round->full.resize(pools);
  for (size_t p = 0; p < pools; ++p) round->full[p] = loop_.now_ms() >= next_full_ms_[p];
  round->failed.assign(pools, 0);
  // The queues this instance worked on go to the index of their namespace's pool.
  const std::vector<std::string> active = book_.TakeActive();
  std::vector<std::vector<std::string>> noted(pools);
  for (const std::string& tag : active) {
    if (const std::optional<size_t> p = PoolIndexOf(tag)) noted[*p].push_back(tag);
  }
  // Finished queues whose retention has passed are read again, every round until their counters
  // are gone: then they leave the figures (and /metrics, INFO) too. After a round that left
  // activity unread (its active read reached the cap, or notes were refused over their bound),
  // every other queue kept is read again within kRefreshMs, since its last activity may be what
  // was left out; otherwise a queue nobody worked on is not read: idle queues cost nothing.
  const int64_t start = round->started_wall_ms;
  const bool refresh = start < refresh_until_wall_ms_;
  // A walk of every queue kept only when one may need reading (100,000 of them every 2 s were
  // most of an idle deferq's CPU).
  if (refresh || finished_ > 0) {
    for (const auto& [tag, k] : known_) {
      if (k.pool >= pools) continue;
      if (k.finished_wall_ms != 0 ? start - k.finished_wall_ms >= retain_ms_
                                  : refresh && start - k.read_wall_ms >= kRefreshMs) {
        round->tags.emplace(tag, k.pool);
      }
    }
  }
  // So are the queues that only have a lateness histogram here, once it has been quiet for the
  // retention (then again every retention): a finished one loses its histogram.
  if (lateness_ != nullptr) {
    const int64_t now = loop_.now_ms();
    std::map<std::string, int64_t> checked;
    for (std::string& tag : lateness_->QuietSince(now - retain_ms_)) {
      if (known_.count(tag) != 0) continue;
      const auto it = quiet_checked_.find(tag);
      const int64_t last = it == quiet_checked_.end() ? INT64_MIN / 2 : it->second;
      if (now - last < std::max(retain_ms_, 5 * kPollMs)) {
        checked.emplace(std::move(tag), last);
        continue;
      }
      if (const std::optional<size_t> p = PoolIndexOf(tag)) {
        round->tags.emplace(tag, *p);
        round->quiet.insert(tag);
        checked.emplace(std::move(tag), now);
      }
    }
    quiet_checked_.swap(checked);  // forgets the queues that left the histograms
  }
  round->pending = pools;
  round->scanned.assign(pools, 0);
  for (size_t p = 0; p < pools; ++p) ReadActive(round, p, noted[p]);
}

std::optional<size_t> QueueStatsPoller::PoolIndexOf(const std::string& tag) {
  const std::optional<QueueName> name = QueueName::Parse(tag);
  if (!name) return std::nullopt;
  const persist::PoolClient* pool = loop_.PoolFor(name->ns);
  for (size_t p = 0; p < loop_.pools().size(); ++p) {
    if (loop_.pools()[p].get() == pool) return p;
  }
  return std::nullopt;
}

void QueueStatsPoller::ReadActive(const std::shared_ptr<Round>& round, size_t pool,
                                  const std::vector<std::string>& noted) {
  persist::PoolClient& client = *loop_.pools()[pool];
  const int64_t now = loop_.wall_ms();
  const std::string now_text = std::to_string(now);
  // One connection, so the three commands apply in order: add, trim, read.
  if (!noted.empty()) {
    std::vector<std::string_view> add = {"ZADD", kActiveQueuesKey};
    for (const std::string& tag : noted) {
      add.push_back(now_text);
      add.push_back(tag);
    }
    client.Command(add, 0, [](const persist::UpstreamResult&) {});
  }
  const std::string oldest = std::to_string(now - active_ms_);
  const std::string before_oldest = "(" + oldest;
  const std::string_view trim[] = {"ZREMRANGEBYSCORE", kActiveQueuesKey, "-inf", before_oldest};
  client.Command(trim, 0, [](const persist::UpstreamResult&) {});
  // Since the pool's last good read, with a margin for the other instances' read phases and
  // clocks: a queue is read on two or three rounds after its last activity, then no more.
  const std::string since =
      round->full[pool] ? oldest : std::to_string(last_ok_wall_ms_[pool] - kPollMs - kSlackMs);
  const std::string cap = std::to_string(cap_);
  const std::string_view read[] = {
      "ZREVRANGEBYSCORE", kActiveQueuesKey, "+inf", since, "LIMIT", "0", cap};
  client.Command(read, 0, [this, round, pool, since](const persist::UpstreamResult& r) {
    if (round->alive.expired()) return;
    if (!r.view().is_array()) {
      round->failed[pool] = 1;
      return ScanDone(round, pool);
    }
    // Most recently active first, so the cap keeps the busiest queues.
    for (size_t i = 0; i < r.view().size(); ++i) {
      persist::ReplyView e = r.view()[i];
      if (!e.is_string()) continue;
      std::string tag(e.str());
      if (round->tags.size() < cap_) {
        round->tags.emplace(std::move(tag), pool);
      } else if (round->tags.count(tag) == 0) {
        ++round->left_out;
      }
    }
    auto next = [this, round, pool] {
      if (!round->full[pool]) return ScanDone(round, pool);
      Scan(round, pool, "0");
    };
    if (r.view().size() < cap_) return next();
    // The cap was reached: the queues active since then beyond it are left out.
    const std::string_view count[] = {"ZCOUNT", kActiveQueuesKey, since, "+inf"};
    loop_.pools()[pool]->Command(count, 0,
                                 [round, next, cap = cap_](const persist::UpstreamResult& c) {
                                   if (round->alive.expired()) return;
                                   int64_t n = 0;
                                   if (c.view().Int(&n) && static_cast<uint64_t>(n) > cap) {
                                     round->left_out += static_cast<uint64_t>(n) - cap;
                                   }
                                   next();
                                 });
  });
}

void QueueStatsPoller::Scan(const std::shared_ptr<Round>& round, size_t pool, std::string cursor) {
  loop_.pools()[pool]->ScanRegistry(
      cursor, kScanPage, [this, round, pool](persist::RegistryRead& r) {
        if (round->alive.expired()) return;
        if (!r.error.empty()) {
          round->failed[pool] = 1;
          return ScanDone(round, pool);
        }
        for (std::string& tag : r.tags) {
          ++round->scanned[pool];
          if (round->tags.count(tag) != 0) continue;
          if (round->tags.size() < cap_) {
            round->tags.emplace(std::move(tag), pool);
          } else {
            ++round->left_out;
          }
        }
        std::string next = std::move(r.cursor);
        // The scan ends at the end of the registry, or once the cap is reached: what it has not
        // seen is counted from SCARD.
        if (next != "0" && round->tags.size() < cap_) return Scan(round, pool, std::move(next));
        if (next == "0") return ScanDone(round, pool);
        const std::string_view card[] = {"SCARD", persist::kRegistryKey};
        loop_.pools()[pool]->Command(
            card, 0, [this, round, pool](const persist::UpstreamResult& c) {
              if (round->alive.expired()) return;
              int64_t n = 0;
              // What the scan did not reach (an upper bound: some may be among the active ones).
              if (c.view().Int(&n) && static_cast<uint64_t>(n) > round->scanned[pool]) {
                round->left_out += static_cast<uint64_t>(n) - round->scanned[pool];
              }
              ScanDone(round, pool);
            });
      });
}

void QueueStatsPoller::ScanDone(const std::shared_ptr<Round>& round, size_t) {
  if (--round->pending > 0) return;
  ReadQueues(round);
}

std::vector<std::vector<std::string>> QstatsBatches(const std::vector<std::string>& tags,
                                                    bool by_slot, size_t batch) {
  std::map<int, std::vector<std::string>> groups;  // slot -> its queues (one group: slot 0)
  for (const std::string& tag : tags) {
    groups[by_slot ? persist::KeySlot(QueueName::Parse(tag)->prefix()) : 0].push_back(tag);
  }
  std::vector<std::vector<std::string>> out;
  for (auto& [slot, group] : groups) {
    for (size_t i = 0; i < group.size(); i += batch) {
      const size_t end = std::min(group.size(), i + batch);
      out.emplace_back(std::make_move_iterator(group.begin() + static_cast<long>(i)),
                       std::make_move_iterator(group.begin() + static_cast<long>(end)));
    }
  }
  return out;
}

void QueueStatsPoller::ReadQueues(const std::shared_ptr<Round>& round) {
  // Per pool whose index (and registry) read went through, batches of kBatch queues (of one
  // slot on a cluster): one qstats call each.
  std::vector<std::vector<std::string>> by_pool(loop_.pools().size());
  for (const auto& [tag, pool] : round->tags) {
    if (!round->failed[pool] && QueueName::Parse(tag)) by_pool[pool].push_back(tag);
  }
  for (size_t p = 0; p < by_pool.size(); ++p) {
    for (auto& batch : QstatsBatches(by_pool[p], loop_.pools()[p]->cluster(), kBatch)) {
      round->batches.emplace_back(p, std::move(batch));
    }
  }
  ReadNext(round);
}

void QueueStatsPoller::ReadNext(const std::shared_ptr<Round>& round) {
  // One call at a time: Redis runs a connection's pipelined calls back to back, so 1,000 queues
  // sent at once would hold every other client ~10 ms; one by one, others run in between.
  if (round->next_batch >= round->batches.size()) return Finish(round);
  auto& [pool, tags] = round->batches[round->next_batch++];
  std::vector<std::string> prefixes;
  prefixes.reserve(tags.size());
  for (const std::string& tag : tags) prefixes.push_back(QueueName::Parse(tag)->prefix());
  std::vector<std::string_view> keys(prefixes.begin(), prefixes.end());
  const std::string n = std::to_string(tags.size());
  // Without now_ms: the figures as the scripts keep them (an HMGET, a ZCARD and an EXISTS per
  // queue), not also whether a consumer waits (EXISTS) and how many staged jobs are due but not
  // yet moved (ZCOUNT), which the lazy pump moves within 100 ms (pump.cc kLazyMoveMs): well
  // inside the figures' own 2 s.
  const std::string_view argv[] = {n};
  loop_.pools()[pool]->Eval(
      persist::Script::kQstats, keys, argv, 0,
      [this, round, pool = pool, &tags = tags](const persist::UpstreamResult& r) {
        if (round->alive.expired()) return;
        if (r.view().is_array() && r.view().size() == tags.size() * QueueFigures::kFields) {
          for (size_t q = 0; q < tags.size(); ++q) {
            QueueFigures f;
            for (size_t k = 0; k < QueueFigures::kFields; ++k) {
              r.view()[q * QueueFigures::kFields + k].Int(&f.v[k]);
            }
            round->read[tags[q]] = f;
          }
        } else {
          round->failed[pool] = 1;
        }
        ReadNext(round);
      });
}

std::map<std::string, QueueStatsPoller::Known>::iterator QueueStatsPoller::EraseKnown(
    std::map<std::string, Known>::iterator it) {
  Count(it->second, -1);
  changes_[it->first] = std::nullopt;
  return known_.erase(it);
}

void QueueStatsPoller::SetKnown(std::map<std::string, Known>::iterator it, const Known& k) {
  // A new entry (try_emplace) has the figures of no queue: a change either way.
  const bool fresh = it->second.read_wall_ms == 0;
  if (fresh || !(it->second.figures == k.figures)) changes_[it->first] = k.figures;
  if (!fresh) Count(it->second, -1);
  it->second = k;
  Count(k, 1);
}

void QueueStatsPoller::Count(const Known& k, int sign) {
  if (per_pool_.size() <= k.pool) per_pool_.resize(k.pool + 1, 0);
  per_pool_[k.pool] += static_cast<size_t>(sign);
  if (k.finished_wall_ms != 0) finished_ += static_cast<size_t>(sign);
}

void QueueStatsPoller::Forget(const std::string& tag) {
  if (lateness_ != nullptr) lateness_->Forget(tag);
}

void QueueStatsPoller::Finish(const std::shared_ptr<Round>& round) {
  in_flight_ = false;
  const int64_t start = round->started_wall_ms;
  bool any_ok = false;
  for (size_t p = 0; p < round->failed.size(); ++p) {
    if (round->failed[p]) continue;  // a failed full read is tried again next round
    any_ok = true;
    last_ok_wall_ms_[p] = start;
    if (!round->full[p]) continue;
    next_full_ms_[p] = loop_.now_ms() + kFullReadMs;
    // A full read replaces everything known of the pool: queues gone from its registry and
    // index are forgotten.
    for (auto it = known_.begin(); it != known_.end();) {
      const bool gone = it->second.pool == p && round->read.count(it->first) == 0;
      if (gone) Forget(it->first);
      it = gone ? EraseKnown(it) : std::next(it);
    }
  }
  const uint64_t unread = round->left_out + book_.TakeNotesDropped();
  dropped_total_ += unread;
  // Activity left unread: every queue read before this round is read again (see Tick).
  if (unread > 0) refresh_until_wall_ms_ = start + kRefreshMs + kPollMs;
  if (!any_ok) return;  // the previous figures stay, and age
  // What was read replaces what was known; purged queues (nothing left, counters included) are
  // forgotten. A pool whose reads failed for more than one round leaves the snapshot.
  std::vector<std::string> fresh;
  for (auto& [tag, f] : round->read) {
    const size_t pool = round->tags.at(tag);
    auto it = known_.find(tag);
    if (f.empty()) {
      Forget(tag);
      if (it != known_.end()) EraseKnown(it);
    } else if (it == known_.end() && round->quiet.count(tag) != 0) {
      continue;  // still there: its histogram stays, and the figures' cap is left as it was
    } else if (it != known_.end()) {
      // Finished since the first read that found it so, with the same figures: a job that came
      // and went meanwhile started a new retention window.
      int64_t finished = 0;
      if (f.finished()) {
        const bool same = it->second.finished_wall_ms != 0 && it->second.figures == f;
        finished = same ? it->second.finished_wall_ms : start;
      }
      SetKnown(it, Known{f, start, finished, pool});
    } else {
      fresh.push_back(tag);
    }
  }
  // Only a pool that missed reads has queues to drop (a walk of every queue otherwise).
  bool any_stale = false;
  for (size_t p = 0; p < per_pool_.size(); ++p) {
    any_stale = any_stale || (per_pool_[p] > 0 && start - last_ok_wall_ms_[p] > kKeepFailedMs);
  }
  for (auto it = known_.begin(); any_stale && it != known_.end();) {
    const bool stale = start - last_ok_wall_ms_[it->second.pool] > kKeepFailedMs;
    it = stale ? EraseKnown(it) : std::next(it);
  }
  // The cap: the queues read longest ago (the least recently active) make room for the new
  // ones, and are counted as dropped; they come back when they are worked on again.
  if (known_.size() + fresh.size() > cap_) {
    std::vector<std::map<std::string, Known>::iterator> old;
    for (auto it = known_.begin(); it != known_.end(); ++it) {
      if (it->second.read_wall_ms < start) old.push_back(it);
    }
    std::sort(old.begin(), old.end(), [](const auto& a, const auto& b) {
      return a->second.read_wall_ms < b->second.read_wall_ms;
    });
    const size_t need = known_.size() + fresh.size() - cap_;
    for (size_t i = 0; i < need && i < old.size(); ++i) {
      EraseKnown(old[i]);
      ++dropped_total_;
    }
  }
  for (const std::string& tag : fresh) {
    if (known_.size() >= cap_) {
      ++dropped_total_;
      continue;
    }
    const QueueFigures& f = round->read.at(tag);
    SetKnown(known_.try_emplace(tag).first,
             Known{f, start, f.finished() ? start : 0, round->tags.at(tag)});
  }
  auto snap = std::make_shared<QueueStatsSnapshot>();
  // The age of the oldest figures in it: a pool that missed this read is one round older.
  snap->taken_wall_ms = start;
  for (size_t p = 0; p < per_pool_.size(); ++p) {
    if (per_pool_[p] > 0) snap->taken_wall_ms = std::min(snap->taken_wall_ms, last_ok_wall_ms_[p]);
  }
  // Only the chunks holding a queue whose figures changed are copied (figures_table.h).
  if (!changes_.empty()) table_ = table_.Apply(changes_);
  changes_.clear();
  snap->queues = table_;
  snap->dropped_total = dropped_total_;
  book_.Store(snap);
}

}  // namespace deferq::queue
