#include "queue/model/queue_name.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "queue/delivery/pump.h"
#include "queue/delivery/timing_wheel.h"

namespace deferq::queue {
namespace {

TEST(QueueNameTest, ParseSplitsAtTheSlashAndTagIsItsInverse) {
  const auto q = QueueName::Parse("team/orders:eu");
  ASSERT_TRUE(q.has_value());
  EXPECT_EQ(q->ns, "team");
  EXPECT_EQ(q->queue, "orders:eu");
  EXPECT_EQ(q->tag(), "team/orders:eu");
  EXPECT_EQ(q->prefix(), "dq:{team/orders:eu}:");
}

TEST(QueueNameTest, ParseRefusesATagWithoutSlash) {
  EXPECT_FALSE(QueueName::Parse("orders").has_value());
  EXPECT_FALSE(QueueName::Parse("").has_value());
}

TEST(QueueNameTest, ParseKeepsEmptyParts) {
  const auto q = QueueName::Parse("/q");
  ASSERT_TRUE(q.has_value());
  EXPECT_EQ(q->ns, "");
  EXPECT_EQ(q->queue, "q");
}

TEST(OwnerOfTest, EveryThreadCountGivesAThreadInRangeThatTheTagsHashPicks) {
  for (int threads = 1; threads <= 8; ++threads) {
    for (const std::string tag : {"default/a", "default/b", "team/orders", "x/y"}) {
      const int owner = OwnerOf(tag, threads);
      EXPECT_GE(owner, 0);
      EXPECT_LT(owner, threads);
      EXPECT_EQ(static_cast<size_t>(owner), std::hash<std::string>{}(tag) % threads);
    }
  }
}

struct CountingTimer : WheelTimer {};

TEST(WheelTimerTest, RearmingMovesTheOneTimerAndDestructionCancelsIt) {
  TimingWheel wheel(0);
  std::vector<uint64_t> fired;
  {
    CountingTimer t;
    t.Arm(wheel, 100);
    t.Arm(wheel, 50);  // replaces the first arming
    EXPECT_EQ(wheel.size(), 1u);
    EXPECT_TRUE(t.armed());
    EXPECT_EQ(t.at_ms(), 50);
    wheel.Advance(50, &fired);
    ASSERT_EQ(fired.size(), 1u);
    EXPECT_EQ(WheelTimer::FromValue(fired[0]), &t);
    t.Fired();
    EXPECT_FALSE(t.armed());
    t.Arm(wheel, 500);
  }
  EXPECT_EQ(wheel.size(), 0u);  // the destructor cancelled it
  fired.clear();
  wheel.Advance(1000, &fired);
  EXPECT_TRUE(fired.empty());
}

}  // namespace
}  // namespace deferq::queue
