// The metrics poller's qstats calls (QstatsBatches): unchanged for standalone pools, one hash
// slot per call on a Redis Cluster pool (a call across slots is refused there: CROSSSLOT). And
// QueueStatsPoller on a fake pool: which queues a round reads (idle queues are not read again,
// unless a round left activity unread over the cap).
#include "queue/stats/queue_stats.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "fuzz/job_parse_context.h"
#include "persist/cluster_slots.h"
#include "queue/model/queue_name.h"
#include "unit/support/fake_pool.h"

namespace deferq::queue {
namespace {

int SlotOf(const std::string& tag) { return persist::KeySlot(QueueName::Parse(tag)->prefix()); }

std::vector<std::string> Tags(const std::string& stem, int n) {
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) out.push_back("default/" + stem + std::to_string(i));
  return out;
}

TEST(QstatsBatchesTest, StandalonePoolsGetOneCallPer100QueuesInTheOrderGiven) {
  const std::vector<std::string> tags = Tags("q", 250);
  const auto batches = QstatsBatches(tags, /*by_slot=*/false, 100);
  ASSERT_EQ(batches.size(), 3u);
  EXPECT_EQ(batches[0], std::vector<std::string>(tags.begin(), tags.begin() + 100));
  EXPECT_EQ(batches[1], std::vector<std::string>(tags.begin() + 100, tags.begin() + 200));
  EXPECT_EQ(batches[2], std::vector<std::string>(tags.begin() + 200, tags.end()));
  EXPECT_TRUE(QstatsBatches({}, false, 100).empty());
}

TEST(QstatsBatchesTest, ClusterPoolsGetOneCallPerSlotOfAtMostABatchAndReadEveryQueueOnce) {
  // Batches of 3 (100 in the poller), so that a slot with more queues than a batch is quick to
  // find: 7 queues in the slot of "default/same" make three calls of that slot.
  constexpr size_t kBatch = 3;
  std::vector<std::string> tags = Tags("q", 250);
  const int shared = SlotOf("default/same");
  std::vector<std::string> same = {"default/same"};
  for (int i = 0; same.size() < 7; ++i) {
    const std::string tag = "default/s" + std::to_string(i);
    if (SlotOf(tag) == shared) same.push_back(tag);
  }
  tags.insert(tags.end(), same.begin(), same.end());
  // Sharded queues' shards are queues of their own, each with its own tag and slot.
  for (int i = 1; i < 8; ++i) tags.push_back("default/hot#" + std::to_string(i));

  std::map<int, size_t> per_slot;
  for (const std::string& tag : tags) ++per_slot[SlotOf(tag)];
  size_t want_calls = 0;
  for (const auto& [slot, n] : per_slot) want_calls += (n + kBatch - 1) / kBatch;

  const auto batches = QstatsBatches(tags, /*by_slot=*/true, kBatch);
  EXPECT_EQ(batches.size(), want_calls);
  std::multiset<std::string> read;
  std::map<int, size_t> calls_of_slot;
  for (const auto& batch : batches) {
    ASSERT_FALSE(batch.empty());
    EXPECT_LE(batch.size(), kBatch);
    const int slot = SlotOf(batch.front());
    ++calls_of_slot[slot];
    for (const std::string& tag : batch) {
      EXPECT_EQ(SlotOf(tag), slot) << tag << " is in a call of slot " << slot;
      read.insert(tag);
    }
  }
  EXPECT_EQ(read, std::multiset<std::string>(tags.begin(), tags.end()));
  EXPECT_EQ(calls_of_slot[shared], (per_slot[shared] + kBatch - 1) / kBatch);
  EXPECT_GE(calls_of_slot[shared], 3u);
}

TEST(FigureNamesTest, EveryFigureIsNamedOnceAndEachNameIsUniqueWhereItIsShown) {
  std::set<int> fields;
  std::set<std::string> info, qstat, total, metric;
  for (const FigureName& n : kFigureNames) {
    EXPECT_TRUE(fields.insert(n.field).second) << n.info;
    EXPECT_EQ(&NamesOf(n.field), &n);
    ASSERT_NE(n.info, nullptr);
    EXPECT_TRUE(info.insert(n.info).second) << n.info;
    if (n.qstat != nullptr) {
      EXPECT_TRUE(qstat.insert(n.qstat).second) << n.qstat;
    }
    if (n.total != nullptr) {
      EXPECT_TRUE(total.insert(n.total).second) << n.total;
    }
    EXPECT_EQ(n.metric == nullptr, n.help == nullptr) << n.info;
    if (n.metric != nullptr) {
      EXPECT_TRUE(metric.insert(n.metric).second) << n.metric;
    }
  }
  EXPECT_EQ(fields.size(), static_cast<size_t>(QueueFigures::kFields));
  // QSTAT answers qstat.lua's first nine figures and paused under these names (docs/metrics.md).
  const std::vector<std::string> qstat_order = {"ready",       "delayed",         "leased",
                                                "dead",        "published_total", "consumed_total",
                                                "acked_total", "expired_total",   "dead_total"};
  for (size_t i = 0; i < qstat_order.size(); ++i) {
    EXPECT_EQ(NamesOf(static_cast<QueueFigures::Field>(i)).qstat, qstat_order[i]);
  }
}

using persist::Script;
using testing::FakePool;

// A poller of cap 4 on one fake pool; each round's calls are answered by the test.
class QueueStatsPollerTest : public ::testing::Test {
 protected:
  static constexpr size_t kCap = 4;
  QueueStatsPollerTest() {
    auto pool = std::make_unique<FakePool>();
    pool_ = pool.get();
    ctx_.worker().AddPool(std::move(pool));
  }

