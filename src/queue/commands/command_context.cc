#include "queue/commands/command_context.h"

#include <charconv>
#include <string>

#include "base/ascii.h"

namespace deferq::queue {

void ReplyWrongArity(proto::ReplyWriter& reply, std::string_view command) {
  std::string msg = "ERR wrong number of arguments for '";
  msg += base::AsciiLower(command);
  msg += "' command";
  reply.Error(msg);
}

void ReplySyntaxError(proto::ReplyWriter& reply) { reply.Error("ERR syntax error"); }

void ReplyHelp(proto::ReplyWriter& reply, std::span<const char* const> lines) {
  reply.ArrayHeader(lines.size());
  for (const char* line : lines) reply.Simple(line);
}

bool ParseInteger(std::string_view s, int64_t* out) {
  if (s == "0") {
    *out = 0;
    return true;
  }
  const size_t digits = s.starts_with('-') ? 1 : 0;
  if (s.size() <= digits || s[digits] < '1' || s[digits] > '9') return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size();
}

}  // namespace deferq::queue
