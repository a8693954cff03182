// The upstream reply reader (persist/reply_reader.h): hiredis's replies, bounded array headers.
#include "persist/reply_reader.h"

#include <gtest/gtest.h>
#include <hiredis/hiredis.h>
#include <hiredis/read.h>

#include <string>
#include <utility>
#include <vector>

#include "unit/support/resp.h"

namespace deferq::persist {
namespace {

struct Reader {
  redisReader* r = NewReplyReader();
  ~Reader() { redisReaderFree(r); }
};

TEST(ReplyReaderTest, ReadsRepliesAsHiredisDoes) {
  Reader reader;
  const std::string bytes = "*2\r\n:7\r\n$3\r\nabc\r\n+OK\r\n";
  redisReaderFeed(reader.r, bytes.data(), bytes.size());
  void* obj = nullptr;
  ASSERT_EQ(redisReaderGetReply(reader.r, &obj), REDIS_OK);
  auto* reply = static_cast<redisReply*>(obj);
  ASSERT_NE(reply, nullptr);
  ASSERT_EQ(reply->type, REDIS_REPLY_ARRAY);
  ASSERT_EQ(reply->elements, 2u);
  EXPECT_EQ(reply->element[0]->integer, 7);
  EXPECT_EQ(std::string(reply->element[1]->str, reply->element[1]->len), "abc");
  freeReplyObject(reply);
  ASSERT_EQ(redisReaderGetReply(reader.r, &obj), REDIS_OK);
  reply = static_cast<redisReply*>(obj);
  ASSERT_NE(reply, nullptr);
  EXPECT_EQ(reply->type, REDIS_REPLY_STATUS);
  freeReplyObject(reply);
}

// Found by tests/fuzz/upstream_reply_fuzz: hiredis allocated the element table of "*737137832"
// (5.9 GB) from the header line alone.
TEST(ReplyReaderTest, AnArrayHeaderOverTheBoundFailsTheReadWithoutAllocating) {
  Reader reader;
  const std::string bytes = "*737137832\r\n:1\r\n";
  redisReaderFeed(reader.r, bytes.data(), bytes.size());
  void* obj = nullptr;
  EXPECT_EQ(redisReaderGetReply(reader.r, &obj), REDIS_ERR);
  EXPECT_EQ(obj, nullptr);
}

TEST(ReplyReaderTest, AnArrayAtTheBoundIsRead) {
  Reader reader;
  std::string bytes = "*" + std::to_string(kMaxReplyElements) + "\r\n";
  for (size_t i = 0; i < kMaxReplyElements; ++i) bytes += ":1\r\n";
  redisReaderFeed(reader.r, bytes.data(), bytes.size());
  void* obj = nullptr;
  ASSERT_EQ(redisReaderGetReply(reader.r, &obj), REDIS_OK);
  auto* reply = static_cast<redisReply*>(obj);
  ASSERT_NE(reply, nullptr);
  EXPECT_EQ(reply->elements, kMaxReplyElements);
  freeReplyObject(reply);
}

TEST(ReplyReaderTest, DueEntriesAreReadAsTagAndMsPairsAndOddPairsAreLeftOut) {
  const deferq::testing::ReplyPtr flat = deferq::testing::ParseResp(
      "*7\r\n$4\r\nns/a\r\n$13\r\n1795000000020\r\n"
      ":5\r\n:6\r\n"  // not a tag: left out
      "$4\r\nns/b\r\n:1795000000070\r\n$4\r\nns/c\r\n");
  std::vector<std::pair<std::string, int64_t>> out = {{"kept", 1}};
  AppendDueEntries(flat.get(), &out);
  const std::vector<std::pair<std::string, int64_t>> want = {
      {"kept", 1}, {"ns/a", 1795000000020}, {"ns/b", 1795000000070}};
  EXPECT_EQ(out, want);  // ns/c has no score: left out
  AppendDueEntries(nullptr, &out);
  EXPECT_EQ(out.size(), 3u);
}

}  // namespace
}  // namespace deferq::persist
