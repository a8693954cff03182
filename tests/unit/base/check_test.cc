// DQ_CHECK / DQ_DCHECK: a failed check logs one fatal line naming the condition and aborts.
#include "base/check.h"

#include <gtest/gtest.h>

namespace deferq::base {
namespace {

class CheckDeathTest : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

TEST_F(CheckDeathTest, AFailedCheckLogsTheConditionFileAndLineThenAborts) {
  const int two = 2;
  EXPECT_DEATH(DQ_CHECK(two + two == 5),
               R"(Z F check failed: two \+ two == 5 at .*check_test\.cc:[0-9]+)");
}

TEST_F(CheckDeathTest, ACheckWithAMessageAddsIt) {
  const int slot = 7;
  EXPECT_DEATH(DQ_CHECK_MSG(slot < 4, "slot %d of %d", slot, 4),
               R"(F check failed: slot < 4 at .*check_test\.cc:[0-9]+: slot 7 of 4)");
}

TEST(CheckTest, APassingCheckEvaluatesItsConditionOnceAndContinues) {
  int evaluated = 0;
  DQ_CHECK(++evaluated == 1);
  DQ_CHECK_MSG(++evaluated == 2, "%s", "unused");
  EXPECT_EQ(evaluated, 2);
}

#ifdef NDEBUG
TEST(CheckTest, DcheckIsNotEvaluatedWhenNdebugIsSet) {
  int evaluated = 0;
  DQ_DCHECK(++evaluated == 100);
  EXPECT_EQ(evaluated, 0);
}
#else
TEST_F(CheckDeathTest, DcheckIsACheckWhenNdebugIsNotSet) {
  int evaluated = 0;
  DQ_DCHECK(++evaluated == 1);
  EXPECT_EQ(evaluated, 1);
  EXPECT_DEATH(DQ_DCHECK(evaluated == 0), R"(F check failed: evaluated == 0)");
}
#endif

}  // namespace
}  // namespace deferq::base
