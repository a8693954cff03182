// MULTI / EXEC (queue/commands/transaction.h) on a fake pool: the order of the calls an EXEC
// makes and of the replies it collects, whatever order Redis answers in -- without Redis.
#include "queue/commands/transaction.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz/job_parse_context.h"
#include "queue/commands/commands.h"
#include "unit/support/fake_pool.h"

namespace deferq::queue {
namespace {

using persist::Script;
using testing::FakePool;

// peek.lua's answer: one job (K, payload, tries_left, ttl_left_s, attempt, created_ms).
constexpr std::string_view kOneJob =
    "*6\r\n$16\r\n0123456789abcdef\r\n$5\r\nhello\r\n:2\r\n:3600\r\n:0\r\n"
    ":1795000000000\r\n";

class TransactionTest : public ::testing::Test {
 protected:
  TransactionTest() {
    auto pool = std::make_unique<FakePool>();
    pool_ = pool.get();
    ctx_.worker().AddPool(std::move(pool));
    ctx_.ctx().dispatch = &Dispatch;
  }

  // Runs one command; returns what it answered at once ("" when its reply is deferred).
  std::string Run(std::vector<std::string_view> args) {
    Dispatch(ctx_.ctx(), args);
    std::string out = ctx_.TakeOut();
    return out;
  }
  std::vector<Script> Scripts() const {
    std::vector<Script> s;
    for (const FakePool::Call& c : pool_->calls) s.push_back(c.script);
    return s;
  }

  Config cfg_;
  JobParseContext ctx_{cfg_};
  FakePool* pool_ = nullptr;
};

TEST_F(TransactionTest,
       ExecSendsEveryCommandAtOnceAndAnswersInQueuedOrderWhateverOrderRedisAnswers) {
  EXPECT_EQ(Run({"MULTI"}), "+OK\r\n");
  EXPECT_EQ(Run({"PEEK", "a"}), "+QUEUED\r\n");
  EXPECT_EQ(Run({"PEEK", "b"}), "+QUEUED\r\n");
  EXPECT_TRUE(pool_->calls.empty());  // nothing runs before EXEC
  EXPECT_EQ(Run({"EXEC"}), "");
  ASSERT_EQ(pool_->calls.size(), 2u);  // both sent, neither waiting for the other
  EXPECT_EQ(pool_->calls[0].keys[0], "dq:{default/a}:");
  EXPECT_EQ(pool_->calls[1].keys[0], "dq:{default/b}:");
  pool_->Fail(1, "TRYAGAIN pool 'default' unavailable");
  EXPECT_EQ(ctx_.deferred_finished(), 0);  // the array waits for every reply
  pool_->Answer(0, kOneJob);
  EXPECT_EQ(ctx_.deferred_finished(), 1);
  const std::string reply = ctx_.TakeDeferred();
  EXPECT_EQ(reply.rfind("*2\r\n", 0), 0u) << reply;
  // a's job first, then b's failure as its element: one failed command fails only itself.
  const size_t a = reply.find("hello"), b = reply.find("-TRYAGAIN");
  EXPECT_NE(a, std::string::npos) << reply;
  EXPECT_NE(b, std::string::npos) << reply;
  EXPECT_LT(a, b);
}

TEST_F(TransactionTest, ARefusedCommandAbortsTheExecAndNothingIsSent) {
  EXPECT_EQ(Run({"MULTI"}), "+OK\r\n");
  EXPECT_EQ(Run({"PUBLISH", "q", "payload"}), "+QUEUED\r\n");
  EXPECT_EQ(Run({"PUBLISH", "q", "payload", "DELAY", "soon"}).rfind("-ERR", 0), 0u);
  EXPECT_EQ(Run({"EXEC"}).rfind("-EXECABORT", 0), 0u);
  EXPECT_TRUE(pool_->calls.empty());
  EXPECT_EQ(Run({"QSTAT", "q"}), "");  // the connection is out of the transaction
  EXPECT_EQ(pool_->calls.size(), 1u);
}

TEST_F(TransactionTest, DiscardDropsTheQueuedCommands) {
  Run({"MULTI"});
  Run({"QSTAT", "q"});
  EXPECT_EQ(Run({"DISCARD"}), "+OK\r\n");
  EXPECT_EQ(Run({"EXEC"}).rfind("-ERR EXEC without MULTI", 0), 0u);
  EXPECT_TRUE(pool_->calls.empty());
}

TEST_F(TransactionTest, ACommandOfSeveralStepsWaitsForTheRepliesBeforeItAndHoldsTheOnesAfter) {
  Run({"MULTI"});
  Run({"PEEK", "a"});
  Run({"CONSUME", "a", "b"});  // multi-step: its steps depend on what is in Redis
  Run({"PEEK", "c"});
  Run({"EXEC"});
  ASSERT_EQ(pool_->calls.size(), 1u);  // the CONSUME waits for the PEEK before it
  pool_->Answer(0, "*0\r\n");
  ASSERT_EQ(pool_->Count(Script::kConsumes), 1u);
  EXPECT_EQ(pool_->Count(Script::kPeek), 1u);  // the PEEK after it waits for it
  pool_->Answer(pool_->Last(Script::kConsumes), "*2\r\n:0\r\n:0\r\n");
  ASSERT_EQ(pool_->Count(Script::kPeek), 2u);  // only now
  const size_t peek_c = pool_->Last(Script::kPeek);
  EXPECT_EQ(pool_->calls[peek_c].keys[0], "dq:{default/c}:");
  EXPECT_EQ(ctx_.deferred_finished(), 0);
  pool_->Answer(peek_c, kOneJob);
  EXPECT_EQ(ctx_.deferred_finished(), 1);
  // PEEK a: no jobs; CONSUME: nothing ready (a null array); PEEK c: its job.
  const std::string reply = ctx_.TakeDeferred();
  EXPECT_EQ(reply.rfind("*3\r\n*0\r\n*-1\r\n", 0), 0u) << reply;
  EXPECT_NE(reply.find("hello"), std::string::npos) << reply;
}

}  // namespace
}  // namespace deferq::queue
