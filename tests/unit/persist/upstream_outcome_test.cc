// What became of an upstream call, read once from the texts persist makes
// (persist/upstream_link.h).
#include <gtest/gtest.h>

#include "persist/upstream_link.h"
#include "unit/support/resp.h"

namespace deferq::persist {
namespace {

TEST(UpstreamOutcomeTest, EachFailureTextHasItsKind) {
  auto none = [](std::string_view error) { return OutcomeOf(UpstreamResult{nullptr, error}); };
  EXPECT_EQ(none("TRYAGAIN pool 'p' unavailable"), UpstreamOutcome::kNotSent);
  EXPECT_EQ(none("TRYAGAIN pool 'p' unavailable: the node is no longer the master"),
            UpstreamOutcome::kNotSent);
  EXPECT_EQ(none("TIMEOUT pool 'p' did not answer: the command may have been applied"),
            UpstreamOutcome::kTimedOut);
  EXPECT_EQ(none("NOREPLICAS pool 'p': 0 of 1 replicas"), UpstreamOutcome::kUnreplicated);
  EXPECT_EQ(none("OOM pool 'p' is full"), UpstreamOutcome::kRefused);
  EXPECT_EQ(none("MISCONF pool 'p' cannot persist"), UpstreamOutcome::kRefused);
  EXPECT_EQ(none("ERR unexpected reply from storage"), UpstreamOutcome::kUnexpected);
  // Only what was surely not applied may be sent again.
  EXPECT_TRUE(NotApplied(UpstreamResult{nullptr, "TRYAGAIN pool 'p' unavailable"}));
  EXPECT_TRUE(NotApplied(UpstreamResult{nullptr, "OOM pool 'p' is full"}));
  EXPECT_FALSE(NotApplied(UpstreamResult{nullptr, "TIMEOUT pool 'p' did not answer"}));
  EXPECT_FALSE(NotApplied(UpstreamResult{nullptr, "NOREPLICAS pool 'p': 0 of 1"}));
}

TEST(UpstreamOutcomeTest, AnyReplyIsAReplyEvenAnErrorOne) {
  auto error = testing::ParseResp("-TRYAGAIN Multiple keys request during rehashing\r\n");
  EXPECT_EQ(OutcomeOf(UpstreamResult{error.get(), {}}), UpstreamOutcome::kReply);
  EXPECT_EQ(FailureOf(UpstreamResult{error.get(), {}}),
            "TRYAGAIN Multiple keys request during rehashing");
  auto ok = testing::ParseResp("+OK\r\n");
  EXPECT_EQ(OutcomeOf(UpstreamResult{ok.get(), {}}), UpstreamOutcome::kReply);
  EXPECT_EQ(FailureOf(UpstreamResult{ok.get(), {}}), "");
}

}  // namespace
}  // namespace deferq::persist
