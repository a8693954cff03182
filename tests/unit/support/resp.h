// Upstream replies for unit tests, written as RESP and read by hiredis's own reader, so the code
// under test sees the redisReply a real pool hands it. Header-only.
#pragma once

#include <hiredis/hiredis.h>

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>

#include "base/check.h"

namespace deferq::testing {

struct ReplyFree {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using ReplyPtr = std::unique_ptr<redisReply, ReplyFree>;

// One complete RESP reply ("*2\r\n:1\r\n$1\r\na\r\n") as hiredis reads it.
inline ReplyPtr ParseResp(std::string_view resp) {
  redisReader* reader = redisReaderCreate();
  DQ_CHECK(redisReaderFeed(reader, resp.data(), resp.size()) == REDIS_OK);
  void* reply = nullptr;
  DQ_CHECK(redisReaderGetReply(reader, &reply) == REDIS_OK && reply != nullptr);
  redisReaderFree(reader);
  return ReplyPtr(static_cast<redisReply*>(reply));
}

// RESP for an array of integers (the shape of pump.lua's answer).
inline std::string RespInts(std::initializer_list<int64_t> values) {
  std::string out = "*" + std::to_string(values.size()) + "\r\n";
  for (int64_t v : values) out += ":" + std::to_string(v) + "\r\n";
  return out;
}

}  // namespace deferq::testing
