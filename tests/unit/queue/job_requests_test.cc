// Job command parsers (queue/commands/job_requests.h) against configurations at the edges of what
// config/load.cc accepts: what they accept must fit the job record.
#include "queue/commands/job_requests.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz/job_parse_context.h"

namespace deferq::queue {
namespace {

// Found by tests/fuzz/job_requests_fuzz: a default TTL near 2^32 stretched over a long delay
// wrapped around in the record's 32-bit field, so the job could expire before it was due.
TEST(JobRequestsTest, StretchedDefaultTtlIsCappedAtTheRecordsRangeAndStillCoversTheDelay) {
  Config cfg;
  cfg.default_ttl = UINT32_MAX;
  JobParseContext parse(cfg);
  const std::string delay = std::to_string(100LL * 365 * 86400);
  const std::vector<std::string_view> args = {"PUBLISH", "q", "x", "DELAY", delay};
  PublishRequest req;
  ASSERT_TRUE(ParsePublish(parse.ctx(), args, &req)) << parse.TakeError();
  EXPECT_EQ(req.ttl_s, int64_t{UINT32_MAX});
  EXPECT_GE(req.ttl_s * 1000, req.delay_ms);
}

TEST(JobRequestsTest, DefaultTtlShorterThanTheDelayIsStretchedByTheDelay) {
  JobParseContext parse(Config{});
  const std::vector<std::string_view> args = {"PUBLISH", "q", "x", "DELAY", "100000"};
  PublishRequest req;
  ASSERT_TRUE(ParsePublish(parse.ctx(), args, &req)) << parse.TakeError();
  EXPECT_EQ(req.ttl_s, 86400 + 100000);
}

TEST(JobRequestsTest, ErrorsAreAnsweredThroughTheContext) {
  JobParseContext parse(Config{});
  const std::vector<std::string_view> args = {"PUBLISH", "q", "x", "TTL", "1", "DELAY", "2"};
  PublishRequest req;
  EXPECT_FALSE(ParsePublish(parse.ctx(), args, &req));
  EXPECT_EQ(parse.TakeError(), "ERR ttl is shorter than delay");
}

// A TTR past 4,294,967 s does not fit the record's 32-bit ms; CONSUME and TOUCH answered a
// script's "bad arguments" for it. It is out of range like any other number (job_limits.h), and
// the config refuses the same default.
TEST(JobRequestsTest, TtrIsOneRangeInConsumeAndTouch) {
  JobParseContext parse(Config{});
  ConsumeRequest consume;
  const std::vector<std::string_view> max = {"CONSUME", "q", "TTR", "4294967"};
  EXPECT_TRUE(ParseConsume(parse.ctx(), max, &consume)) << parse.TakeError();
  EXPECT_EQ(consume.ttr_s, 4294967);
  const std::vector<std::string_view> over = {"CONSUME", "q", "TTR", "4294968"};
  EXPECT_FALSE(ParseConsume(parse.ctx(), over, &consume));
  EXPECT_EQ(parse.TakeError(), "ERR value is not an integer or out of range");
  JobOptionRequest touch;
  const std::vector<std::string_view> touch_over = {"TOUCH", "q", "id1", "TTR", "4294968"};
  EXPECT_FALSE(ParseTouch(parse.ctx(), touch_over, &touch));
  EXPECT_EQ(parse.TakeError(), "ERR value is not an integer or out of range");
  const std::vector<std::string_view> touch_max = {"TOUCH", "q", "id1", "TTR", "4294967"};
  EXPECT_TRUE(ParseTouch(parse.ctx(), touch_max, &touch)) << parse.TakeError();
}

// ACK queue id ATTEMPT n is the fenced form only as exactly those four arguments with n an
// integer; anything else is a list of ids.
TEST(JobRequestsTest, AckTakesTheFencedFormOnlyWhenItIsExactlyThat) {
  JobParseContext parse(Config{});
  IdsRequest req;
  const std::vector<std::string_view> fenced = {"ACK", "q", "id1", "attempt", "3"};
  ASSERT_TRUE(ParseAck(parse.ctx(), fenced, &req)) << parse.TakeError();
  EXPECT_EQ(req.attempt, 3);
  EXPECT_EQ(req.ids, (std::vector<std::string_view>{"id1"}));
  for (const std::vector<std::string_view>& ids :
       {std::vector<std::string_view>{"ACK", "q", "id1", "ATTEMPT", "x"},
        std::vector<std::string_view>{"ACK", "q", "id1", "ATTEMPT", "3", "id2"},
        std::vector<std::string_view>{"ACK", "q", "id1", "ATTEMPT"}}) {
    IdsRequest plain;
    ASSERT_TRUE(ParseAck(parse.ctx(), ids, &plain)) << parse.TakeError();
    EXPECT_EQ(plain.attempt, -1);
    EXPECT_EQ(plain.ids.size(), ids.size() - 2);
  }
}

TEST(JobRequestsTest, AckTakesResultAndAttemptOnceInEitherOrderForOneJob) {
  JobParseContext parse(Config{});
  IdsRequest req;
  const std::vector<std::string_view> both = {"ACK", "q", "id1", "RESULT", "r x", "attempt", "2"};
  ASSERT_TRUE(ParseAck(parse.ctx(), both, &req)) << parse.TakeError();
  EXPECT_TRUE(req.has_result);
  EXPECT_EQ(req.result, "r x");
  EXPECT_EQ(req.attempt, 2);
  EXPECT_EQ(req.ids, (std::vector<std::string_view>{"id1"}));
  IdsRequest only;
  const std::vector<std::string_view> result = {"ACK", "q", "id1", "result", ""};
  ASSERT_TRUE(ParseAck(parse.ctx(), result, &only)) << parse.TakeError();
  EXPECT_TRUE(only.has_result);
  EXPECT_EQ(only.attempt, -1);
  // Not that shape: a list of ids, whatever they are called.
  for (const std::vector<std::string_view>& ids :
       {std::vector<std::string_view>{"ACK", "q", "id1", "RESULT", "a", "RESULT", "b"},
        std::vector<std::string_view>{"ACK", "q", "id1", "RESULT", "a", "ATTEMPT", "x"},
        std::vector<std::string_view>{"ACK", "q", "id1", "RESULT"}}) {
    IdsRequest plain;
    ASSERT_TRUE(ParseAck(parse.ctx(), ids, &plain)) << parse.TakeError();
    EXPECT_FALSE(plain.has_result);
    EXPECT_EQ(plain.attempt, -1);
    EXPECT_EQ(plain.ids.size(), ids.size() - 2);
  }
  Config small;
  small.max_payload = 4;
  JobParseContext limited(small);
  IdsRequest big;
  const std::vector<std::string_view> too_big = {"ACK", "q", "id1", "RESULT", "12345"};
  EXPECT_FALSE(ParseAck(limited.ctx(), too_big, &big));
  EXPECT_EQ(limited.TakeError(), "ERR result too large");
}

TEST(JobRequestsTest, NackAndTouchTakeAttemptOnceInAnyOrder) {
  JobParseContext parse(Config{});
  JobOptionRequest req;
  const std::vector<std::string_view> nack = {"NACK", "q",       "id1",   "ATTEMPT",
                                              "2",    "KEEPTRY", "DELAY", "5"};
  ASSERT_TRUE(ParseNack(parse.ctx(), nack, &req)) << parse.TakeError();
  EXPECT_EQ((std::vector<int64_t>{req.attempt, req.option_s}), (std::vector<int64_t>{2, 5}));
  const std::vector<std::string_view> twice = {"NACK", "q", "id1", "ATTEMPT", "2", "ATTEMPT", "2"};
  EXPECT_FALSE(ParseNack(parse.ctx(), twice, &req));
  EXPECT_EQ(parse.TakeError(), "ERR syntax error");
  JobOptionRequest touch;
  const std::vector<std::string_view> t = {"TOUCH", "q", "id1", "ATTEMPT", "4", "TTR", "60"};
  ASSERT_TRUE(ParseTouch(parse.ctx(), t, &touch)) << parse.TakeError();
  EXPECT_EQ((std::vector<int64_t>{touch.attempt, touch.option_s}), (std::vector<int64_t>{4, 60}));
  const std::vector<std::string_view> bad = {"TOUCH", "q", "id1", "ATTEMPT", "-1"};
  EXPECT_FALSE(ParseTouch(parse.ctx(), bad, &touch));
  EXPECT_EQ(parse.TakeError(), "ERR value is not an integer or out of range");
}

// CRON's first occurrence is the job's due time; TZ and EVERY rules (UTC is always known).
TEST(JobRequestsTest, CronGivesTheFirstOccurrenceAsTheDueTime) {
  JobParseContext parse(Config{});
  PublishRequest req;
  const std::vector<std::string_view> args = {"PUBLISH",      "q",  "x",  "CRON",
                                              "*/15 * * * *", "TZ", "UTC"};
  ASSERT_TRUE(ParsePublish(parse.ctx(), args, &req)) << parse.TakeError();
  EXPECT_EQ(req.due_ms % (15 * 60 * 1000), 0);
  EXPECT_GT(req.due_ms, req.now_ms);
  EXPECT_LE(req.due_ms, req.now_ms + 15 * 60 * 1000);
  EXPECT_EQ(req.delay_ms, req.due_ms - req.now_ms);
  EXPECT_FALSE(req.schedule.empty());
  for (const std::vector<std::string_view>& bad :
       {std::vector<std::string_view>{"PUBLISH", "q", "x", "TZ", "UTC"},
        std::vector<std::string_view>{"PUBLISH", "q", "x", "CRON", "* * * * *", "EVERY", "5"},
        std::vector<std::string_view>{"PUBLISH", "q", "x", "CRON", ""}}) {
    PublishRequest r;
    EXPECT_FALSE(ParsePublish(parse.ctx(), bad, &r));
    EXPECT_EQ(parse.TakeError(), "ERR syntax error");
  }
}

}  // namespace
}  // namespace deferq::queue
