// The rate limiter's arithmetic (queue/tenancy/rate_limiter.h): slice sizes, taking tokens and
// credit, when a lease is asked for, and what a lease's answer grants. The Redis side (INCRBY
// counters shared by instances) is tested end to end in tests/limits.
#include "queue/tenancy/rate_limiter.h"

#include <gtest/gtest.h>

namespace deferq::queue {
namespace {

TEST(RateLimiterTest, SliceIsATwentiethOfTheLimitRoundedUpAndAtLeastOne) {
  EXPECT_EQ(RateLimiter::Slice(1), 1);
  EXPECT_EQ(RateLimiter::Slice(19), 1);
  EXPECT_EQ(RateLimiter::Slice(20), 1);
  EXPECT_EQ(RateLimiter::Slice(21), 2);
  EXPECT_EQ(RateLimiter::Slice(100), 5);
  EXPECT_EQ(RateLimiter::Slice(1000000), 50000);
}

TEST(RateBucketTest, TokensAreTakenFirstThenAtMostOneSliceOnCredit) {
  RateBucket b;
  b.StartSecond(100);
  b.tokens = 3;
  // Limit 100: slice 5. 3 tokens, then 5 on credit; nothing more until a lease answers.
  EXPECT_EQ(b.Take(100, 10), 8);
  EXPECT_EQ(b.tokens, 0);
  EXPECT_EQ(b.debt, 5);
  EXPECT_EQ(b.Take(100, 1), 0);
  EXPECT_EQ(b.debt, 5);
}

TEST(RateBucketTest, NoCreditOnceTheBudgetIsGoneOrNearlyGone) {
  RateBucket exhausted;
  exhausted.exhausted = true;
  EXPECT_EQ(exhausted.Take(100, 1), 0);
  RateBucket low;
  low.left = 24;  // under a quarter of 100 left after the last lease
  EXPECT_EQ(low.Take(100, 1), 0);
  low.left = 25;
  EXPECT_EQ(low.Take(100, 1), 1);
  EXPECT_EQ(low.debt, 1);
}

TEST(RateBucketTest, ANewSecondDropsTokensAndExhaustionButKeepsDebt) {
  RateBucket b;
  b.StartSecond(7);
  b.tokens = 4;
  b.exhausted = true;
  b.left = 0;
  b.debt = 2;
  b.StartSecond(7);  // the same second: nothing changes
  EXPECT_EQ(b.tokens, 4);
  EXPECT_TRUE(b.exhausted);
  b.StartSecond(8);
  EXPECT_EQ(b.sec, 8);
  EXPECT_EQ(b.tokens, 0);
  EXPECT_FALSE(b.exhausted);
  EXPECT_EQ(b.left, -1);
  EXPECT_EQ(b.debt, 2);  // still owed: charged by the next lease
}

TEST(RateBucketTest, ALeaseIsWantedForDebtOrAtHalfASliceAndNeverTwice) {
  RateBucket b;  // limit 100: slice 5, half a slice 2
  b.tokens = 3;
  EXPECT_FALSE(b.WantsLease(100));
  b.tokens = 2;
  EXPECT_TRUE(b.WantsLease(100));
  b.tokens = 5;
  b.debt = 1;
  EXPECT_TRUE(b.WantsLease(100));
  b.lease_in_flight = true;
  EXPECT_FALSE(b.WantsLease(100));
  b.lease_in_flight = false;
  b.exhausted = true;
  EXPECT_FALSE(b.WantsLease(100));
}

TEST(RateBucketTest, AnsweredLeaseGrantsTheSliceWhileTheBudgetLasts) {
  RateBucket b;
  // Limit 100, slice 5: the counter holds 5 after this lease, 95 left.
  EXPECT_FALSE(b.Granted(100, 5, 5));  // 5 tokens: over half a slice, no next lease
  EXPECT_EQ(b.tokens, 5);
  EXPECT_EQ(b.left, 95);
  EXPECT_FALSE(b.exhausted);
}

TEST(RateBucketTest, AnsweredLeaseAsksAgainWhileDebtIsOwed) {
  RateBucket b;
  b.debt = 4;  // owed since the lease was sent: charged by the next one
  // The counter holds 98 after a lease of 5 that charged 3 earlier debt: 7 left, slice granted.
  EXPECT_TRUE(b.Granted(100, 5, 98));
  EXPECT_EQ(b.tokens, 5);
  EXPECT_EQ(b.left, 2);
}

TEST(RateBucketTest, AnsweredLeasePastTheBudgetGrantsTheRestAndMarksItGone) {
  RateBucket b;
  b.debt = 3;
  // The counter holds 102 after a lease of 5: only 3 of the slice were left.
  EXPECT_FALSE(b.Granted(100, 5, 102));
  EXPECT_EQ(b.tokens, 3);
  EXPECT_TRUE(b.exhausted);
  EXPECT_EQ(b.debt, 0);  // the counter is over the budget already: nothing more to charge
  EXPECT_EQ(b.left, 0);
  EXPECT_EQ(b.Take(100, 10), 3);  // the tokens, and no credit
  // Another instance took everything: nothing granted.
  RateBucket none;
  EXPECT_FALSE(none.Granted(100, 5, 140));
  EXPECT_EQ(none.tokens, 0);
  EXPECT_TRUE(none.exhausted);
}

}  // namespace
}  // namespace deferq::queue
