#include "hiredis_client.h"

#include <sys/time.h>

#include "resp_reader.h"

namespace deferq::testing {

namespace {

timeval ToTimeval(std::chrono::milliseconds timeout) {
  timeval tv{};
  tv.tv_sec = timeout.count() / 1000;
  tv.tv_usec = (timeout.count() % 1000) * 1000;
  return tv;
}

void ToArgv(const std::vector<std::string>& args, std::vector<const char*>* argv,
            std::vector<size_t>* lens) {
  for (const std::string& arg : args) {
    argv->push_back(arg.data());
    lens->push_back(arg.size());
  }
}

}  // namespace

RedisContextPtr ConnectHiredis(uint16_t port, std::chrono::milliseconds timeout) {
  RedisContextPtr context(redisConnectWithTimeout("127.0.0.1", port, ToTimeval(timeout)));
  if (!context || context->err) return nullptr;
  if (redisSetTimeout(context.get(), ToTimeval(timeout)) != REDIS_OK) return nullptr;
  return context;
}

ReplyPtr Command(redisContext* context, const std::vector<std::string>& args) {
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  ToArgv(args, &argv, &lens);
  return ReplyPtr(static_cast<redisReply*>(
      redisCommandArgv(context, static_cast<int>(argv.size()), argv.data(), lens.data())));
}

void AppendCommand(redisContext* context, const std::vector<std::string>& args) {
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  ToArgv(args, &argv, &lens);
  redisAppendCommandArgv(context, static_cast<int>(argv.size()), argv.data(), lens.data());
}

ReplyPtr GetReply(redisContext* context) {
  void* reply = nullptr;
  if (redisGetReply(context, &reply) != REDIS_OK) return nullptr;
  return ReplyPtr(static_cast<redisReply*>(reply));
}

bool Flush(redisContext* context) {
  int done = 0;
  while (!done) {
    if (redisBufferWrite(context, &done) != REDIS_OK) return false;
  }
  return true;
}

std::string Describe(const redisReply* reply) {
  if (!reply) return "(no reply: I/O error or closed)";
  switch (reply->type) {
    case REDIS_REPLY_STRING:
      return "\"" + Printable(std::string_view(reply->str, reply->len)) + "\"";
    case REDIS_REPLY_STATUS:
      return "+" + Printable(std::string_view(reply->str, reply->len));
    case REDIS_REPLY_ERROR:
      return "-" + Printable(std::string_view(reply->str, reply->len));
    case REDIS_REPLY_INTEGER:
      return ":" + std::to_string(reply->integer);
    case REDIS_REPLY_NIL:
      return "(nil)";
    case REDIS_REPLY_ARRAY: {
      std::string text = "[";
      for (size_t i = 0; i < reply->elements; ++i) {
        if (i > 0) text += ", ";
        text += Describe(reply->element[i]);
      }
      return text + "]";
    }
    default:
      return "(type " + std::to_string(reply->type) + ")";
  }
}

}  // namespace deferq::testing
