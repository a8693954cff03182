#include "queue/delivery/timing_wheel.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <random>

namespace deferq::queue {
namespace {

TEST(TimingWheelTest, FiresAtTheDeadlineAndNotBefore) {
  TimingWheel w(1000);
  w.Schedule(1050, 7);
  std::vector<uint64_t> fired;
  w.Advance(1049, &fired);
  EXPECT_TRUE(fired.empty());
  EXPECT_EQ(w.NextWakeup(), 1050);
  w.Advance(1050, &fired);
  EXPECT_EQ(fired, std::vector<uint64_t>{7});
  EXPECT_EQ(w.size(), 0u);
  EXPECT_EQ(w.NextWakeup(), -1);
}

TEST(TimingWheelTest, PastDeadlineFiresOnNextAdvance) {
  TimingWheel w(5000);
  w.Schedule(10, 1);
  std::vector<uint64_t> fired;
  EXPECT_EQ(w.NextWakeup(), 5000);
  w.Advance(5000, &fired);
  EXPECT_EQ(fired, std::vector<uint64_t>{1});
}

TEST(TimingWheelTest, CancelIsExactAndStaleIdsDoNothing) {
  TimingWheel w(0);
  auto a = w.Schedule(100, 1);
  auto b = w.Schedule(100, 2);
  EXPECT_TRUE(w.Cancel(a));
  EXPECT_FALSE(w.Cancel(a));
  std::vector<uint64_t> fired;
  w.Advance(100, &fired);
  EXPECT_EQ(fired, std::vector<uint64_t>{2});
  EXPECT_FALSE(w.Cancel(b));    // already fired
  auto c = w.Schedule(300, 3);  // may reuse a freed node
  EXPECT_FALSE(w.Cancel(a));
  EXPECT_TRUE(w.Cancel(c));
}

TEST(TimingWheelTest, NextWakeupSkipsEmptySlotsToTheCascadeOrDeadline) {
  TimingWheel w(0);
  w.Schedule(1'000'000, 1);  // ~17 minutes: level 2
  // The wheel wakes at the start of the block holding the timer, not every millisecond.
  const int64_t first = w.NextWakeup();
  EXPECT_GT(first, 0);
  EXPECT_LE(first, 1'000'000);
  std::vector<uint64_t> fired;
  int wakeups = 0;
  for (int64_t t = w.NextWakeup(); t != -1 && wakeups < 100; t = w.NextWakeup()) {
    w.Advance(t, &fired);
    ++wakeups;
  }
  EXPECT_EQ(fired, std::vector<uint64_t>{1});
  EXPECT_EQ(w.now(), 1'000'000);
  EXPECT_LE(wakeups, 5);  // one per level it cascades through, plus the expiry
}

TEST(TimingWheelTest, TimeJumpFiresEverythingDueInDeadlineOrder) {
  TimingWheel w(0);
  w.Schedule(5, 5);
  w.Schedule(70'000, 70);
  w.Schedule(3'000, 3);
  w.Schedule(20'000'000, 20);
  w.Schedule(300, 1);
  std::vector<uint64_t> fired;
  w.Advance(10'000'000'000LL, &fired);  // the clock jumped by months
  EXPECT_EQ(fired, (std::vector<uint64_t>{5, 1, 3, 70, 20}));
  EXPECT_EQ(w.size(), 0u);
}

TEST(TimingWheelTest, TimersBeyondTheTopLevelSpanStillFireExactly) {
  TimingWheel w(0);
  const int64_t far = (int64_t{1} << 33) + 12345;  // ~99 days
  w.Schedule(far, 9);
  std::vector<uint64_t> fired;
  w.Advance(far - 1, &fired);
  EXPECT_TRUE(fired.empty());
  w.Advance(far, &fired);
  EXPECT_EQ(fired, std::vector<uint64_t>{9});
}

// Random schedules, cancels and advances (small steps and big jumps) against a sorted map.
TEST(TimingWheelTest, MatchesAReferenceUnderRandomOperations) {
  std::mt19937_64 rng(42);
  TimingWheel w(1'000'000);
  std::multimap<int64_t, uint64_t> ref;  // deadline -> value
  std::map<uint64_t, std::pair<TimingWheel::TimerId, int64_t>> live;
  int64_t now = 1'000'000;
  uint64_t next_value = 1;
  for (int step = 0; step < 20000; ++step) {
    const int op = static_cast<int>(rng() % 10);
    if (op < 5) {
      const int64_t spans[] = {10, 300, 20'000, 2'000'000, 200'000'000};
      const int64_t d = now - 5 + static_cast<int64_t>(rng() % spans[rng() % 5]);
      const uint64_t v = next_value++;
      live[v] = {w.Schedule(d, v), std::max(d, now)};
      ref.emplace(std::max(d, now), v);
    } else if (op < 7 && !live.empty()) {
      auto it = live.begin();
      std::advance(it, static_cast<long>(rng() % live.size()));
      ASSERT_TRUE(w.Cancel(it->second.first));
      auto range = ref.equal_range(it->second.second);
      for (auto r = range.first; r != range.second; ++r) {
        if (r->second == it->first) {
          ref.erase(r);
          break;
        }
      }
      live.erase(it);
    } else {
      now += (rng() % 20 == 0) ? static_cast<int64_t>(rng() % 50'000'000) : rng() % 700;
      std::vector<uint64_t> fired;
      w.Advance(now, &fired);
      std::vector<uint64_t> expected;
      while (!ref.empty() && ref.begin()->first <= now) {
        expected.push_back(ref.begin()->second);
        live.erase(ref.begin()->second);
        ref.erase(ref.begin());
      }
      std::sort(fired.begin(), fired.end());
      std::sort(expected.begin(), expected.end());
      ASSERT_EQ(fired, expected) << "at step " << step << " now " << now;
    }
    ASSERT_EQ(w.size(), ref.size());
    if (!ref.empty()) {
      // Never sleeps past the earliest deadline.
      ASSERT_LE(w.NextWakeup(), std::max(ref.begin()->first, now));
    }
  }
}

TEST(TimingWheelTest, MillionsOfTimersInsertCancelAndFireQuickly) {
  constexpr int kTimers = 2'000'000;
  TimingWheel w(0);
  std::mt19937_64 rng(7);
  std::vector<TimingWheel::TimerId> ids;
  ids.reserve(kTimers);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kTimers; ++i) {
    ids.push_back(w.Schedule(static_cast<int64_t>(rng() % 3'600'000), static_cast<uint64_t>(i)));
  }
  for (int i = 0; i < kTimers; i += 2) ASSERT_TRUE(w.Cancel(ids[i]));
  std::vector<uint64_t> fired;
  fired.reserve(kTimers / 2);
  for (int64_t t = w.NextWakeup(); t != -1; t = w.NextWakeup()) w.Advance(t, &fired);
  const auto elapsed = std::chrono::steady_clock::now() - t0;
  EXPECT_EQ(fired.size(), static_cast<size_t>(kTimers / 2));
  for (uint64_t v : fired) ASSERT_EQ(v % 2, 1u);
  // Generous bound (a shared 2-core machine); typically well under a second.
  EXPECT_LT(std::chrono::duration_cast<std::chrono::seconds>(elapsed).count(), 20);
}

}  // namespace
}  // namespace deferq::queue
