// WaiterOrder, the instance-wide state of blocked consumers (queue/delivery/waiters.h), without
// Redis: the oldest consumer per queue, what is known empty, the serve capacity a pump call is
// told, and held news (jobs made ready for this instance alone).
#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

#include "queue/delivery/waiters.h"

namespace deferq::queue {
namespace {

QueueSet* Set(WaiterOrder& order, const std::string& key, std::vector<std::string_view> queues) {
  return order.Acquire(key, "ns", queues);
}

TEST(WaiterOrder, OldestConsumerAcrossSetsAndThreads) {
  WaiterOrder order;
  QueueSet* ab = Set(order, "ab", {"a", "b"});
  QueueSet* b = Set(order, "b", {"b"});
  order.Add(b, 7, /*thread=*/1, 1);
  order.Add(ab, 9, /*thread=*/0, 1);
  WaiterOrder::Oldest o = order.FindOldest("ns/b");
  EXPECT_EQ(o.set, b);
  EXPECT_EQ(o.seq, 7u);
  EXPECT_EQ(o.thread, 1);
  o = order.FindOldest("ns/a");
  EXPECT_EQ(o.set, ab);
  EXPECT_EQ(o.index, 0u);
  order.Remove(b, 7);
  o = order.FindOldest("ns/b");
  EXPECT_EQ(o.set, ab);
  EXPECT_EQ(o.index, 1u);
  EXPECT_EQ(o.thread, 0);
  EXPECT_EQ(order.blocked(), 1);
  EXPECT_EQ(order.FindOldest("ns/c").thread, -1);
  order.Remove(ab, 9);
  order.Release(ab);
  order.Release(b);
  EXPECT_FALSE(order.AnyInterest());
}

TEST(WaiterOrder, CapacityIsTheBlockedConsumersCountsCapped) {
  WaiterOrder order;
  QueueSet* one = Set(order, "q", {"q"});
  QueueSet* two = Set(order, "pq", {"p", "q"});
  EXPECT_EQ(order.Capacity("ns/q"), 0);
  order.Add(one, 1, 0, 1);
  order.Add(one, 2, 0, 1);
  order.Add(two, 3, 1, 100);
  EXPECT_EQ(order.Capacity("ns/q"), 102);
  EXPECT_EQ(order.Capacity("ns/p"), 100);
  order.Add(one, 2, 0, 1);  // the same consumer twice counts once
  EXPECT_EQ(order.Capacity("ns/q"), 102);
  order.Remove(two, 3);
  EXPECT_EQ(order.Capacity("ns/q"), 2);
  EXPECT_EQ(order.Capacity("ns/p"), 0);
  for (uint64_t seq = 10; seq < 20; ++seq) order.Add(two, seq, 0, 1000);
  EXPECT_EQ(order.Capacity("ns/p"), WaiterOrder::kServeMax);
  for (uint64_t seq = 10; seq < 20; ++seq) order.Remove(two, seq);
  order.Remove(one, 1);
  order.Remove(one, 2);
  order.Release(one);
  order.Release(two);
}

TEST(WaiterOrder, MarkedWhileSomeThreadKeepsTheMarkers) {
  WaiterOrder order;
  QueueSet* s = Set(order, "q", {"q"});
  EXPECT_FALSE(order.Marked("ns/q"));
  order.NoteMarked(s, +1);
  EXPECT_TRUE(order.Marked("ns/q"));
  EXPECT_FALSE(order.Marked("ns/other"));
  order.NoteMarked(s, -1);
  EXPECT_FALSE(order.Marked("ns/q"));
  order.Release(s);
}

TEST(WaiterOrder, AConsumerBehindAnOlderOneOfItsSetReadsNothingWhileTheMarkersStand) {
  WaiterOrder order;
  QueueSet* s = Set(order, "ab", {"a", "b"});
  uint64_t since = 0;
  order.Add(s, 5, 0, 1);
  order.Add(s, 6, 1, 1);
  // Without markers news may not come: it reads as before.
  EXPECT_EQ(order.Candidates(s, 1000, &since, 6), (std::vector<size_t>{0, 1}));
  order.NoteMarked(s, +1);
  EXPECT_TRUE(order.Candidates(s, 1000, &since, 6).empty());
  // The oldest itself, and a CONSUME that does not block (seq 0), read.
  EXPECT_EQ(order.Candidates(s, 1000, &since, 5), (std::vector<size_t>{0, 1}));
  EXPECT_EQ(order.Candidates(s, 1000, &since), (std::vector<size_t>{0, 1}));
  // The older one gone, the newer one reads.
  order.Remove(s, 5);
  EXPECT_EQ(order.Candidates(s, 1000, &since, 6), (std::vector<size_t>{0, 1}));
  order.Remove(s, 6);
  order.NoteMarked(s, -1);
  order.Release(s);
}

TEST(WaiterOrder, KnownEmptyUntilNews) {
  WaiterOrder order;
  QueueSet* s = Set(order, "ab", {"a", "b"});
  uint64_t since = 0;
  EXPECT_EQ(order.Candidates(s, 1000, &since), (std::vector<size_t>{0, 1}));
  order.NoteEmpty(s, {0, 1}, since, 1000);
  EXPECT_TRUE(order.Candidates(s, 1000, &since).empty());
  // Known empty for kKnownEmptyMs at least and twice that at most, spread over the queues.
  EXPECT_TRUE(order.Candidates(s, 999 + WaiterOrder::kKnownEmptyMs, &since).empty());
  EXPECT_EQ(order.Candidates(s, 1000 + 2 * WaiterOrder::kKnownEmptyMs, &since).size(), 2u);
  order.News("ns/b");
  EXPECT_EQ(order.Candidates(s, 1001, &since), (std::vector<size_t>{1}));
  // A consume begun before news of `a` says nothing of it.
  const uint64_t before = since;
  order.News("ns/a");
  order.NoteEmpty(s, {0, 1}, before, 1002);
  EXPECT_EQ(order.Candidates(s, 1002, &since), (std::vector<size_t>{0}));
  order.Release(s);
}

TEST(WaiterOrder, QueuesFoundEmptyTogetherAreReadAgainAFewAtATime) {
  WaiterOrder order;
  std::vector<std::string> names;
  for (int i = 0; i < 100; ++i) names.push_back("q" + std::to_string(i));
  std::vector<std::string_view> queues(names.begin(), names.end());
  QueueSet* s = order.Acquire("many", "ns", queues);
  uint64_t since = 0;
  std::vector<size_t> all = order.Candidates(s, 0, &since);
  order.NoteEmpty(s, all, since, 0);
  // Half way through the spread about half of them are due for a read.
  const size_t half = order.Candidates(s, WaiterOrder::kKnownEmptyMs * 3 / 2, &since).size();
  EXPECT_GT(half, 30u);
  EXPECT_LT(half, 70u);
  order.Release(s);
}

TEST(WaiterOrder, HeldNewsIsTakenOnceAndClearedByChannelOrEmptyResult) {
  WaiterOrder order;
  // Only a queue some set names can hold news.
  order.Hold("ns/q");
  EXPECT_FALSE(order.TakeHeld("ns/q"));
  QueueSet* s = Set(order, "q", {"q"});
  order.Hold("ns/q");
  EXPECT_TRUE(order.TakeHeld("ns/q"));
  EXPECT_FALSE(order.TakeHeld("ns/q"));
  // The channel announced the queue: every instance knows.
  order.Hold("ns/q");
  order.ClearHeld("ns/q");
  EXPECT_FALSE(order.TakeHeld("ns/q"));
  // A consume that found the queue empty after the held news: nothing left to announce.
  order.Hold("ns/q");
  order.News("ns/q");
  const uint64_t after = order.NewsCount(s);
  order.ClearHeld(s, {0}, after);
  EXPECT_FALSE(order.TakeHeld("ns/q"));
  // One begun before it: the held jobs may still be there.
  const uint64_t before = order.NewsCount(s);
  order.Hold("ns/q");
  order.News("ns/q");
  order.ClearHeld(s, {0}, before);
  EXPECT_TRUE(order.TakeHeld("ns/q"));
  // The last set naming the queue goes: so does its held news.
  order.Hold("ns/q");
  order.Release(s);
  QueueSet* again = Set(order, "q", {"q"});
  EXPECT_FALSE(order.TakeHeld("ns/q"));
  order.Release(again);
}

}  // namespace
}  // namespace deferq::queue