  // A round at `sec` s: its active-index read answers `active` (and ZCOUNT `active_total` when
  // that fills the cap), a full read's registry scan nothing more, and each qstats call one
  // ready job per queue. Returns the queues the round's qstats calls read.
  std::vector<std::string> Round(int64_t sec, std::vector<std::string> active,
                                 int64_t active_total = 0) {
    ctx_.worker().SetClock(kMono + sec * 1000, kWall + sec * 1000);
    const size_t from = pool_->calls.size();
    poller_.Tick();
    std::vector<std::string> read;
    for (size_t i = from; i < pool_->calls.size(); ++i) {
      FakePool::Call& c = pool_->calls[i];
      if (c.answered) continue;
      if (c.script == Script::kQstats) {
        read.insert(read.end(), c.keys.begin(), c.keys.end());
        std::string resp = "*" + std::to_string(c.keys.size() * QueueFigures::kFields) + "\r\n";
        for (size_t q = 0; q < c.keys.size(); ++q) {
          // ready = ready_ (a queue of gone_: all zeros, purged)
          const int64_t ready = gone_.count(c.keys[q]) != 0 ? 0 : ready_;
          for (size_t f = 0; f < QueueFigures::kFields; ++f) {
            resp += f == 0 ? ":" + std::to_string(ready) + "\r\n" : ":0\r\n";
          }
        }
        pool_->Answer(i, resp);
      } else if (c.args[0] == "ZREVRANGEBYSCORE") {
        std::string resp = "*" + std::to_string(active.size()) + "\r\n";
        for (const std::string& t : active) {
          resp += "$" + std::to_string(t.size()) + "\r\n" + t + "\r\n";
        }
        pool_->Answer(i, resp);
      } else if (c.args[0] == "ZCOUNT") {
        pool_->Answer(i, ":" + std::to_string(active_total) + "\r\n");
      } else {
        pool_->Answer(i, ":0\r\n");
      }
      for (; registry_read_ < pool_->registry_reads.size(); ++registry_read_) {
        persist::RegistryRead none;
        pool_->registry_reads[registry_read_].cb(none);
      }
    }
    return read;
  }

