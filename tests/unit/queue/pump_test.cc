// Pump and PumpOwnership (queue/delivery/pump.h) on a fake pool: when pump calls leave, what they
// carry, and what the pump does with each answer -- without Redis. The clock is the test's:
// SetClock moves the monotonic and the wall ms, RunTimers fires what the wheel holds.
#include "queue/delivery/pump.h"

#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <string>

#include "fuzz/job_parse_context.h"
#include "unit/support/fake_pool.h"

namespace deferq::queue {
namespace {

using persist::Script;
using testing::FakePool;
using testing::RespInts;

constexpr const char* kTag = "ns/orders";

class PumpTest : public ::testing::Test {
 protected:
  PumpTest() {
    auto pool = std::make_unique<FakePool>();
    pool_ = pool.get();
    worker().AddPool(std::move(pool));
    At(0);
  }

  Worker& worker() { return ctx_.worker(); }
  Pump& pump() { return worker().pump(); }
  // The test's clock: `ms` after the start, the wall clock ahead of the monotonic one by kSkew.
  void At(int64_t ms, int64_t wall_lag = 0) {
    worker().SetClock(kMono + ms, kWall + ms - wall_lag);
  }
  int64_t Wall(int64_t ms) const { return kWall + ms; }
  // Fires due timers at `ms`; returns how many pump calls have been made so far.
  size_t RunAt(int64_t ms, int64_t wall_lag = 0) {
    At(ms, wall_lag);
    pump().RunTimers();
    return pool_->Count(Script::kPump);
  }
  size_t LastCall() const { return pool_->calls.size() - 1; }
  void Own() { ctx_.flags().pump_owner(0).store(true); }

