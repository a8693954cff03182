// Waiters (queue/delivery/waiters.h) on a fake pool: which calls a CONSUME makes over several
// queues, how a parked consumer is woken, answered, timed out, and what happens to jobs leased
// for a client that left -- without Redis.
#include "queue/delivery/waiters.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz/job_parse_context.h"
#include "proto/reply_writer.h"
#include "unit/support/fake_pool.h"

namespace deferq::queue {
namespace {

using persist::Script;
using testing::FakePool;

// Where the consumers' replies go: each written reply appended to `out` (RESP2).
class RecordingPort final : public ClientPort {
 public:
  ReplyTicket Defer(bool) override { return {.slot = 1, .gen = 1, .seq = ++seq_, .client_id = 7}; }
  proto::ReplyWriter* Begin(const ReplyTicket&) override { return gone ? nullptr : &writer_; }
  void Finish(const ReplyTicket&) override { ++finished; }
  bool Connected(const ReplyTicket&) const override { return !gone; }

  std::string out;
  int finished = 0;
  bool gone = false;

 private:
  uint64_t seq_ = 0;
  proto::ReplyWriter writer_{&out, 2};
};

// consume.lua's answer: ready_left, then one job (K, payload, tries_left, ttl_left_s, attempt,
// created_ms).
std::string OneJob(int64_t ready_left, std::string_view payload) {
  return "*7\r\n:" + std::to_string(ready_left) + "\r\n$16\r\n0123456789abcdef\r\n$" +
         std::to_string(payload.size()) + "\r\n" + std::string(payload) +
         "\r\n:2\r\n:3600\r\n:1\r\n:1795000000000\r\n";
}

class WaitersTest : public ::testing::Test {
 protected:
  WaitersTest() {
    auto pool = std::make_unique<FakePool>();
    pool_ = pool.get();
    ctx_.worker().AddPool(std::move(pool));
    At(0);
  }

  Waiters& waiters() { return ctx_.worker().waiters(); }
  void At(int64_t ms) { ctx_.worker().SetClock(kMono + ms, kWall + ms); }

  // CONSUME <queues> [COUNT count] [TIMEOUT: deadline_ms after now, 0 forever] for client 7.
  std::shared_ptr<Waiter> Consume(std::vector<std::string_view> queues, bool block,
                                  int64_t deadline_ms = 0, int count = 0) {
    auto w = std::make_shared<Waiter>();
    w->port = &port_;
    w->ticket = port_.Defer(block);
    w->ns = "ns";
    w->ttr_ms = 30000;
    w->count = count;
    w->deadline_ms = deadline_ms > 0 ? kMono + deadline_ms : 0;
    waiters().Consume(w, queues, block);
    return w;
  }
  // The one call of `script` not answered yet.
  size_t PendingCall(Script script) const {
    size_t found = pool_->calls.size();
    for (size_t i = 0; i < pool_->calls.size(); ++i) {
      if (pool_->calls[i].script == script && !pool_->calls[i].answered) {
        EXPECT_EQ(found, pool_->calls.size()) << "more than one pending";
        found = i;
      }
    }
    EXPECT_LT(found, pool_->calls.size()) << "no pending call";
    return found;
  }
  // The markers (marks.lua) of the queues consumers block on: answered, so they stand.
  void AnswerMarks() {
    for (size_t i = 0; i < pool_->calls.size(); ++i) {
      if (pool_->calls[i].script == Script::kMarks && !pool_->calls[i].answered) {
        pool_->Answer(i, "*0\r\n");
      }
    }
  }

