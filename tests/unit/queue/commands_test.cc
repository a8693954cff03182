// The command table and the helpers handlers share: integers read as Redis reads them
// (docs/commands.md, errors and limits:
// "-0" is not a number), and which commands run at once inside MULTI.
#include "queue/commands/commands.h"

#include <gtest/gtest.h>

#include <string>

namespace deferq::queue {
namespace {

TEST(CommandsTest, ParseIntegerAcceptsWhatRedisAccepts) {
  const std::pair<const char*, int64_t> good[] = {{"0", 0},
                                                  {"1", 1},
                                                  {"-1", -1},
                                                  {"65535", 65535},
                                                  {"9223372036854775807", INT64_MAX},
                                                  {"-9223372036854775808", INT64_MIN}};
  for (const auto& [text, want] : good) {
    int64_t v = 12345;
    EXPECT_TRUE(ParseInteger(text, &v)) << text;
    EXPECT_EQ(v, want) << text;
  }
}

TEST(CommandsTest, ParseIntegerRefusesNegativeZeroLeadingZerosSignsAndSpaces) {
  for (const char* text : {"-0", "00", "007", "-007", "+1", " 1", "1 ", "", "-", "1.0", "1e3",
                           "0x10", "9223372036854775808", "-9223372036854775809", "١"}) {
    int64_t v = 0;
    EXPECT_FALSE(ParseInteger(text, &v)) << "'" << text << "'";
  }
}

TEST(CommandsTest, TransactionControlRunsAtOnceInsideMultiAndJobCommandsAreChecked) {
  for (const char* name : {"multi", "exec", "discard", "watch", "unwatch", "quit", "reset"}) {
    const CommandSpec* spec = FindCommand(name);
    ASSERT_NE(spec, nullptr) << name;
    EXPECT_TRUE(spec->immediate) << name;
  }
  for (const CommandSpec& spec : CommandTable()) {
    if (spec.job) {
      EXPECT_NE(spec.check, nullptr) << spec.name << " is queued after MULTI unchecked";
      EXPECT_FALSE(spec.immediate) << spec.name;
    }
  }
  EXPECT_TRUE(FindCommand("CONSUME")->multi_step);
  EXPECT_TRUE(FindCommand("queues")->multi_step);
  EXPECT_FALSE(FindCommand("publish")->multi_step);
}

}  // namespace
}  // namespace deferq::queue