  static constexpr int64_t kMono = 1'000'000;
  static constexpr int64_t kWall = 1'795'000'000'000;
  Config cfg_;
  JobParseContext ctx_{cfg_};
  FakePool* pool_ = nullptr;
};

TEST_F(PumpTest, CallsAtTheDueWallMsNotBeforeWithTheQueueKeyAndTheWallClock) {
  pump().OnQueueSeen(kTag, Wall(50));
  EXPECT_EQ(pump().timers(), 1u);
  EXPECT_EQ(RunAt(49), 0u);
  EXPECT_EQ(RunAt(50), 1u);
  const FakePool::Call& call = pool_->calls.back();
  ASSERT_EQ(call.keys.size(), 1u);
  EXPECT_EQ(call.keys[0], "dq:{ns/orders}:");
  ASSERT_GE(call.args.size(), 5u);
  EXPECT_EQ(call.args[0], std::to_string(Wall(50)));  // pump.lua's now: the wall ms
  EXPECT_EQ(call.args[4], "0");  // nobody waits here: no job is held for a consumer
  EXPECT_EQ(pump().timers(), 0u);
}

TEST_F(PumpTest, AnEarlierDueTimeReplacesALaterTimerAndALaterOneDoesNot) {
  pump().OnQueueSeen(kTag, Wall(80));
  pump().OnQueueSeen(kTag, Wall(30));
  pump().OnQueueSeen(kTag, Wall(60));
  EXPECT_EQ(pump().timers(), 1u);
  EXPECT_EQ(RunAt(29), 0u);
  EXPECT_EQ(RunAt(30), 1u);
}

TEST_F(PumpTest, ATimerFiringInTheWallMsBeforeItsDueMsWaitsWithoutACall) {
  // The wheel runs on the monotonic clock and jobs on the wall clock: at monotonic +10 the wall
  // clock may still be in the ms before the job's.
  pump().OnQueueSeen(kTag, Wall(10));
  EXPECT_EQ(RunAt(10, /*wall_lag=*/1), 0u);
  EXPECT_EQ(pump().timers(), 1u);  // re-armed a ms on, no call spent
  EXPECT_EQ(RunAt(11, /*wall_lag=*/1), 1u);
}

TEST_F(PumpTest, TheNextDueTimeIsFollowedByThePoolsOwnerOnly) {
  pump().OnQueueSeen(kTag, Wall(0));
  ASSERT_EQ(RunAt(0), 1u);
  pool_->Answer(LastCall(), RespInts({1, 0, Wall(40)}));
  EXPECT_EQ(pump().timers(), 0u);  // not the owner: the owner's due-index poll finds it

  Own();
  pump().OnQueueSeen(kTag, Wall(1));
  ASSERT_EQ(RunAt(1), 2u);
  pool_->Answer(LastCall(), RespInts({1, 0, Wall(40)}));
  EXPECT_EQ(pump().timers(), 1u);
  EXPECT_EQ(RunAt(39), 2u);
  EXPECT_EQ(RunAt(40), 3u);
}

TEST_F(PumpTest, ANextDueBeyondTheHorizonIsLeftToTheDueIndex) {
  Own();
  pump().OnQueueSeen(kTag, Wall(0));
  ASSERT_EQ(RunAt(0), 1u);
  pool_->Answer(LastCall(), RespInts({0, 0, Wall(DueHorizonMs(cfg_.sweep_ms) + 1)}));
  EXPECT_EQ(pump().timers(), 0u);
}

TEST_F(PumpTest, MoreWorkDuePumpsAgainAtOnceSixteenTimesThenWaitsForALaterMs) {
  pump().OnQueueSeen(kTag, Wall(0));
  ASSERT_EQ(RunAt(0), 1u);
  // Each answer says more is due (a backlog): the next call leaves from the callback.
  for (int i = 0; i < 16; ++i) pool_->Answer(LastCall(), RespInts({1000, 1, -1}));
  EXPECT_EQ(pool_->Count(Script::kPump), 17u);
  pool_->Answer(LastCall(), RespInts({1000, 1, -1}));
  EXPECT_EQ(pool_->Count(Script::kPump), 17u);  // not a 18th in a row
  EXPECT_EQ(pump().timers(), 1u);
  EXPECT_EQ(pool_->Pending(), 0u);
  // A busy queue (1,000 a call) waits a few ms, so due times close together share one call.
  EXPECT_EQ(RunAt(0), 17u);
  EXPECT_EQ(RunAt(5), 18u);
}

TEST_F(PumpTest, AQueueKeptForABusySpellIsForgottenOnceItEndsAndAWaitingTimerIsKept) {
  pump().OnQueueSeen("ns/later", Wall(3600 * 1000));  // armed an hour ahead
  pump().OnQueueSeen(kTag, Wall(0));
  ASSERT_EQ(RunAt(0), 1u);
  pool_->Answer(LastCall(), RespInts({1000, 1, -1}));  // more due: again at once
  pool_->Answer(LastCall(), RespInts({1000, 0, -1}));  // busy: kept for a few quiet ms
  EXPECT_EQ(pool_->Pending(), 0u);
  EXPECT_EQ(pump().timers(), 1u);   // only the hour-ahead one
  EXPECT_EQ(pump().tracked(), 2u);  // the busy queue, kept for its spell, and the waiting one
  At(2000);
  pump().Tick();  // the spell has ended: forgotten; the waiting timer is left alone
  EXPECT_EQ(pump().tracked(), 1u);
  EXPECT_EQ(pump().timers(), 1u);
  EXPECT_EQ(RunAt(3600 * 1000), 3u);
}

TEST_F(PumpTest, ADueTimeArrivingWhileACallIsInFlightPumpsOnceTheCallAnswers) {
  pump().OnQueueSeen(kTag, Wall(0));
  ASSERT_EQ(RunAt(0), 1u);
  pump().OnQueueSeen(kTag, Wall(1));
  EXPECT_EQ(RunAt(1), 1u);  // one call per queue at a time
  pool_->Answer(LastCall(), RespInts({1, 0, -1}));
  EXPECT_EQ(pool_->Count(Script::kPump), 2u);  // the one it owed, at once
  pool_->Answer(LastCall(), RespInts({0, 0, -1}));
  EXPECT_EQ(pool_->Count(Script::kPump), 2u);
  EXPECT_EQ(pump().timers(), 0u);
}

TEST_F(PumpTest, AFailedCallIsNotRetriedInALoopAndTheQueueCanBePumpedAgain) {
  Own();
  pump().OnQueueSeen(kTag, Wall(0));
  ASSERT_EQ(RunAt(0), 1u);
  pool_->Fail(LastCall(), "TRYAGAIN pool 'default' unavailable");
  EXPECT_EQ(pool_->Count(Script::kPump), 1u);
  EXPECT_EQ(pump().timers(), 0u);  // the owner's next due-index poll finds the work again
  pump().OnQueueSeen(kTag, Wall(3));
  EXPECT_EQ(RunAt(3), 2u);  // not stuck as "in flight"
}

TEST_F(PumpTest, AnAnswerOfAnotherShapeIsIgnored) {
  Own();
  pump().OnQueueSeen(kTag, Wall(0));
  ASSERT_EQ(RunAt(0), 1u);
  pool_->Answer(LastCall(), "-ERR something else\r\n");
  pump().OnQueueSeen(kTag, Wall(2));
  EXPECT_EQ(RunAt(2), 2u);
}

TEST_F(PumpTest, OwnershipRenewsItsLeaseThenPumpsEveryRegisteredQueue) {
  pump().Tick();  // thread 0: the pool's ownership renews its lease first
  ASSERT_EQ(pool_->Count(Script::kOwn), 1u);
  const FakePool::Call& own = pool_->calls.back();
  ASSERT_EQ(own.args.size(), 2u);
  EXPECT_EQ(own.args[0], ctx_.instance_id());
  EXPECT_EQ(own.args[1], std::to_string(kPumpLeaseMs));
  EXPECT_FALSE(ctx_.flags().pump_owner(0).load());
  pool_->Answer(LastCall(), ":1\r\n");
  EXPECT_TRUE(ctx_.flags().pump_owner(0).load());
  // A new owner pumps every registered queue once: work may have fallen due meanwhile.
  ASSERT_EQ(pool_->registry_reads.size(), 1u);
  EXPECT_EQ(pool_->registry_reads[0].cursor, "0");
  persist::RegistryRead page{.error = "", .tags = {"ns/a", "ns/b"}, .cursor = "7"};
  pool_->registry_reads[0].cb(page);
  ASSERT_EQ(pool_->registry_reads.size(), 2u);  // the next page, from its cursor
  EXPECT_EQ(pool_->registry_reads[1].cursor, "7");
  persist::RegistryRead last{.error = "", .tags = {"ns/c"}, .cursor = "0"};
  pool_->registry_reads[1].cb(last);
  EXPECT_EQ(pool_->registry_reads.size(), 2u);
  EXPECT_EQ(RunAt(0), 3u);
  std::set<std::string> pumped;
  for (const FakePool::Call& c : pool_->calls) {
    if (c.script == Script::kPump) pumped.insert(c.keys[0]);
  }
  EXPECT_EQ(pumped, (std::set<std::string>{"dq:{ns/a}:", "dq:{ns/b}:", "dq:{ns/c}:"}));
  // A renewal answered 0 (another instance holds the lease) ends the ownership.
  At(kPumpLeaseRenewMs);
  pump().Tick();
  ASSERT_EQ(pool_->Count(Script::kOwn), 2u);
  pool_->Answer(pool_->Last(Script::kOwn), ":0\r\n");
  EXPECT_FALSE(ctx_.flags().pump_owner(0).load());
}

TEST_F(PumpTest, TheOwnerPollsTheDueIndexWithinTheHorizonAndPumpsEachQueueAtItsTime) {
  Own();
  pump().Tick();
  pool_->Answer(LastCall(), ":1\r\n");  // still the owner: no registry walk
  EXPECT_TRUE(pool_->registry_reads.empty());
  ASSERT_EQ(pool_->due_reads.size(), 1u);
  EXPECT_EQ(pool_->due_reads[0].max_ms, Wall(DueHorizonMs(cfg_.sweep_ms)));
  pump().Tick();  // one poll at a time
  EXPECT_EQ(pool_->due_reads.size(), 1u);
  persist::DueRead due{.error = "", .entries = {{"ns/a", Wall(20)}, {"ns/b", Wall(70)}}};
  pool_->due_reads[0].cb(due);
  EXPECT_EQ(pump().timers(), 2u);
  EXPECT_EQ(RunAt(20), 1u);
  EXPECT_EQ(pool_->calls.back().keys[0], "dq:{ns/a}:");
  EXPECT_EQ(RunAt(69), 1u);
  EXPECT_EQ(RunAt(70), 2u);
  // The next poll waits for the sweep interval.
  At(cfg_.sweep_ms - 1);
  pump().Tick();
  EXPECT_EQ(pool_->due_reads.size(), 1u);
}

TEST_F(PumpTest, WithoutTheWheelOnlyWhatIsDueNowIsPumped) {
  Config no_wheel;
  no_wheel.wheel = false;
  JobParseContext ctx(no_wheel);
  auto pool = std::make_unique<FakePool>();
  FakePool* fake = pool.get();
  ctx.worker().AddPool(std::move(pool));
  ctx.worker().SetClock(kMono, kWall);
  ctx.worker().pump().OnQueueSeen(kTag, kWall + 10);
  EXPECT_EQ(fake->Count(Script::kPump), 0u);
  EXPECT_EQ(ctx.worker().pump().timers(), 0u);
  ctx.worker().pump().OnQueueSeen(kTag, kWall);
  EXPECT_EQ(fake->Count(Script::kPump), 1u);
}

}  // namespace
}  // namespace deferq::queue
