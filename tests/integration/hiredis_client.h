// RAII and small conveniences over hiredis's synchronous API, for tests whose clients behave.
#pragma once

#include <hiredis/hiredis.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace deferq::testing {

using namespace std::chrono_literals;

struct RedisContextDeleter {
  void operator()(redisContext* context) const { redisFree(context); }
};
using RedisContextPtr = std::unique_ptr<redisContext, RedisContextDeleter>;

struct ReplyDeleter {
  void operator()(redisReply* reply) const { freeReplyObject(reply); }
};
using ReplyPtr = std::unique_ptr<redisReply, ReplyDeleter>;

// Connects to 127.0.0.1:port; the timeout bounds the connect and every later read and write.
// Returns nullptr (never a context in an error state) when the connection fails.
RedisContextPtr ConnectHiredis(uint16_t port, std::chrono::milliseconds timeout = 5s);

// Sends one command (binary-safe arguments) and waits for its reply; nullptr on I/O error.
ReplyPtr Command(redisContext* context, const std::vector<std::string>& args);
// Queues a command without waiting (pipelining); replies come from GetReply in order.
void AppendCommand(redisContext* context, const std::vector<std::string>& args);
ReplyPtr GetReply(redisContext* context);
// Writes everything queued by AppendCommand; false on I/O error.
bool Flush(redisContext* context);

// A one-line rendering of a reply for assertion messages.
std::string Describe(const redisReply* reply);

inline bool IsStatus(const redisReply* reply, std::string_view text) {
  return reply && reply->type == REDIS_REPLY_STATUS &&
         std::string_view(reply->str, reply->len) == text;
}
inline bool IsBulk(const redisReply* reply, std::string_view text) {
  return reply && reply->type == REDIS_REPLY_STRING &&
         std::string_view(reply->str, reply->len) == text;
}
inline bool IsError(const redisReply* reply, std::string_view text) {
  return reply && reply->type == REDIS_REPLY_ERROR &&
         std::string_view(reply->str, reply->len) == text;
}

}  // namespace deferq::testing
