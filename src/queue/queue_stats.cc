#include "queue/queue_stats.h"

#include <hiredis/hiredis.h>

#include <algorithm>
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

// One read of every pool: the registry scans first, then one qstat per queue. `pending` counts
// the calls still out; a failed call spoils the round (the previous snapshot stays, and ages).
struct QueueStatsPoller::Round {
  std::weak_ptr<bool> alive;
  std::shared_ptr<QueueStatsSnapshot> snap = std::make_shared<QueueStatsSnapshot>();
  std::map<std::string, size_t> tags;  // tag -> pool index
  std::vector<uint64_t> scanned;       // per pool: registry entries its scan has seen
  uint64_t left_out = 0;  // registry entries over the cap (deferq_metrics_queues_dropped)
  size_t pending = 0;
  bool failed = false;
};

QueueStatsPoller::QueueStatsPoller(Worker& worker, QueueStatsBook& book, size_t cap)
    : worker_(worker), book_(book), cap_(cap), alive_(std::make_shared<bool>(true)) {}

QueueStatsPoller::~QueueStatsPoller() = default;

void QueueStatsPoller::Tick() {
  if (in_flight_ || worker_.now_ms() < next_poll_ms_ || worker_.pools().empty()) return;
  next_poll_ms_ = worker_.now_ms() + kPollMs;
  in_flight_ = true;
  auto round = std::make_shared<Round>();
  round->alive = alive_;
  round->snap->taken_wall_ms = worker_.wall_ms();
  // Queues known from earlier reads come first (they keep their series); the registries fill
  // the rest of the cap.
  for (const auto& [tag, pool] : known_) {
    if (round->tags.size() < cap_ && pool < worker_.pools().size()) round->tags.emplace(tag, pool);
  }
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
  const std::string cap = std::to_string(cap_);
  const std::string_view read[] = {
      "ZREVRANGEBYSCORE", kActiveKey, "+inf", oldest, "LIMIT", "0", cap};
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
      std::string tag(e->str, e->len);
      if (round->tags.size() < cap_) round->tags.emplace(std::move(tag), pool);
    }
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
  round->snap->dropped = round->left_out;
  if (round->tags.empty()) return Finish(round);
  round->pending = round->tags.size();
  const std::string now = std::to_string(worker_.wall_ms());
  for (const auto& [tag, pool] : round->tags) {
    const std::optional<QueueName> name = QueueName::Parse(tag);
    if (!name) {
      if (--round->pending == 0) Finish(round);
      continue;
    }
    const std::string prefix = name->prefix();
    const std::string_view keys[] = {prefix};
    const std::string_view argv[] = {now};
    worker_.pools()[pool]->Eval(persist::Script::kQstat, keys, argv, 0,
                                [this, round, tag = tag](const persist::UpstreamResult& r) {
                                  if (round->alive.expired()) return;
                                  QueueFigures f;
                                  if (r.reply != nullptr && r.reply->type == REDIS_REPLY_ARRAY &&
                                      r.reply->elements >= QueueFigures::kFields) {
                                    for (size_t k = 0; k < QueueFigures::kFields; ++k)
                                      ReplyInt(r.reply->element[k], &f.v[k]);
                                    round->snap->queues.emplace(tag, f);
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
  // Purged queues (nothing left, counters included) are forgotten; the others are read again.
  known_.clear();
  for (const auto& [tag, f] : round->snap->queues) {
    if (!f.empty()) known_.emplace(tag, round->tags[tag]);
  }
  for (auto it = round->snap->queues.begin(); it != round->snap->queues.end();) {
    it = it->second.empty() ? round->snap->queues.erase(it) : std::next(it);
  }
  book_.Store(round->snap);
}

}  // namespace deferq::queue
