#include "base/histogram.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace deferq::base {
namespace {

constexpr int64_t kBounds[] = {10, 100, 1000};

TEST(HistogramTest, BoundsAreInclusiveAndTheLastBucketIsOpen) {
  Histogram h(kBounds);
  for (int64_t us : {0, 10, 11, 100, 1000, 1001, 5000000}) h.Record(us);
  const Histogram::Snapshot s = h.Read();
  EXPECT_EQ(s.buckets, (std::vector<uint64_t>{2, 2, 1, 2}));
  EXPECT_EQ(s.count, 7u);
  EXPECT_EQ(s.sum_us, 0 + 10 + 11 + 100 + 1000 + 1001 + 5000000);
}

TEST(HistogramTest, NegativeDurationsCountAsZero) {
  Histogram h(kBounds);
  h.Record(-5);
  const Histogram::Snapshot s = h.Read();
  EXPECT_EQ(s.buckets[0], 1u);
  EXPECT_EQ(s.sum_us, 0);
}

TEST(HistogramTest, RecordsFromManyThreadsAreAllCounted) {
  Histogram h(LatencyBoundsUs());
  ShardedCounter errors;
  std::vector<std::thread> threads;
  for (int t = 0; t < 12; ++t) {  // more threads than shards: shards are shared, still exact
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) {
        h.Record(i % 3000);
        errors.Add();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(h.Read().count, 120000u);
  EXPECT_EQ(errors.Read(), 120000u);
}

}  // namespace
}  // namespace deferq::base
