#include "queue/queue_stats.h"

#include <hiredis/hiredis.h>

#include <algorithm>
#include <atomic>
#include <optional>
#include <string_view>
#include <unordered_set>
#include <utility>

#include "queue/job_codec.h"
#include "queue/queue_name.h"
#include "queue/worker.h"

namespace deferq::queue {

namespace {

constexpr const char* kScanPage = "1000";  // SSCAN COUNT of one registry page
// The pool's active-queue index: ZSET "ns/queue" -> unix ms of the last job command an instance
// noted on it (docs/storage.md). Entries older than kActiveMs are trimmed by every poll.
constexpr std::string_view kActiveKey = "dq:active";

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
  if (local.seen.size() >= cap_ || !local.seen.insert(tag).second) return;
  base::MutexLock lock(&mu_);
  if (active_.size() < cap_) active_.push_back(tag);
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

namespace {
std::atomic<QueueStatsBook*> g_book{nullptr};  // the running server's, set by its poller
}  // namespace

void NoteQueueActivity(const std::string& tag) {
  if (QueueStatsBook* book = g_book.load(std::memory_order_relaxed)) book->NoteActive(tag);
}

// One read of every pool: the active-queue index (and, on a full read, the registries), then
// the figures of those queues, 100 per qstats call. `pending` counts the calls still out; a
// failed call spoils the round (the previous figures stay, and age).
struct QueueStatsPoller::Round {
  std::weak_ptr<bool> alive;
  bool full = false;
  int64_t started_wall_ms = 0;
  std::map<std::string, size_t> tags;  // tag -> pool index: the queues to read this round
  std::vector<uint64_t> scanned;       // per pool: registry entries its scan has seen
  uint64_t left_out = 0;               // registry entries over the cap
  size_t pending = 0;
  bool failed = false;
  std::map<std::string, QueueFigures> read;
};

QueueStatsPoller::QueueStatsPoller(Worker& worker, QueueStatsBook& book, size_t cap)
    : worker_(worker), book_(book), cap_(cap), alive_(std::make_shared<bool>(true)) {
  g_book.store(&book, std::memory_order_relaxed);
}

QueueStatsPoller::~QueueStatsPoller() {
  QueueStatsBook* mine = &book_;
  g_book.compare_exchange_strong(mine, nullptr, std::memory_order_relaxed);
}

void QueueStatsPoller::Tick() {
  if (in_flight_ || worker_.now_ms() < next_poll_ms_ || worker_.pools().empty()) return;
  next_poll_ms_ = worker_.now_ms() + kPollMs;
  in_flight_ = true;
  auto round = std::make_shared<Round>();
  round->alive = alive_;
  round->started_wall_ms = worker_.wall_ms();
  // A full read (at start, then every kFullReadMs) reads every queue in the registries and the
  // index; the others only the queues some instance worked on since the last read: an idle
  // pool costs three commands per read, however many queues it stores.
  round->full = worker_.now_ms() >= next_full_ms_;
  // The queues this instance worked on go to the index of their namespace's pool.
  const std::vector<std::string> active = book_.TakeActive();
  std::vector<std::vector<std::string>> noted(worker_.pools().size());
  for (const std::string& tag : active) {
    const std::optional<QueueName> name = QueueName::Parse(tag);
    if (!name) continue;
    persist::PoolClient* pool = worker_.PoolFor(name->ns);
    for (size_t p = 0; p < worker_.pools().size(); ++p) {
      if (worker_.pools()[p].get() == pool) noted[p].push_back(tag);
    }
  }
  round->pending = worker_.pools().size();
  round->scanned.assign(worker_.pools().size(), 0);
  for (size_t p = 0; p < worker_.pools().size(); ++p) ReadActive(round, p, noted[p]);
}

void QueueStatsPoller::ReadActive(const std::shared_ptr<Round>& round, size_t pool,
                                  const std::vector<std::string>& noted) {
  persist::PoolClient& client = *worker_.pools()[pool];
  const int64_t now = worker_.wall_ms();
  const std::string now_text = std::to_string(now);
  // One connection, so the three commands apply in order: add, trim, read.
  if (!noted.empty()) {
    std::vector<std::string_view> add = {"ZADD", kActiveKey};
    for (const std::string& tag : noted) {
      add.push_back(now_text);
      add.push_back(tag);
    }
    client.Command(add, 0, [](const persist::UpstreamResult&) {});
  }
  const std::string oldest = std::to_string(now - kActiveMs);
  const std::string before_oldest = "(" + oldest;
  const std::string_view trim[] = {"ZREMRANGEBYSCORE", kActiveKey, "-inf", before_oldest};
  client.Command(trim, 0, [](const persist::UpstreamResult&) {});
  // Since the last read, with a margin for the other instances' read phases and clocks: a
  // queue is read on two or three rounds after its last activity, then no more.
  const std::string since =
      round->full ? oldest : std::to_string(last_read_wall_ms_ - kPollMs - kSlackMs);
  const std::string cap = std::to_string(cap_);
  const std::string_view read[] = {
      "ZREVRANGEBYSCORE", kActiveKey, "+inf", since, "LIMIT", "0", cap};
  client.Command(read, 0, [this, round, pool](const persist::UpstreamResult& r) {
    if (round->alive.expired()) return;
    if (r.reply == nullptr || r.reply->type != REDIS_REPLY_ARRAY) {
      round->failed = true;
      return ScanDone(round, pool);
    }
    // Most recently active first, so the cap keeps the busiest queues.
    for (size_t i = 0; i < r.reply->elements; ++i) {
      const redisReply* e = r.reply->element[i];
      if (e->type != REDIS_REPLY_STRING) continue;
      if (round->tags.size() < cap_) round->tags.emplace(std::string(e->str, e->len), pool);
    }
    if (!round->full) return ScanDone(round, pool);
    Scan(round, pool, "0");
  });
}

void QueueStatsPoller::Scan(const std::shared_ptr<Round>& round, size_t pool, std::string cursor) {
  const std::string_view args[] = {"SSCAN", persist::kRegistryKey, cursor, "COUNT", kScanPage};
  worker_.pools()[pool]->Command(args, 0, [this, round, pool](const persist::UpstreamResult& r) {
    if (round->alive.expired()) return;
    // [cursor, [tag...]]
    if (r.reply == nullptr || r.reply->type != REDIS_REPLY_ARRAY || r.reply->elements != 2 ||
        r.reply->element[0]->type != REDIS_REPLY_STRING ||
        r.reply->element[1]->type != REDIS_REPLY_ARRAY) {
      round->failed = true;
      return ScanDone(round, pool);
    }
    const redisReply* tags = r.reply->element[1];
    for (size_t i = 0; i < tags->elements; ++i) {
      if (tags->element[i]->type != REDIS_REPLY_STRING) continue;
      std::string tag(tags->element[i]->str, tags->element[i]->len);
      ++round->scanned[pool];
      if (round->tags.count(tag) != 0) continue;
      if (round->tags.size() < cap_) {
        round->tags.emplace(std::move(tag), pool);
      } else {
        ++round->left_out;
      }
    }
    std::string next(r.reply->element[0]->str, r.reply->element[0]->len);
    // The scan ends at the end of the registry, or once the cap is reached: what it has not
    // seen is counted from SCARD.
    if (next != "0" && round->tags.size() < cap_) return Scan(round, pool, std::move(next));
    if (next == "0") return ScanDone(round, pool);
    const std::string_view card[] = {"SCARD", persist::kRegistryKey};
    worker_.pools()[pool]->Command(card, 0, [this, round, pool](const persist::UpstreamResult& c) {
      if (round->alive.expired()) return;
      int64_t n = 0;
      // What the scan did not reach (an upper bound: some may be among the active ones).
      if (c.reply != nullptr && ReplyInt(c.reply, &n) &&
          static_cast<uint64_t>(n) > round->scanned[pool]) {
        round->left_out += static_cast<uint64_t>(n) - round->scanned[pool];
      }
      ScanDone(round, pool);
    });
  });
}

void QueueStatsPoller::ScanDone(const std::shared_ptr<Round>& round, size_t) {
  if (--round->pending > 0) return;
  if (round->failed) {
    in_flight_ = false;
    return;
  }
  ReadQueues(round);
}

void QueueStatsPoller::ReadQueues(const std::shared_ptr<Round>& round) {
  // Per pool, batches of kBatch queues: one qstats call each.
  std::vector<std::vector<std::string>> by_pool(worker_.pools().size());
  for (const auto& [tag, pool] : round->tags) {
    if (QueueName::Parse(tag)) by_pool[pool].push_back(tag);
  }
  std::vector<std::pair<size_t, std::vector<std::string>>> batches;
  for (size_t p = 0; p < by_pool.size(); ++p) {
    for (size_t i = 0; i < by_pool[p].size(); i += kBatch) {
      const size_t end = std::min(by_pool[p].size(), i + kBatch);
      batches.emplace_back(p,
                           std::vector<std::string>(by_pool[p].begin() + static_cast<long>(i),
                                                    by_pool[p].begin() + static_cast<long>(end)));
    }
  }
  if (batches.empty()) return Finish(round);
  round->pending = batches.size();
  for (auto& batch : batches) {
    const size_t pool = batch.first;
    std::vector<std::string>& tags = batch.second;
    std::vector<std::string> prefixes;
    prefixes.reserve(tags.size());
    for (const std::string& tag : tags) prefixes.push_back(QueueName::Parse(tag)->prefix());
    std::vector<std::string_view> keys(prefixes.begin(), prefixes.end());
    const std::string n = std::to_string(tags.size());
    const std::string_view argv[] = {n};
    worker_.pools()[pool]->Eval(
        persist::Script::kQstats, keys, argv, 0,
        [this, round, tags = std::move(tags)](const persist::UpstreamResult& r) {
          if (round->alive.expired()) return;
          if (r.reply != nullptr && r.reply->type == REDIS_REPLY_ARRAY &&
              r.reply->elements == tags.size() * QueueFigures::kFields) {
            for (size_t q = 0; q < tags.size(); ++q) {
              QueueFigures f;
              for (size_t k = 0; k < QueueFigures::kFields; ++k) {
                ReplyInt(r.reply->element[q * QueueFigures::kFields + k], &f.v[k]);
              }
              round->read[tags[q]] = f;
            }
          } else {
            round->failed = true;
          }
          if (--round->pending == 0) Finish(round);
        });
  }
}

void QueueStatsPoller::Finish(const std::shared_ptr<Round>& round) {
  in_flight_ = false;
  if (round->failed) return;
  last_read_wall_ms_ = round->started_wall_ms;
  if (round->full) {
    next_full_ms_ = worker_.now_ms() + kFullReadMs;
    known_.clear();
  }
  // What was read replaces what was known; purged queues (nothing left, counters included) are
  // forgotten. The cap bounds what is kept.
  for (auto& [tag, f] : round->read) {
    if (f.empty()) {
      known_.erase(tag);
    } else if (known_.size() < cap_ || known_.count(tag) != 0) {
      known_[tag] = f;
    }
  }
  auto snap = std::make_shared<QueueStatsSnapshot>();
  snap->taken_wall_ms = round->started_wall_ms;
  snap->dropped = round->full ? round->left_out : dropped_;
  dropped_ = snap->dropped;
  snap->queues = known_;
  book_.Store(snap);
}

}  // namespace deferq::queue
