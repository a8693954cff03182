// Fuzz target: proto::RequestParser (RESP multibulk and inline framing, limits).
//
// Input: byte 0 picks the limits (bit 0: small limits, so the limit paths are reached) and seeds
// the chunking; the rest is what a client sends. The same bytes are parsed twice, fed at once and
// fed in small chunks (parsing after each chunk, as the event loop does). Checked:
//  * both runs yield the same commands and the same error (framing never depends on chunking);
//  * a command has at least one argument, within the limits;
//  * an error is one of the texts Redis writes (never the parser's "hiredis disagrees" path);
//  * after an error, the parser keeps answering it.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/check.h"
#include "proto/request_parser.h"

namespace {

using deferq::proto::ParserLimits;
using deferq::proto::ParseStatus;
using deferq::proto::RequestParser;

struct Outcome {
  std::vector<std::vector<std::string>> commands;
  std::string error;  // "" when the input ended without a protocol error
};

void Drain(RequestParser& parser, const ParserLimits& limits, Outcome* out) {
  for (;;) {
    const ParseStatus st = parser.Next();
    if (st == ParseStatus::kNeedMore) return;
    if (st == ParseStatus::kError) {
      out->error = parser.error();
      DQ_CHECK(parser.Next() == ParseStatus::kError);
      return;
    }
    const auto& args = parser.args();
    DQ_CHECK(!args.empty());
    DQ_CHECK(args.size() <= limits.max_args || limits.max_args == 0);
    std::vector<std::string> cmd;
    for (std::string_view a : args) cmd.emplace_back(a);
    out->commands.push_back(std::move(cmd));
  }
}

bool KnownError(std::string_view e) {
  static const char* const kTexts[] = {
      "ERR Protocol error: too big mbulk count string",
      "ERR Protocol error: invalid multibulk length",
      "ERR Protocol error: too big bulk count string",
      "ERR Protocol error: invalid bulk length",
      "ERR Protocol error: too big inline request",
      "ERR Protocol error: unbalanced quotes in request",
  };
  for (const char* t : kTexts) {
    if (e == t) return true;
  }
  // "expected '$', got 'X'" with one byte X.
  constexpr std::string_view kExpected = "ERR Protocol error: expected '$', got '";
  return e.size() == kExpected.size() + 2 && e.starts_with(kExpected) && e.back() == '\'';
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0];
  const char* bytes = reinterpret_cast<const char*>(data + 1);
  const size_t len = size - 1;
  ParserLimits limits;
  if (mode & 1) {
    limits.max_args = 16;
    limits.max_bulk_len = 64;
    limits.max_inline_len = 48;
  }

  Outcome whole;
  {
    RequestParser parser(limits);
    parser.Feed(bytes, len);
    Drain(parser, limits, &whole);
    if (whole.error.empty()) DQ_CHECK(parser.buffered() <= len);
  }
  Outcome chunked;
  {
    RequestParser parser(limits);
    uint32_t rng = mode * 2654435761u + 1;
    size_t off = 0;
    while (off < len && chunked.error.empty()) {
      rng = rng * 1103515245u + 12345u;
      const size_t n = std::min<size_t>(len - off, 1 + (rng >> 16) % 13);
      parser.Feed(bytes + off, n);
      off += n;
      Drain(parser, limits, &chunked);
    }
  }
  DQ_CHECK(whole.commands == chunked.commands);
  DQ_CHECK(whole.error == chunked.error);
  DQ_CHECK_MSG(whole.error.empty() || KnownError(whole.error), "unexpected error text: %s",
               whole.error.c_str());
  for (const auto& cmd : whole.commands) {
    for (const std::string& a : cmd) {
      DQ_CHECK(a.size() <= limits.max_bulk_len || a.size() <= limits.max_inline_len);
    }
  }
  return 0;
}
