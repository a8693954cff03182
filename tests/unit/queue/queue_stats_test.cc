// The metrics poller's qstats calls (QstatsBatches): unchanged for standalone pools, one hash
// slot per call on a Redis Cluster pool (a call across slots is refused there: CROSSSLOT).
#include "queue/stats/queue_stats.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "persist/cluster_slots.h"
#include "queue/model/queue_name.h"

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

}  // namespace
}  // namespace deferq::queue
