// RESP request parsing: turns the bytes a client sends into commands (argument vectors).
//
// Two framings, chosen by the first byte of each request as Redis does: '*' starts a RESP
// multibulk (parsed by the hiredis reader), anything else is an inline command line split with
// Redis's quoting rules (sdssplitargs). Limits are checked on the headers as soon as they arrive,
// before any body is buffered, so a header announcing 100 GiB costs nothing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

struct redisReader;

namespace deferq::proto {

struct ParserLimits {
  size_t max_args = 1024 * 1024;          // '*' count above this: invalid multibulk length
  size_t max_bulk_len = 8 * 1024 * 1024;  // '$' length above this: invalid bulk length
  size_t max_inline_len = 64 * 1024;      // inline line (and header line) longer than this
};

enum class ParseStatus {
  kNeedMore,  // no complete command buffered; feed more bytes
  kCommand,   // a command is available in args()
  kError,     // protocol error; error() holds the text; the connection must answer and close
};

class RequestParser {
 public:
  explicit RequestParser(const ParserLimits& limits = {});
  ~RequestParser();
  RequestParser(const RequestParser&) = delete;
  RequestParser& operator=(const RequestParser&) = delete;

  // Appends bytes received from the client. Cheap; parsing happens in Next().
  void Feed(const char* data, size_t len);

  // Parses the next command. Empty commands (blank inline lines, "*0", "*-1") are skipped
  // silently as Redis does. After kError every further call returns kError.
  ParseStatus Next();

  // The arguments of the command returned by the last kCommand. Valid until the next call to
  // Feed() or Next(); never empty for kCommand.
  const std::vector<std::string_view>& args() const { return args_; }

  // The error text without the "-" and without CRLF, exactly as Redis writes it, e.g.
  // "ERR Protocol error: invalid bulk length".
  const std::string& error() const { return error_; }

  // Bytes buffered but not yet consumed by a complete command (for CLIENT LIST qbuf=).
  size_t buffered() const;

 private:
  ParserLimits limits_;
  std::vector<std::string_view> args_;
  std::string error_;
  // The rest is the implementation's (hiredis reader, header scanner state, arena).
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace deferq::proto
