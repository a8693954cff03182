#include "queue/queue_stats.h"

#include <hiredis/hiredis.h>

#include <string_view>
#include <utility>

#include "queue/job_codec.h"
#include "queue/pump.h"
#include "queue/worker.h"

namespace deferq::queue {

namespace {

constexpr const char* kScanPage = "1000";  // SSCAN COUNT of one registry page

}  // namespace

void QueueStatsBook::Store(std::shared_ptr<const QueueStatsSnapshot> snapshot) {
  std::lock_guard<std::mutex> lock(mu_);
  snapshot_ = std::move(snapshot);
}

std::shared_ptr<const QueueStatsSnapshot> QueueStatsBook::Load() const {
  std::lock_guard<std::mutex> lock(mu_);
  return snapshot_;
}

// One read of every pool: the registry scans first, then one qstat per queue. `pending` counts
// the calls still out; a failed call spoils the round (the previous snapshot stays, and ages).
struct QueueStatsPoller::Round {
  std::weak_ptr<bool> alive;
  std::shared_ptr<QueueStatsSnapshot> snap = std::make_shared<QueueStatsSnapshot>();
  std::map<std::string, size_t> tags;  // tag -> pool index
  uint64_t registered = 0;             // tags the registries named (for `dropped`)
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
  round->pending = worker_.pools().size();
  for (size_t p = 0; p < worker_.pools().size(); ++p) Scan(round, p, "0");
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
      ++round->registered;
      if (round->tags.count(tag) == 0 && round->tags.size() < cap_) round->tags.emplace(tag, pool);
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
      if (c.reply != nullptr && ReplyInt(c.reply, &n) && n > 0) {
        round->registered = static_cast<uint64_t>(n);  // a close bound across pools is enough
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
  round->snap->dropped =
      round->registered > round->tags.size() ? round->registered - round->tags.size() : 0;
  if (round->tags.empty()) return Finish(round);
  round->pending = round->tags.size();
  const std::string now = std::to_string(worker_.wall_ms());
  for (const auto& [tag, pool] : round->tags) {
    const size_t slash = tag.find('/');
    if (slash == std::string::npos) {
      if (--round->pending == 0) Finish(round);
      continue;
    }
    const std::string prefix = QueueName{tag.substr(0, slash), tag.substr(slash + 1)}.prefix();
    const std::string_view keys[] = {prefix};
    const std::string_view argv[] = {now};
    worker_.pools()[pool]->Eval(persist::Script::kQstat, keys, argv, 0,
                                [this, round, tag](const persist::UpstreamResult& r) {
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
  round->snap->pump_owner = IsPumpOwner();
  book_.Store(round->snap);
}

}  // namespace deferq::queue
