// Sharded queues' pure parts: shard names, the placement of ids, the CONSUME order.
#include "queue/model/shards.h"

#include <gtest/gtest.h>

#include <set>

#include "queue/model/job_id.h"

namespace deferq::queue {
namespace {

Config Sharded(std::string tag, int n) {
  Config cfg;
  cfg.queue_shards[tag] = n;
  return cfg;
}

TEST(ShardsTest, CountComesFromTheConfigAndDefaultsToOne) {
  const Config cfg = Sharded("default/hot", 8);
  EXPECT_EQ(ShardCount(cfg, "default", "hot"), 8);
  EXPECT_EQ(ShardCount(cfg, "other", "hot"), 1);
  EXPECT_EQ(ShardCount(cfg, "default", "hot2"), 1);
  EXPECT_EQ(ShardCount(Config{}, "default", "hot"), 1);
}

TEST(ShardsTest, ShardZeroIsTheQueueItselfAndOthersCarryTheMark) {
  EXPECT_EQ(ShardQueueName("hot", 0), "hot");
  EXPECT_EQ(ShardQueueName("hot", 7), "hot#7");
  EXPECT_EQ(Shard(QueueName{"ns", "hot"}, 3).prefix(), "dq:{ns/hot#3}:");
  EXPECT_EQ(ClientQueueName("hot#7"), "hot");
  EXPECT_EQ(ClientQueueName("hot"), "hot");
  // A shard's tag parses back to its namespace and stored name.
  const std::optional<QueueName> q = QueueName::Parse("ns/hot#12");
  ASSERT_TRUE(q.has_value());
  EXPECT_EQ(q->ns, "ns");
  EXPECT_EQ(ClientQueueName(q->queue), "hot");
}

TEST(ShardsTest, GeneratedIdsCarryTheirShardInTheFirstRandomByte) {
  IdGenerator gen;
  for (int shard = 0; shard < 8; ++shard) {
    GeneratedId id = gen.Next(1'795'000'000'000ULL);
    id.random[0] = static_cast<uint8_t>(shard);
    const std::string key = CanonicalKeyOfText(EncodeIdText(id));
    ASSERT_EQ(key.size(), 16u);
    EXPECT_EQ(ShardOf(key, 8), shard);
  }
}

TEST(ShardsTest, CustomIdsArePlacedByFnv1aOfTheirKey) {
  // FNV-1a's published test vectors: the hash is fixed forever (it decides where jobs live).
  EXPECT_EQ(Fnv1a(""), 0x811c9dc5u);
  EXPECT_EQ(Fnv1a("a"), 0xe40c292cu);
  EXPECT_EQ(Fnv1a("foobar"), 0xbf9cf968u);
  const std::string key = CanonicalKeyOfText("order-17");
  EXPECT_EQ(ShardOf(key, 8), static_cast<int>(Fnv1a("#order-17") % 8));
  EXPECT_EQ(ShardOf(key, 1), 0);
  // A few hundred custom ids reach every one of 8 shards.
  std::set<int> seen;
  for (int i = 0; i < 200; ++i)
    seen.insert(ShardOf(CanonicalKeyOfText("job-" + std::to_string(i)), 8));
  EXPECT_EQ(seen.size(), 8u);
}

TEST(ShardsTest, ConsumeOrderExpandsShardedQueuesInPlaceFromARotatingStart) {
  const Config cfg = Sharded("ns/hot", 3);
  const std::vector<std::string_view> three = {"a", "hot", "b"}, hot = {"hot"};
  EXPECT_EQ(ConsumeOrder(cfg, "ns", three, 0),
            (std::vector<std::string>{"a", "hot", "hot#1", "hot#2", "b"}));
  EXPECT_EQ(ConsumeOrder(cfg, "ns", hot, 1), (std::vector<std::string>{"hot#1", "hot#2", "hot"}));
  EXPECT_EQ(ConsumeOrder(cfg, "ns", hot, 5), (std::vector<std::string>{"hot#2", "hot", "hot#1"}));
  EXPECT_EQ(ConsumeOrder(cfg, "other", hot, 5), (std::vector<std::string>{"hot"}));
}

}  // namespace
}  // namespace deferq::queue
