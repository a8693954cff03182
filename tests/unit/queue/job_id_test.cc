#include "queue/model/job_id.h"

#include <gtest/gtest.h>

#include <set>

namespace deferq::queue {
namespace {

TEST(JobIdTest, TextRoundTripsThroughTheCanonicalKey) {
  IdGenerator gen;
  for (int i = 0; i < 1000; ++i) {
    const GeneratedId id = gen.Next(1'795'000'000'000ULL + static_cast<uint64_t>(i) * 997);
    const std::string text = EncodeIdText(id);
    ASSERT_EQ(text.size(), 26u);
    const std::string key = CanonicalKeyOfText(text);
    ASSERT_EQ(key.size(), 16u);
    EXPECT_EQ(IdTextOfKey(key), text);
    GeneratedId back;
    ASSERT_TRUE(DecodeIdText(text, &back));
    EXPECT_EQ(back.ts_ms, id.ts_ms);
  }
}

TEST(JobIdTest, IdsSortByTimestampAndAreUniqueWithinAMillisecond) {
  IdGenerator gen;
  std::set<std::string> seen;
  std::string prev;
  for (int i = 0; i < 10000; ++i) {
    const std::string text = EncodeIdText(gen.Next(1'795'000'000'000ULL + i / 100));
    ASSERT_TRUE(seen.insert(text).second) << "duplicate " << text;
    ASSERT_GT(text, prev);
    prev = text;
  }
}

TEST(JobIdTest, TimestampIsTheFirstTenCharacters) {
  GeneratedId id;
  id.ts_ms = 0;
  EXPECT_EQ(EncodeIdText(id).substr(0, 10), "0000000000");
  id.ts_ms = (uint64_t{1} << 48) - 1;
  EXPECT_EQ(EncodeIdText(id).substr(0, 10), "7ZZZZZZZZZ");
}

TEST(JobIdTest, CustomIdsAreMarkedAndKeptVerbatim) {
  EXPECT_EQ(CanonicalKeyOfText("order-123"), "#order-123");
  EXPECT_EQ(IdTextOfKey("#order-123"), "order-123");
  // A 26-character id in a non-canonical spelling stays a custom id, so it round-trips exactly.
  const std::string lower = "01m80aedfhc3kgnrgmw5zxkfdz";
  EXPECT_EQ(CanonicalKeyOfText(lower), "#" + lower);
  EXPECT_EQ(IdTextOfKey(CanonicalKeyOfText(lower)), lower);
}

TEST(JobIdTest, RejectsTextThatIsNotAGeneratedId) {
  GeneratedId id;
  EXPECT_FALSE(DecodeIdText("short", &id));
  EXPECT_FALSE(DecodeIdText("8ZZZZZZZZZZZZZZZZZZZZZZZZZ", &id));  // timestamp over 48 bits
  EXPECT_FALSE(DecodeIdText("01M80AEDFHC3KGNRGMW5ZXKFD!", &id));
}

}  // namespace
}  // namespace deferq::queue
