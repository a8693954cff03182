// DueRate (queue/delivery/pump.h): when a queue's pump calls are coalesced. A burst at a low rate
// must not make the queue busy (the jobs after it would wait kCoalesceMs); a sustained high rate
// must.

#include <gtest/gtest.h>

#include "queue/delivery/pump.h"

namespace deferq::queue {
namespace {

TEST(DueRateTest, FirstCallOnlyStartsTheClock) {
  DueRate r;
  EXPECT_FALSE(r.Note(1000, 5000));
  EXPECT_EQ(r.per_ms, 0);
  EXPECT_EQ(r.last_ms, 5000);
}

TEST(DueRateTest, ABurstAtALowRateLeavesTheQueueQuiet) {
  // 1,250 jobs/s: one or two jobs a call, one call a ms; now and then 4-6 at once.
  DueRate r;
  int64_t now = 1000;
  r.Note(1, now);
  for (int i = 0; i < 2000; ++i) {
    now += 1;
    const int64_t made = (i % 50 == 0) ? 6 : 1 + i % 2;
    EXPECT_FALSE(r.Note(made, now)) << "call " << i;
  }
}

TEST(DueRateTest, ASustainedHighRateMakesItBusyAndItStaysBusyWhileCoalesced) {
  // 10,000 jobs/s: 10 a call a ms, then (busy) 30 a call every 3 ms.
  DueRate r;
  int64_t now = 1000;
  r.Note(10, now);
  int calls = 0;
  while (!r.Note(10, now += 1)) ASSERT_LT(++calls, 100);
  for (int i = 0; i < 100; ++i) EXPECT_TRUE(r.Note(30, now += 3));
}

TEST(DueRateTest, BusyEndsSoonAfterTheRateFalls) {
  DueRate r;
  int64_t now = 1000;
  r.Note(0, now);
  for (int i = 0; i < 100; ++i) r.Note(30, now += 3);
  ASSERT_TRUE(r.Note(30, now += 3));
  int calls = 0;
  while (r.Note(1, now += 3)) ASSERT_LT(++calls, 30);
}

TEST(DueRateTest, CallsInTheSameMsCountOverOneMs) {
  // A backlog pumped in rounds: the calls answer within one ms of each other.
  DueRate r;
  r.Note(0, 1000);
  EXPECT_FALSE(r.Note(8, 1000));  // 8 in <= 1 ms weighs 1/8 of 8: 1 per ms
  EXPECT_DOUBLE_EQ(r.per_ms, 1.0);
}

TEST(IndexCompactionTest, OnlyAMostlyEmptyTableOfSomeSizeIsCopied) {
  // 10,000 one-off queues gone, one left: a 16,384-bucket table of one member.
  EXPECT_TRUE(IndexNeedsCompaction(148336, 1));
  // A sorted set that once held more than 128 members, two left: a skiplist and its table.
  EXPECT_TRUE(IndexNeedsCompaction(17312, 2));
  // Small tables are left alone, whatever their fill.
  EXPECT_FALSE(IndexNeedsCompaction(8000, 1));
  // A table its members fill (10,000 queues: ~100 bytes each, the table included).
  EXPECT_FALSE(IndexNeedsCompaction(1000000, 10000));
  // Mostly empty, but too many members left to copy in one command.
  EXPECT_FALSE(IndexNeedsCompaction(64 << 20, 100000));
}

}  // namespace
}  // namespace deferq::queue