  static constexpr int64_t kMono = 1'000'000;
  static constexpr int64_t kWall = 1'795'000'000'000;
  Config cfg_;
  JobParseContext ctx_{cfg_};
  FakePool* pool_ = nullptr;
  RecordingPort port_;
};

TEST_F(WaitersTest, AConsumeOverThreeQueuesIsOneCallAndFindingNothingParksTheConsumer) {
  Consume({"a", "b", "c"}, /*block=*/true);
  ASSERT_EQ(pool_->Count(Script::kConsumes), 1u);
  EXPECT_EQ(pool_->Count(Script::kConsume), 0u);
  const FakePool::Call& call = pool_->calls[PendingCall(Script::kConsumes)];
  EXPECT_EQ(call.keys, (std::vector<std::string>{"dq:{ns/a}:", "dq:{ns/b}:", "dq:{ns/c}:"}));
  EXPECT_EQ(pool_->Count(Script::kMarks), 1u);  // its queues' markers: their news is announced
  pool_->Answer(PendingCall(Script::kConsumes), "*3\r\n:0\r\n:0\r\n:0\r\n");
  EXPECT_EQ(port_.finished, 0);
  EXPECT_EQ(waiters().blocked(), 1u);
}

TEST_F(WaitersTest, NewsOfOneQueueWakesTheParkedConsumerWithOneCallOnThatQueueOnly) {
  Consume({"a", "b", "c"}, true);
  AnswerMarks();
  pool_->Answer(PendingCall(Script::kConsumes), "*3\r\n:0\r\n:0\r\n:0\r\n");
  waiters().AnnounceReady("ns/b");
  ASSERT_EQ(pool_->Count(Script::kConsume), 1u);
  const size_t call = PendingCall(Script::kConsume);
  EXPECT_EQ(pool_->calls[call].keys, (std::vector<std::string>{"dq:{ns/b}:"}));
  pool_->Answer(call, OneJob(0, "hello"));
  EXPECT_EQ(port_.finished, 1);
  EXPECT_NE(port_.out.find("hello"), std::string::npos);
  EXPECT_EQ(waiters().blocked(), 0u);
}

TEST_F(WaitersTest, QueuesFoundEmptyCostNoCallForTheNextConsumerWhileTheirMarkersStand) {
  Consume({"a", "b", "c"}, true);
  AnswerMarks();
  pool_->Answer(PendingCall(Script::kConsumes), "*3\r\n:0\r\n:0\r\n:0\r\n");
  const size_t calls = pool_->calls.size();
  Consume({"a", "b", "c"}, true);  // a second consumer on the same queues
  EXPECT_EQ(pool_->calls.size(), calls);
  EXPECT_EQ(waiters().blocked(), 2u);
  // News wakes the oldest first; the one after it waits on.
  waiters().AnnounceReady("ns/c");
  pool_->Answer(PendingCall(Script::kConsume), OneJob(0, "first"));
  EXPECT_EQ(port_.finished, 1);
  EXPECT_EQ(waiters().blocked(), 1u);
}

TEST_F(WaitersTest, AConsumeThatDoesNotBlockReadsEveryQueueAndAnswersNullWhenAllAreEmpty) {
  Consume({"a", "b"}, /*block=*/false);
  ASSERT_EQ(pool_->Count(Script::kConsumes), 1u);
  EXPECT_EQ(pool_->Count(Script::kMarks), 0u);  // nobody waits: no markers
  pool_->Answer(PendingCall(Script::kConsumes), "*2\r\n:0\r\n:0\r\n");
  EXPECT_EQ(port_.finished, 1);
  EXPECT_EQ(port_.out, "*-1\r\n");  // a null array, as BLPOP answers at its timeout
  EXPECT_EQ(waiters().blocked(), 0u);
}

TEST_F(WaitersTest, AParkedConsumerIsAnsweredNullAtItsDeadline) {
  Consume({"a"}, true, /*deadline_ms=*/1000);
  pool_->Answer(PendingCall(Script::kConsume), "*1\r\n:0\r\n");
  At(999);
  waiters().Tick();
  EXPECT_EQ(port_.finished, 0);
  At(1000);
  waiters().Tick();
  EXPECT_EQ(port_.finished, 1);
  EXPECT_EQ(port_.out, "*-1\r\n");  // a null array, as BLPOP answers at its timeout
  EXPECT_EQ(waiters().blocked(), 0u);
}

TEST_F(WaitersTest, JobsLeasedForAClientThatLeftAreGivenBackAtOnce) {
  Consume({"a"}, true);
  const size_t call = PendingCall(Script::kConsume);
  waiters().OnClientGone(7);
  port_.gone = true;
  EXPECT_EQ(waiters().blocked(), 0u);
  pool_->Answer(call, OneJob(0, "orphan"));
  EXPECT_EQ(port_.finished, 0);
  ASSERT_EQ(pool_->Count(Script::kNack), 1u);  // nack.lua "undo": ready again, not counted
  const FakePool::Call& undo = pool_->calls[PendingCall(Script::kNack)];
  EXPECT_EQ(undo.keys, (std::vector<std::string>{"dq:{ns/a}:"}));
  ASSERT_EQ(undo.args.size(), 4u);
  EXPECT_EQ(undo.args[1], "0123456789abcdef");
  EXPECT_EQ(undo.args[3], "undo");
}

TEST_F(WaitersTest, ACountConsumerTakesJobsFromTheFirstQueuesInPriorityOrder) {
  Consume({"high", "low"}, /*block=*/false, 0, /*count=*/2);
  const size_t call = PendingCall(Script::kConsumes);
  EXPECT_EQ(pool_->calls[call].args[2], "2");  // COUNT: how many the call may lease
  // consumes.lua: ready_left per queue, then (queue index, six job fields) per job.
  const std::string job =
      "$16\r\n0123456789abcdef\r\n$1\r\nx\r\n:2\r\n:3600\r\n:1\r\n:1795000000000\r\n";
  pool_->Answer(call, "*16\r\n:0\r\n:5\r\n:1\r\n" + job + ":2\r\n" + job);
  EXPECT_EQ(port_.finished, 1);
  EXPECT_EQ(port_.out.rfind("*2\r\n", 0), 0u) << port_.out;  // an array of the two jobs
  EXPECT_NE(port_.out.find("high"), std::string::npos);
  EXPECT_NE(port_.out.find("low"), std::string::npos);
}

}  // namespace
}  // namespace deferq::queue
