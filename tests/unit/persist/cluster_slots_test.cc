#include "persist/cluster_slots.h"

#include <gtest/gtest.h>

namespace deferq::persist {
namespace {

// Expected slots as redis-server 7.0.15 answers CLUSTER KEYSLOT for the same keys.
TEST(ClusterSlotsTest, KeySlotMatchesRedisClusterKeyslot) {
  EXPECT_EQ(KeySlot("foo"), 12182);
  EXPECT_EQ(KeySlot("bar"), 5061);
  EXPECT_EQ(KeySlot("123456789"), 12739);
  EXPECT_EQ(KeySlot("dq:{default/q1}:"), 1216);
  EXPECT_EQ(KeySlot("{user1000}.following"), 3443);
}

TEST(ClusterSlotsTest, HashTagRulesFollowRedis) {
  EXPECT_EQ(KeySlot("a{}b"), 13694);    // an empty tag hashes the whole key
  EXPECT_EQ(KeySlot("x{}{y}"), 14166);  // only the first '{' counts
  EXPECT_EQ(KeySlot("{a"), 10276);      // no closing brace: the whole key
  EXPECT_EQ(KeySlot("dq:{default/q1}:j"), KeySlot("dq:{default/q1}:"));
}

TEST(ClusterSlotsTest, Crc16IsXmodem) { EXPECT_EQ(Crc16("123456789"), 0x31c3); }

TEST(ClusterSlotsTest, EverySlotHasATagThatMapsToIt) {
  for (int s = 0; s < kClusterSlots; ++s) {
    ASSERT_EQ(KeySlot(SlotTag(s)), s) << SlotTag(s);
    ASSERT_EQ(KeySlot(SlotDueKey(s)), s);
    ASSERT_EQ(KeySlot(SlotRegistryKey(s)), s);
  }
  // Also checked against CLUSTER KEYSLOT: the first and the last slot.
  EXPECT_EQ(SlotDueKey(0), "dq:{3560}:due");
  EXPECT_EQ(SlotRegistryKey(16383), "dq:{39296}:queues");
}

}  // namespace
}  // namespace deferq::persist
