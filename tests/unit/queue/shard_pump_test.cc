// Pump ownership per shard, its pure parts: which shard a tag names, the states and their count,
// and the owner of each shard among a roster.
#include "queue/delivery/shard_pump.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

namespace deferq::queue {
namespace {

Config TwoShardedQueues() {
  Config cfg;
  cfg.queue_shards["default/hot"] = 8;
  cfg.queue_shards["eu/orders"] = 3;
  return cfg;
}

TEST(ShardPumpTableTest, FindsEveryShardOfTheConfigsShardedQueuesAndNothingElse) {
  const ShardPumpTable table(TwoShardedQueues());
  ASSERT_EQ(table.size(), 11u);
  std::set<int64_t> seen;
  for (int i = 0; i < 8; ++i) {
    seen.insert(table.Find(i == 0 ? "default/hot" : "default/hot#" + std::to_string(i)));
  }
  for (int i = 0; i < 3; ++i) {
    seen.insert(table.Find(i == 0 ? "eu/orders" : "eu/orders#" + std::to_string(i)));
  }
  EXPECT_EQ(seen.size(), 11u);  // each shard its own index
  EXPECT_EQ(*seen.begin(), 0);
  EXPECT_EQ(*seen.rbegin(), 10);
  // Not shards: other queues, other namespaces, out-of-range or non-canonical shard numbers.
  for (const char* tag :
       {"default/hot2", "default/ho", "other/hot", "default/hot#8", "default/hot#08",
        "default/hot#-1", "default/hot#", "default/hot#1x", "eu/orders#3", "hot", ""}) {
    EXPECT_EQ(table.Find(tag), -1) << tag;
  }
  EXPECT_EQ(ShardPumpTable(Config{}).Find("default/hot"), -1);
}

TEST(ShardPumpTableTest, StatesStartUnownedAndTheOwnedOnesAreCounted) {
  ShardPumpTable table(TwoShardedQueues());
  const int before = table.owned();
  for (size_t i = 0; i < table.size(); ++i) EXPECT_FALSE(table.Pumps(i));
  table.Set(1, ShardPumpTable::kOwned);
  table.Set(2, ShardPumpTable::kOwned);
  table.Set(2, ShardPumpTable::kOwned);  // no change
  EXPECT_EQ(table.owned(), before + 2);
  table.Set(2, ShardPumpTable::kGrace);  // handed over: pumped, no longer counted
  EXPECT_TRUE(table.Pumps(2));
  EXPECT_EQ(table.owned(), before + 1);
  table.Set(2, ShardPumpTable::kNone);
  table.Set(1, ShardPumpTable::kNone);
  EXPECT_FALSE(table.Pumps(2));
  EXPECT_EQ(table.owned(), before);
}

TEST(ShardOwnerTest, EveryMemberOwnsItsShareOfEachQueue) {
  for (size_t members = 1; members <= 5; ++members) {
    for (const char* tag : {"default/hot", "eu/orders", "a/b"}) {
      std::vector<int> owned(members, 0);
      for (int i = 0; i < 8; ++i) {
        const size_t owner = ShardOwnerIndex(tag, i, members);
        ASSERT_LT(owner, members);
        ++owned[owner];
      }
      // Consecutive shards go round the roster: shares differ by at most one.
      for (int n : owned) {
        EXPECT_GE(n, static_cast<int>(8 / members)) << tag << " " << members;
        EXPECT_LE(n, static_cast<int>((8 + members - 1) / members)) << tag << " " << members;
      }
    }
  }
  EXPECT_EQ(ShardOwnerIndex("default/hot", 3, 2), ShardOwnerIndex("default/hot", 5, 2));
}

}  // namespace
}  // namespace deferq::queue
