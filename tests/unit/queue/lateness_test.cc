#include "queue/stats/lateness.h"

#include <gtest/gtest.h>

namespace deferq::queue {
namespace {

TEST(LatenessHistogramTest, ExactBelowSixteenMillisecondsAndBoundedAbove) {
  for (int64_t ms = 0; ms < 16; ++ms) {
    EXPECT_EQ(LatenessHistogram::UpperBound(LatenessHistogram::BucketOf(ms)), ms);
  }
  for (int64_t ms : {16, 17, 100, 999, 1000, 123456, 10'000'000}) {
    const int64_t upper = LatenessHistogram::UpperBound(LatenessHistogram::BucketOf(ms));
    EXPECT_GE(upper, ms);
    EXPECT_LE(upper, ms + ms / 8 + 1) << ms;  // 8 buckets per power of two: within 12.5%
  }
}

TEST(LatenessHistogramTest, HoursLateLandsInTheOpenLastBucketAndReportsTheMax) {
  LatenessHistogram h;
  h.Record(86'400'000);  // a day late (a pool down for a day)
  EXPECT_EQ(LatenessHistogram::BucketOf(86'400'000), LatenessHistogram::kBuckets - 1);
  EXPECT_EQ(h.Quantile(0.5), 86'400'000);
}

TEST(LatenessHistogramTest, QuantilesAndMaxOfRecordedValues) {
  LatenessHistogram h;
  for (int i = 0; i < 98; ++i) h.Record(1);
  h.Record(40);
  h.Record(250);
  EXPECT_EQ(h.count(), 100u);
  EXPECT_EQ(h.Quantile(0.50), 1);
  EXPECT_EQ(h.Quantile(0.98), 1);
  EXPECT_GE(h.Quantile(0.99), 40);
  EXPECT_LE(h.Quantile(0.99), 45);
  EXPECT_EQ(h.max(), 250);
  EXPECT_EQ(h.Quantile(1.0), 250);  // never above the true maximum
}

TEST(LatenessHistogramTest, NegativeLatenessCountsAsZero) {
  LatenessHistogram h;
  h.Record(-3);
  EXPECT_EQ(h.Quantile(0.5), 0);
}

TEST(LatenessStatsTest, KeepsOneHistogramPerQueue) {
  LatenessStats stats;
  stats.Record("ns/a", {1, 2, 3}, 0);
  stats.Record("ns/b", {7}, 0);
  stats.Record("ns/a", {}, 0);
  auto snap = stats.Snapshot();
  ASSERT_EQ(snap.size(), 2u);
  EXPECT_EQ(snap[0].first, "ns/a");
  EXPECT_EQ(snap[0].second->count(), 3u);
  EXPECT_EQ(snap[1].second->max(), 7);
}

TEST(LatenessStatsTest, AtTheCapANewQueueIsDroppedAndCountedUntilAnIdleOneMakesRoom) {
  LatenessStats stats(2);
  stats.Record("ns/a", {1}, 0);
  stats.Record("ns/b", {2}, 0);
  stats.Record("ns/c", {3}, 1000);  // full, nothing idle: dropped
  stats.Record("ns/c", {3}, 2000);
  EXPECT_EQ(stats.dropped(), 2u);
  ASSERT_EQ(stats.Snapshot().size(), 2u);
  // ns/a stays busy; ns/b idles past kIdleMs and gives its room to ns/c.
  const int64_t later = LatenessStats::kIdleMs + 10;
  stats.Record("ns/a", {1}, later - 5);
  stats.Record("ns/c", {4, 5}, later);
  auto snap = stats.Snapshot();
  ASSERT_EQ(snap.size(), 2u);
  EXPECT_EQ(snap[0].first, "ns/a");
  EXPECT_EQ(snap[0].second->count(), 2u);
  EXPECT_EQ(snap[1].first, "ns/c");
  EXPECT_EQ(snap[1].second->count(), 2u);  // the dropped records are not in it
  EXPECT_EQ(stats.dropped(), 2u);
}

TEST(LatenessStatsTest, QuietQueuesAreListedAndAForgottenQueueLeavesTheSnapshot) {
  LatenessStats stats(10);
  stats.Record("ns/a", {1}, 1000);
  stats.Record("ns/b", {2}, 5000);
  EXPECT_EQ(stats.QuietSince(4000), std::vector<std::string>{"ns/a"});
  EXPECT_EQ(stats.QuietSince(6000), (std::vector<std::string>{"ns/a", "ns/b"}));
  stats.Forget("ns/a");
  stats.Forget("ns/missing");  // nothing to forget: no change
  const auto snap = stats.Snapshot();
  ASSERT_EQ(snap.size(), 1u);
  EXPECT_EQ(snap[0].first, "ns/b");
  EXPECT_TRUE(stats.QuietSince(4000).empty());
}

}  // namespace
}  // namespace deferq::queue
