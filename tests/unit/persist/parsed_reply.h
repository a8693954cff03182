// A reply as Redis would send it, parsed by the same hiredis reader the connections use (shared by
// the persist unit tests).
#pragma once

#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include <memory>
#include <string>

namespace deferq::persist {

inline std::unique_ptr<redisReply, void (*)(void*)> Parse(const std::string& resp) {
  redisReader* reader = redisReaderCreate();
  redisReaderFeed(reader, resp.data(), resp.size());
  void* obj = nullptr;
  EXPECT_EQ(redisReaderGetReply(reader, &obj), REDIS_OK);
  redisReaderFree(reader);
  EXPECT_NE(obj, nullptr) << resp;
  return {static_cast<redisReply*>(obj), freeReplyObject};
}

}  // namespace deferq::persist