  static constexpr int64_t kMono = 1'000'000;
  static constexpr int64_t kWall = 1'795'000'000'000;
  Config cfg_;
  JobParseContext ctx_{cfg_};
  FakePool* pool_ = nullptr;
  size_t registry_read_ = 0;
  int64_t ready_ = 1;           // what qstats answers as each queue's ready gauge
  std::set<std::string> gone_;  // prefixes qstats answers all zeros for (nothing left)
  QueueStatsBook book_{kCap};
  QueueStatsPoller poller_{ctx_.worker(), book_, kCap};
};

std::vector<std::string> Prefixes(std::initializer_list<const char*> tags) {
  std::vector<std::string> out;
  for (const char* t : tags) out.push_back(QueueName::Parse(t)->prefix());
  return out;
}

TEST_F(QueueStatsPollerTest, QueuesNobodyWorksOnAreNotReadAgain) {
  EXPECT_EQ(Round(0, {"ns/a", "ns/b"}), Prefixes({"ns/a", "ns/b"}));  // the first (full) read
  ASSERT_EQ(book_.Load()->queues.size(), 2u);
  for (int64_t sec = 2; sec <= 30; sec += 2) {
    EXPECT_TRUE(Round(sec, {}).empty()) << "at " << sec << " s";
  }
  EXPECT_EQ(book_.Load()->queues.size(), 2u);          // their figures stay
  EXPECT_EQ(Round(32, {"ns/b"}), Prefixes({"ns/b"}));  // worked on again: read
}

TEST_F(QueueStatsPollerTest, EachSnapshotHasTheRoundsChangesAndLeavesTheOneBeforeAsItWas) {
  Round(0, {"ns/a", "ns/b", "ns/c"});
  const auto first = book_.Load();
  ready_ = 7;
  Round(2, {"ns/b"});
  const auto second = book_.Load();
  ASSERT_EQ(second->queues.size(), 3u);
  EXPECT_EQ(second->queues.find("ns/a")->second.v[QueueFigures::kReady], 1);
  EXPECT_EQ(second->queues.find("ns/b")->second.v[QueueFigures::kReady], 7);
  EXPECT_EQ(first->queues.find("ns/b")->second.v[QueueFigures::kReady], 1);  // untouched
  // Nothing read: the same figures (a new snapshot, its age updated).
  Round(4, {});
  EXPECT_EQ(book_.Load()->queues.find("ns/b")->second.v[QueueFigures::kReady], 7);
  EXPECT_EQ(book_.Load()->taken_wall_ms, kWall + 4000);
  // Purged (nothing left, counters included): it leaves the figures, in name order.
  gone_.insert(QueueName::Parse("ns/a")->prefix());
  Round(6, {"ns/a"});
  std::vector<std::string> tags;
  for (const auto& [tag, f] : book_.Load()->queues) tags.push_back(tag);
  EXPECT_EQ(tags, (std::vector<std::string>{"ns/b", "ns/c"}));
  EXPECT_NE(second->queues.find("ns/a"), second->queues.end());
}

TEST_F(QueueStatsPollerTest, AfterARoundThatLeftActivityUnreadEveryQueueIsReadAgainOnce) {
  EXPECT_EQ(Round(0, {"ns/a", "ns/b"}).size(), 2u);
  // Six queues active, the cap four: two left out, and their activity may have been a's or b's.
  EXPECT_EQ(Round(2, {"ns/a", "ns/b", "ns/c", "ns/d"}, 6).size(), 4u);
  EXPECT_EQ(book_.Load()->dropped_total, 2u);
  for (int64_t sec = 4; sec < 12; sec += 2) EXPECT_TRUE(Round(sec, {}).empty()) << sec;
  // kRefreshMs after their last read, every queue kept is read again; then no more.
  EXPECT_EQ(Round(12, {}).size(), 4u);
  for (int64_t sec = 14; sec <= 40; sec += 2) EXPECT_TRUE(Round(sec, {}).empty()) << sec;
}

}  // namespace
}  // namespace deferq::queue
