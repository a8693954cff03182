#include "proto/request_parser.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

namespace deferq::proto {
namespace {

using namespace std::string_literals;
using Argv = std::vector<std::string>;

constexpr char kInvalidMbulk[] = "ERR Protocol error: invalid multibulk length";
constexpr char kInvalidBulk[] = "ERR Protocol error: invalid bulk length";
constexpr char kTooBigMbulk[] = "ERR Protocol error: too big mbulk count string";
constexpr char kTooBigBulk[] = "ERR Protocol error: too big bulk count string";
constexpr char kTooBigInline[] = "ERR Protocol error: too big inline request";
constexpr char kUnbalanced[] = "ERR Protocol error: unbalanced quotes in request";

struct Parsed {
  std::vector<Argv> commands;
  ParseStatus status = ParseStatus::kNeedMore;  // what the last Next() said
  std::string error;
  size_t buffered = 0;
};

// Calls Next() until it stops producing commands; returns the status that stopped it.
ParseStatus Drain(RequestParser& parser, std::vector<Argv>* commands) {
  for (;;) {
    const ParseStatus status = parser.Next();
    if (status != ParseStatus::kCommand) return status;
    EXPECT_FALSE(parser.args().empty());
    commands->emplace_back(parser.args().begin(), parser.args().end());
  }
}

Parsed ParseChunks(const std::vector<std::string_view>& chunks, const ParserLimits& limits = {}) {
  RequestParser parser(limits);
  Parsed out;
  for (std::string_view chunk : chunks) {
    parser.Feed(chunk.data(), chunk.size());
    out.status = Drain(parser, &out.commands);
  }
  if (out.status == ParseStatus::kError) out.error = parser.error();
  out.buffered = parser.buffered();
  return out;
}

Parsed Parse(std::string_view bytes, const ParserLimits& limits = {}) {
  return ParseChunks({bytes}, limits);
}

Parsed ParseByteByByte(std::string_view bytes, const ParserLimits& limits = {}) {
  std::vector<std::string_view> chunks;
  for (size_t i = 0; i < bytes.size(); ++i) chunks.push_back(bytes.substr(i, 1));
  return ParseChunks(chunks, limits);
}

std::string Resp(const Argv& argv) {
  std::string out = "*" + std::to_string(argv.size()) + "\r\n";
  for (const std::string& arg : argv)
    out += "$" + std::to_string(arg.size()) + "\r\n" + arg + "\r\n";
  return out;
}

// A pipeline mixing every kind of request; each segment produces at most one command, which
// becomes available exactly when the segment's last byte has arrived.
struct Segment {
  std::string bytes;
  std::vector<Argv> commands;
};

std::vector<Segment> MixedPipeline() {
  return {
      {Resp({"SET", "key", "value"}), {{"SET", "key", "value"}}},
      {"PING\r\n", {{"PING"}}},
      {"*1\r\n$4\r\nPING\r\n", {{"PING"}}},
      {"*0\r\n", {}},
      {"\r\n", {}},
      {"ECHO \"hi there\" 'x y'\n", {{"ECHO", "hi there", "x y"}}},
      {"*2\r\n$4\r\nECHO\r\n$0\r\n\r\n", {{"ECHO", ""}}},
      {"*-1\r\n", {}},
      {"*2\r\n$4\r\nECHO\r\n$6\r\na\r\nb\0c\r\n"s, {{"ECHO", "a\r\nb\0c"s}}},
      {"  GET   k  \r\n", {{"GET", "k"}}},
      {Resp({"PUBLISH", "q", std::string(300, 'p'), "DELAY", "5"}),
       {{"PUBLISH", "q", std::string(300, 'p'), "DELAY", "5"}}},
  };
}

std::string Join(const std::vector<Segment>& segments) {
  std::string out;
  for (const Segment& s : segments) out += s.bytes;
  return out;
}

std::vector<Argv> AllCommands(const std::vector<Segment>& segments) {
  std::vector<Argv> out;
  for (const Segment& s : segments) out.insert(out.end(), s.commands.begin(), s.commands.end());
  return out;
}

// ---------------------------------------------------------------------------------------------
// Framing basics

TEST(RequestParserTest, NothingFedNeedsMore) {
  RequestParser parser;
  EXPECT_EQ(parser.Next(), ParseStatus::kNeedMore);
  EXPECT_TRUE(parser.args().empty());
  EXPECT_EQ(parser.buffered(), 0u);
}

TEST(RequestParserTest, RespCommandParsedIntoArgv) {
  const Parsed p = Parse("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nhello\r\n");
  EXPECT_EQ(p.status, ParseStatus::kNeedMore);
  EXPECT_EQ(p.commands, (std::vector<Argv>{{"SET", "k", "hello"}}));
  EXPECT_EQ(p.buffered, 0u);
}

TEST(RequestParserTest, InlineCommandWithCrlfParsed) {
  EXPECT_EQ(Parse("SET k hello\r\n").commands, (std::vector<Argv>{{"SET", "k", "hello"}}));
}

TEST(RequestParserTest, InlineCommandWithBareLfParsed) {
  EXPECT_EQ(Parse("PING\n").commands, (std::vector<Argv>{{"PING"}}));
}

TEST(RequestParserTest, InlineStripsOnlyOneCrBeforeLf) {
  // The first '\r' is stripped as part of the line end; the other one separates like a space.
  EXPECT_EQ(Parse("PING\r\r\n").commands, (std::vector<Argv>{{"PING"}}));
  EXPECT_EQ(Parse("a\rb\r\n").commands, (std::vector<Argv>{{"a", "b"}}));
}

TEST(RequestParserTest, FirstByteOtherThanStarIsInline) {
  // A top-level '$' is not RESP framing for a request; Redis reads it as an inline command.
  EXPECT_EQ(Parse("$4\r\nPING\r\n").commands, (std::vector<Argv>{{"$4"}, {"PING"}}));
  EXPECT_EQ(Parse(":1\r\n").commands, (std::vector<Argv>{{":1"}}));
}

TEST(RequestParserTest, PipelineReturnedInOrder) {
  const std::vector<Segment> segments = MixedPipeline();
  const Parsed p = Parse(Join(segments));
  EXPECT_EQ(p.status, ParseStatus::kNeedMore);
  EXPECT_EQ(p.commands, AllCommands(segments));
  EXPECT_EQ(p.buffered, 0u);
}

TEST(RequestParserTest, InlineAndRespMixedInOneStream) {
  const Parsed p = Parse("PING\r\n*2\r\n$4\r\nECHO\r\n$2\r\nhi\r\nECHO x\n*1\r\n$4\r\nQUIT\r\n");
  EXPECT_EQ(p.commands, (std::vector<Argv>{{"PING"}, {"ECHO", "hi"}, {"ECHO", "x"}, {"QUIT"}}));
}

TEST(RequestParserTest, PipelineSplitAtEveryBytePositionYieldsSameArgv) {
  const std::vector<Segment> segments = MixedPipeline();
  const std::string all = Join(segments);
  const std::vector<Argv> expected = AllCommands(segments);
  for (size_t split = 0; split <= all.size(); ++split) {
    const std::string_view view(all);
    const Parsed p = ParseChunks({view.substr(0, split), view.substr(split)});
    ASSERT_EQ(p.status, ParseStatus::kNeedMore) << "split at " << split;
    ASSERT_EQ(p.commands, expected) << "split at " << split;
    ASSERT_EQ(p.buffered, 0u) << "split at " << split;
  }
}

TEST(RequestParserTest, PipelineSplitAtEveryPairOfPositionsYieldsSameArgv) {
  std::vector<Segment> segments = MixedPipeline();
  segments.pop_back();  // keep the quadratic number of cases small
  const std::string all = Join(segments);
  const std::string_view view(all);
  const std::vector<Argv> expected = AllCommands(segments);
  for (size_t a = 0; a <= all.size(); ++a) {
    for (size_t b = a; b <= all.size(); ++b) {
      const Parsed p = ParseChunks({view.substr(0, a), view.substr(a, b - a), view.substr(b)});
      ASSERT_EQ(p.commands, expected) << "splits at " << a << " and " << b;
    }
  }
}

TEST(RequestParserTest, PipelineFedOneByteAtATimeYieldsEachCommandWhenItsLastByteArrives) {
  const std::vector<Segment> segments = MixedPipeline();
  RequestParser parser;
  std::vector<Argv> got;
  std::vector<Argv> expected_so_far;
  for (const Segment& segment : segments) {
    for (size_t i = 0; i < segment.bytes.size(); ++i) {
      parser.Feed(&segment.bytes[i], 1);
      ASSERT_EQ(Drain(parser, &got), ParseStatus::kNeedMore);
      if (i + 1 < segment.bytes.size()) {
        ASSERT_EQ(got, expected_so_far) << "command returned before its last byte";
        ASSERT_EQ(parser.buffered(), i + 1);
      }
    }
    expected_so_far.insert(expected_so_far.end(), segment.commands.begin(), segment.commands.end());
    ASSERT_EQ(got, expected_so_far);
    ASSERT_EQ(parser.buffered(), 0u);
  }
}

TEST(RequestParserTest, BufferedCountsBytesNotYetConsumedByACommand) {
  RequestParser parser;
  const std::string first = "*1\r\n$4\r\nPING\r\n";
  const std::string partial = "*2\r\n$4\r\nECHO\r\n$5\r\nhel";
  const std::string input = first + partial;
  parser.Feed(input.data(), input.size());
  EXPECT_EQ(parser.buffered(), input.size());
  ASSERT_EQ(parser.Next(), ParseStatus::kCommand);
  EXPECT_EQ(parser.buffered(), partial.size());
  ASSERT_EQ(parser.Next(), ParseStatus::kNeedMore);
  EXPECT_EQ(parser.buffered(), partial.size());
  parser.Feed("lo\r\n", 4);
  EXPECT_EQ(parser.buffered(), partial.size() + 4);
  ASSERT_EQ(parser.Next(), ParseStatus::kCommand);
  EXPECT_EQ(parser.args(), (std::vector<std::string_view>{"ECHO", "hello"}));
  EXPECT_EQ(parser.buffered(), 0u);
}

TEST(RequestParserTest, ArgsStayValidWhileMoreBytesAreFed) {
  RequestParser parser;
  const std::string cmd = Resp({"SET", "key", std::string(5000, 'v')});
  parser.Feed(cmd.data(), cmd.size());
  ASSERT_EQ(parser.Next(), ParseStatus::kCommand);
  EXPECT_EQ(parser.args()[0], "SET");
  EXPECT_EQ(parser.args()[2], std::string(5000, 'v'));
  // The parser is reusable for many commands of different sizes.
  for (size_t n : {0u, 1u, 100u, 20000u, 3u}) {
    const Argv argv = {"ECHO", std::string(n, 'x')};
    const std::string bytes = Resp(argv) + "PING\r\n";
    parser.Feed(bytes.data(), bytes.size());
    ASSERT_EQ(parser.Next(), ParseStatus::kCommand);
    EXPECT_EQ(Argv(parser.args().begin(), parser.args().end()), argv);
    ASSERT_EQ(parser.Next(), ParseStatus::kCommand);
    EXPECT_EQ(Argv(parser.args().begin(), parser.args().end()), Argv{"PING"});
    EXPECT_EQ(parser.Next(), ParseStatus::kNeedMore);
    EXPECT_TRUE(parser.args().empty());
  }
}

// ---------------------------------------------------------------------------------------------
// Binary safety and unchecked bytes

TEST(RequestParserTest, BulkArgumentIsBinarySafeForAll256ByteValues) {
  std::string all_bytes;
  for (int b = 0; b < 256; ++b) all_bytes.push_back(static_cast<char>(b));
  const Argv argv = {"SET", all_bytes, all_bytes + all_bytes};
  const std::string bytes = Resp(argv);
  EXPECT_EQ(Parse(bytes).commands, std::vector<Argv>{argv});
  EXPECT_EQ(ParseByteByByte(bytes).commands, std::vector<Argv>{argv});
}

TEST(RequestParserTest, BulkArgumentMayContainCrlfAndHeaderLookalikes) {
  const Argv argv = {"ECHO", "\r\n*1\r\n$4\r\nPING\r\n", "\r", "\n", "$-1\r\n"};
  EXPECT_EQ(Parse(Resp(argv)).commands, std::vector<Argv>{argv});
}

TEST(RequestParserTest, EmptyBulkArgumentIsAnEmptyString) {
  EXPECT_EQ(Parse("*3\r\n$3\r\nSET\r\n$0\r\n\r\n$0\r\n\r\n").commands,
            (std::vector<Argv>{{"SET", "", ""}}));
}

TEST(RequestParserTest, TwoBytesAfterBulkBodyAreNotChecked) {
  // As in Redis and hiredis, the bytes after a body are assumed to be CRLF.
  EXPECT_EQ(Parse("*2\r\n$4\r\nECHO\r\n$2\r\nhixy*1\r\n$4\r\nPING\r\n").commands,
            (std::vector<Argv>{{"ECHO", "hi"}, {"PING"}}));
}

TEST(RequestParserTest, ByteAfterHeaderCrIsNotChecked) {
  // Redis ends a header line at '\r' and skips the next byte unseen.
  EXPECT_EQ(Parse("*2\rx$4\ryECHO\r\n$2\r\0hi\r\n"s).commands, (std::vector<Argv>{{"ECHO", "hi"}}));
  EXPECT_EQ(ParseByteByByte("*1\r\r$4\r\rPING\r\n").commands, (std::vector<Argv>{{"PING"}}));
}

TEST(RequestParserTest, HeaderWaitsForTheByteAfterCr) {
  RequestParser parser;
  parser.Feed("*1\r", 3);
  EXPECT_EQ(parser.Next(), ParseStatus::kNeedMore);
  parser.Feed("\n$4\r", 4);
  EXPECT_EQ(parser.Next(), ParseStatus::kNeedMore);
  parser.Feed("\nPING\r\n", 7);
  EXPECT_EQ(parser.Next(), ParseStatus::kCommand);
  EXPECT_EQ(parser.args(), (std::vector<std::string_view>{"PING"}));
}

// ---------------------------------------------------------------------------------------------
// Requests that are no command

TEST(RequestParserTest, EmptyMultibulkIsSkipped) {
  const Parsed p = Parse("*0\r\n*0\r\n*1\r\n$4\r\nPING\r\n");
  EXPECT_EQ(p.commands, (std::vector<Argv>{{"PING"}}));
  EXPECT_EQ(p.buffered, 0u);
}

TEST(RequestParserTest, NullAndNegativeMultibulkAreSkipped) {
  const Parsed p = Parse("*-1\r\n*-5\r\nPING\r\n");
  EXPECT_EQ(p.status, ParseStatus::kNeedMore);
  EXPECT_EQ(p.commands, (std::vector<Argv>{{"PING"}}));
  EXPECT_EQ(p.buffered, 0u);
}

TEST(RequestParserTest, OnlySkippedRequestsYieldNeedMoreWithNothingBuffered) {
  RequestParser parser;
  const std::string bytes = "*0\r\n\r\n*-1\r\n";
  parser.Feed(bytes.data(), bytes.size());
  EXPECT_EQ(parser.Next(), ParseStatus::kNeedMore);
  EXPECT_TRUE(parser.args().empty());
  EXPECT_EQ(parser.buffered(), 0u);
}

TEST(RequestParserTest, BlankAndWhitespaceOnlyInlineLinesAreSkipped) {
  const Parsed p = Parse("\r\n\n   \r\n\t \t\n\v\f\r\nPING\r\n \n");
  EXPECT_EQ(p.status, ParseStatus::kNeedMore);
  EXPECT_EQ(p.commands, (std::vector<Argv>{{"PING"}}));
  EXPECT_EQ(p.buffered, 0u);
}

// ---------------------------------------------------------------------------------------------
// Limits

TEST(RequestParserTest, ArgCountAtMaxArgsAccepted) {
  ParserLimits limits;
  limits.max_args = 3;
  EXPECT_EQ(Parse(Resp({"SET", "k", "v"}), limits).commands,
            (std::vector<Argv>{{"SET", "k", "v"}}));
}

TEST(RequestParserTest, ArgCountOverMaxArgsRefusedAtTheHeader) {
  ParserLimits limits;
  limits.max_args = 3;
  const Parsed p = Parse("*4\r\n", limits);
  EXPECT_EQ(p.status, ParseStatus::kError);
  EXPECT_EQ(p.error, kInvalidMbulk);
}

TEST(RequestParserTest, DefaultMaxArgsIsOneMebiArgs) {
  const Parsed at = Parse("*1048576\r\n");
  EXPECT_EQ(at.status, ParseStatus::kNeedMore);
  EXPECT_EQ(at.buffered, 10u);
  const Parsed over = Parse("*1048577\r\n");
  EXPECT_EQ(over.status, ParseStatus::kError);
  EXPECT_EQ(over.error, kInvalidMbulk);
}

TEST(RequestParserTest, MultibulkCountAboveIntMaxRefusedEvenWithoutArgLimit) {
  ParserLimits limits;
  limits.max_args = SIZE_MAX;
  const Parsed at = Parse("*2147483647\r\n", limits);
  EXPECT_EQ(at.status, ParseStatus::kNeedMore);
  const Parsed over = Parse("*2147483648\r\n", limits);
  EXPECT_EQ(over.status, ParseStatus::kError);
  EXPECT_EQ(over.error, kInvalidMbulk);
}

TEST(RequestParserTest, BulkLenAtLimitAccepted) {
  ParserLimits limits;
  limits.max_bulk_len = 16;
  const Argv argv = {"ECHO", std::string(16, 'z')};
  EXPECT_EQ(Parse(Resp(argv), limits).commands, std::vector<Argv>{argv});
}

TEST(RequestParserTest, BulkHeaderOverLimitRefusedBeforeBody) {
  ParserLimits limits;
  limits.max_bulk_len = 16;
  RequestParser parser(limits);
  const std::string head = "*2\r\n$4\r\nECHO\r\n$17\r\n";  // no body byte sent
  parser.Feed(head.data(), head.size());
  EXPECT_EQ(parser.Next(), ParseStatus::kError);
  EXPECT_EQ(parser.error(), kInvalidBulk);
  EXPECT_TRUE(parser.args().empty());
}

TEST(RequestParserTest, DefaultMaxBulkLenIsEightMebibytes) {
  const Parsed at = Parse("*1\r\n$8388608\r\n");
  EXPECT_EQ(at.status, ParseStatus::kNeedMore);
  const Parsed over = Parse("*1\r\n$8388609\r\n");
  EXPECT_EQ(over.status, ParseStatus::kError);
  EXPECT_EQ(over.error, kInvalidBulk);
}

TEST(RequestParserTest, HundredGibBulkHeaderRefusedAsSoonAsItsLineIsComplete) {
  RequestParser parser;
  const std::string head = "*3\r\n$7\r\nPUBLISH\r\n$1\r\nq\r\n$107374182400\r";
  parser.Feed(head.data(), head.size());
  EXPECT_EQ(parser.Next(), ParseStatus::kNeedMore);  // header line not complete yet
  parser.Feed("\n", 1);
  EXPECT_EQ(parser.Next(), ParseStatus::kError);
  EXPECT_EQ(parser.error(), kInvalidBulk);
  EXPECT_LE(parser.buffered(), head.size() + 1);
}

TEST(RequestParserTest, HundredGibBulkHeaderRefusedWhenFedByteByByte) {
  const Parsed p = ParseByteByByte("*1\r\n$107374182400\r\n");
  EXPECT_EQ(p.status, ParseStatus::kError);
  EXPECT_EQ(p.error, kInvalidBulk);
  EXPECT_LT(p.buffered, 32u);
}

TEST(RequestParserTest, FrameOverOneGibRefusedAtTheHeaderThatWouldCrossIt) {
  // hiredis 0.14 cannot index buffers past 2 GiB, so whole frames are capped at 1 GiB (Redis's
  // client-query-buffer-limit) whatever max_bulk_len allows.
  ParserLimits limits;
  limits.max_bulk_len = size_t{4} << 30;
  // 4 + 13 + 1073741805 + 2 bytes: exactly the cap.
  EXPECT_EQ(Parse("*1\r\n$1073741805\r\n", limits).status, ParseStatus::kNeedMore);
  const Parsed over = Parse("*1\r\n$1073741806\r\n", limits);
  EXPECT_EQ(over.status, ParseStatus::kError);
  EXPECT_EQ(over.error, kInvalidBulk);
}

TEST(RequestParserTest, InlineLineAtLimitAccepted) {
  ParserLimits limits;
  limits.max_inline_len = 16;
  const std::string line = "ECHO " + std::string(11, 'a');  // 16 bytes
  EXPECT_EQ(Parse(line + "\n", limits).commands,
            (std::vector<Argv>{{"ECHO", std::string(11, 'a')}}));
  EXPECT_EQ(ParseByteByByte(line + "\n", limits).commands,
            (std::vector<Argv>{{"ECHO", std::string(11, 'a')}}));
  // With CRLF the '\r' is part of the bytes before the newline.
  EXPECT_EQ(Parse(line.substr(1) + "\r\n", limits).commands,
            (std::vector<Argv>{{"CHO", std::string(11, 'a')}}));
}

// Found by tests/fuzz/request_parser_fuzz: an inline line carried more arguments than max_args.
TEST(RequestParserTest, InlineCommandOverMaxArgsRefusedAtMaxArgsAccepted) {
  ParserLimits limits;
  limits.max_args = 3;
  EXPECT_EQ(Parse("a b c\r\n", limits).commands, (std::vector<Argv>{{"a", "b", "c"}}));
  const Parsed over = Parse("a b c d\r\n", limits);
  EXPECT_EQ(over.status, ParseStatus::kError);
  EXPECT_EQ(over.error, kInvalidMbulk);
  EXPECT_TRUE(over.commands.empty());
}

TEST(RequestParserTest, InlineLineOverLimitRefused) {
  ParserLimits limits;
  limits.max_inline_len = 16;
  const std::string line = "ECHO " + std::string(12, 'a');  // 17 bytes
  for (const std::string& bytes : {line + "\n", line.substr(1) + "\r\n"}) {
    const Parsed whole = Parse(bytes, limits);
    EXPECT_EQ(whole.status, ParseStatus::kError);
    EXPECT_EQ(whole.error, kTooBigInline);
    const Parsed bytewise = ParseByteByByte(bytes, limits);
    EXPECT_EQ(bytewise.status, ParseStatus::kError);
    EXPECT_EQ(bytewise.error, kTooBigInline);
  }
}

TEST(RequestParserTest, InlineLineOverLimitRefusedWithoutWaitingForNewline) {
  ParserLimits limits;
  limits.max_inline_len = 16;
  RequestParser parser(limits);
  const std::string bytes(16, 'a');
  parser.Feed(bytes.data(), bytes.size());
  EXPECT_EQ(parser.Next(), ParseStatus::kNeedMore);
  parser.Feed("a", 1);
  EXPECT_EQ(parser.Next(), ParseStatus::kError);
  EXPECT_EQ(parser.error(), kTooBigInline);
}

TEST(RequestParserTest, DefaultInlineLimitIs64KiB) {
  const std::string at = "ECHO " + std::string(64 * 1024 - 5, 'x');
  EXPECT_EQ(Parse(at + "\n").commands,
            (std::vector<Argv>{{"ECHO", std::string(at.size() - 5, 'x')}}));
  const Parsed over = Parse(at + "x\n");
  EXPECT_EQ(over.status, ParseStatus::kError);
  EXPECT_EQ(over.error, kTooBigInline);
}

TEST(RequestParserTest, MultibulkCountLineAtLimitAccepted) {
  ParserLimits limits;
  limits.max_inline_len = 3;  // "*12" is exactly 3 bytes before its '\r'
  Argv argv(12, "a");
  EXPECT_EQ(Parse(Resp(argv), limits).commands, std::vector<Argv>{argv});
  EXPECT_EQ(ParseByteByByte(Resp(argv), limits).commands, std::vector<Argv>{argv});
}

TEST(RequestParserTest, MultibulkCountLineOverLimitIsTooBig) {
  ParserLimits limits;
  limits.max_inline_len = 3;
  const Parsed no_cr = Parse("*123", limits);  // 4 bytes and no '\r' yet
  EXPECT_EQ(no_cr.status, ParseStatus::kError);
  EXPECT_EQ(no_cr.error, kTooBigMbulk);
  const Parsed late_cr = Parse("*100\r\n", limits);
  EXPECT_EQ(late_cr.status, ParseStatus::kError);
  EXPECT_EQ(late_cr.error, kTooBigMbulk);
  EXPECT_EQ(Parse("*12", limits).status, ParseStatus::kNeedMore);
}

TEST(RequestParserTest, MultibulkCountLineWithoutCrOver64KiBIsTooBig) {
  const std::string at = "*" + std::string(64 * 1024 - 1, '1');
  EXPECT_EQ(Parse(at).status, ParseStatus::kNeedMore);
  const Parsed over = ParseChunks({at, "1"});
  EXPECT_EQ(over.status, ParseStatus::kError);
  EXPECT_EQ(over.error, kTooBigMbulk);
}

TEST(RequestParserTest, BulkCountLineAtLimitAccepted) {
  ParserLimits limits;
  limits.max_inline_len = 3;  // "$12" is exactly 3 bytes before its '\r'
  const Argv argv = {std::string(12, 'b')};
  EXPECT_EQ(Parse(Resp(argv), limits).commands, std::vector<Argv>{argv});
}

TEST(RequestParserTest, BulkCountLineOverLimitIsTooBig) {
  ParserLimits limits;
  limits.max_inline_len = 3;
  const Parsed no_cr = Parse("*1\r\n$123", limits);
  EXPECT_EQ(no_cr.status, ParseStatus::kError);
  EXPECT_EQ(no_cr.error, kTooBigBulk);
  const Parsed late_cr = Parse("*1\r\n$100\r\n", limits);
  EXPECT_EQ(late_cr.status, ParseStatus::kError);
  EXPECT_EQ(late_cr.error, kTooBigBulk);
  EXPECT_EQ(Parse("*1\r\n$12", limits).status, ParseStatus::kNeedMore);
}

TEST(RequestParserTest, BulkCountLineWithoutCrOver64KiBIsTooBig) {
  const std::string head = "*1\r\n$" + std::string(64 * 1024 - 1, '1');
  EXPECT_EQ(Parse(head).status, ParseStatus::kNeedMore);
  const Parsed over = ParseChunks({head, "1"});
  EXPECT_EQ(over.status, ParseStatus::kError);
  EXPECT_EQ(over.error, kTooBigBulk);
}

TEST(RequestParserTest, ElementLineWithoutCrOverLimitIsTooBigEvenWithoutDollar) {
  // As Redis: the line must be complete before its first byte is judged.
  ParserLimits limits;
  limits.max_inline_len = 3;
  EXPECT_EQ(Parse("*1\r\n:12", limits).status, ParseStatus::kNeedMore);
  EXPECT_EQ(Parse("*1\r\n:123", limits).error, kTooBigBulk);
}

// ---------------------------------------------------------------------------------------------
// Protocol errors

TEST(RequestParserTest, MalformedMultibulkCountIsInvalidMultibulkLength) {
  for (const char* head :
       {"*abc\r\n", "*\r\n", "*+1\r\n", "*01\r\n", "* 1\r\n", "*1 \r\n", "*-0\r\n", "*-\r\n",
        "*1x\r\n", "*99999999999999999999\r\n", "*123456789012345678901\r\n"}) {
    const Parsed p = Parse(head);
    EXPECT_EQ(p.status, ParseStatus::kError) << head;
    EXPECT_EQ(p.error, kInvalidMbulk) << head;
    EXPECT_TRUE(p.commands.empty()) << head;
  }
}

TEST(RequestParserTest, MalformedBulkLengthIsInvalidBulkLength) {
  for (const char* line : {"$-1\r\n", "$-2\r\n", "$abc\r\n", "$\r\n", "$+1\r\n", "$01\r\n",
                           "$-0\r\n", "$ 1\r\n", "$1 \r\n", "$9223372036854775808\r\n"}) {
    const Parsed p = Parse(std::string("*1\r\n") + line + "x\r\n");
    EXPECT_EQ(p.status, ParseStatus::kError) << line;
    EXPECT_EQ(p.error, kInvalidBulk) << line;
  }
}

TEST(RequestParserTest, ElementNotStartingWithDollarNamesTheByte) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"*1\r\n:5\r\n", "ERR Protocol error: expected '$', got ':'"},
      {"*1\r\n+OK\r\n", "ERR Protocol error: expected '$', got '+'"},
      {"*1\r\n*1\r\n$4\r\nPING\r\n", "ERR Protocol error: expected '$', got '*'"},
      {"*2\r\n$4\r\nECHO\r\nhello\r\n", "ERR Protocol error: expected '$', got 'h'"},
      {"*1\r\n\0\r\n"s, "ERR Protocol error: expected '$', got '\0'"s},
      {"*1\r\n\xff\r\n", "ERR Protocol error: expected '$', got '\xff'"},
      // Redis turns CR and LF in error texts into spaces.
      {"*1\r\n\r\n", "ERR Protocol error: expected '$', got ' '"},
      {"*1\r\n\nX\r\n", "ERR Protocol error: expected '$', got ' '"},
  };
  for (const auto& [bytes, error] : cases) {
    const Parsed p = Parse(bytes);
    EXPECT_EQ(p.status, ParseStatus::kError) << bytes;
    EXPECT_EQ(p.error, error) << bytes;
  }
}

TEST(RequestParserTest, ElementTypeIsJudgedOnlyOnceItsLineIsComplete) {
  RequestParser parser;
  parser.Feed("*1\r\n:5", 6);
  EXPECT_EQ(parser.Next(), ParseStatus::kNeedMore);
  parser.Feed("\r\n", 2);
  EXPECT_EQ(parser.Next(), ParseStatus::kError);
  EXPECT_EQ(parser.error(), "ERR Protocol error: expected '$', got ':'");
}

TEST(RequestParserTest, UnbalancedQuotesRefused) {
  for (const char* line : {"SET \"a\r\n", "SET 'a\r\n", "SET \"a\\\"\r\n", "SET 'a\\'\r\n", "\"\n",
                           "'\n", "a\"b\n", "ECHO \"abc\\\n", "ECHO \"\\x4\n"}) {
    const Parsed p = Parse(line);
    EXPECT_EQ(p.status, ParseStatus::kError) << line;
    EXPECT_EQ(p.error, kUnbalanced) << line;
  }
}

TEST(RequestParserTest, ClosingQuoteFollowedByNonSpaceRefused) {
  for (const char* line :
       {"SET \"a\"b\r\n", "SET 'a'b\r\n", "SET 'a'\"b\"\r\n", "\"\"x\n", "GET \"k\"'\n"}) {
    const Parsed p = Parse(line);
    EXPECT_EQ(p.status, ParseStatus::kError) << line;
    EXPECT_EQ(p.error, kUnbalanced) << line;
  }
}

TEST(RequestParserTest, ErrorIsStickyAndLaterBytesAreIgnored) {
  RequestParser parser;
  parser.Feed("*x\r\n", 4);
  EXPECT_EQ(parser.Next(), ParseStatus::kError);
  EXPECT_EQ(parser.error(), kInvalidMbulk);
  EXPECT_EQ(parser.Next(), ParseStatus::kError);
  parser.Feed("PING\r\n", 6);
  EXPECT_EQ(parser.Next(), ParseStatus::kError);
  EXPECT_TRUE(parser.args().empty());
  EXPECT_EQ(parser.error(), kInvalidMbulk);
}

TEST(RequestParserTest, CommandsBeforeAnErrorAreReturnedFirst) {
  const std::string bytes = "PING\r\n*2\r\n$4\r\nECHO\r\n$1\r\na\r\nGET k\n*1\r\n$-3\r\nPING\r\n";
  const Parsed whole = Parse(bytes);
  EXPECT_EQ(whole.commands, (std::vector<Argv>{{"PING"}, {"ECHO", "a"}, {"GET", "k"}}));
  EXPECT_EQ(whole.status, ParseStatus::kError);
  EXPECT_EQ(whole.error, kInvalidBulk);
  const Parsed bytewise = ParseByteByByte(bytes);
  EXPECT_EQ(bytewise.commands, whole.commands);
  EXPECT_EQ(bytewise.error, kInvalidBulk);
}

TEST(RequestParserTest, CommandBeforeUnbalancedInlineLineIsReturnedFirst) {
  const Parsed p = Parse("*1\r\n$4\r\nPING\r\nECHO \"oops\r\nPING\r\n");
  EXPECT_EQ(p.commands, (std::vector<Argv>{{"PING"}}));
  EXPECT_EQ(p.error, kUnbalanced);
}

// ---------------------------------------------------------------------------------------------
// Inline quoting (Redis sdssplitargs)

TEST(RequestParserTest, InlineSplitsOnRunsOfSpacesAndTabs) {
  EXPECT_EQ(Parse("  SET\tk \t  v  \r\n").commands, (std::vector<Argv>{{"SET", "k", "v"}}));
}

TEST(RequestParserTest, InlineDoubleQuotesKeepSpacesAndUnescape) {
  EXPECT_EQ(Parse(R"(ECHO "a b" "\n\r\t\b\a\\\"" "\q\'")"
                  "\n")
                .commands,
            (std::vector<Argv>{{"ECHO", "a b", "\n\r\t\b\a\\\"", "q'"}}));
}

TEST(RequestParserTest, InlineHexEscapesInDoubleQuotes) {
  EXPECT_EQ(Parse(R"(ECHO "\x41\x7a\x00\xFF\xfe" "\xZZ" "\x4g")"
                  "\n")
                .commands,
            (std::vector<Argv>{{"ECHO", "Az\0\xff\xfe"s, "xZZ", "x4g"}}));
}

TEST(RequestParserTest, InlineSingleQuotesOnlyUnescapeQuote) {
  EXPECT_EQ(Parse(R"(ECHO 'it\'s' 'a\nb' '"' 'x y')"
                  "\n")
                .commands,
            (std::vector<Argv>{{"ECHO", "it's", "a\\nb", "\"", "x y"}}));
}

TEST(RequestParserTest, InlineEmptyQuotesGiveEmptyArguments) {
  EXPECT_EQ(Parse("SET k \"\" ''\r\n").commands, (std::vector<Argv>{{"SET", "k", "", ""}}));
}

TEST(RequestParserTest, InlineQuoteInsideTokenStartsQuotedPart) {
  EXPECT_EQ(Parse("ECHO ab\"c d\" x'y z'\n").commands,
            (std::vector<Argv>{{"ECHO", "abc d", "xy z"}}));
}

TEST(RequestParserTest, InlineClosingQuoteMayBeFollowedByAnyBlank) {
  EXPECT_EQ(Parse("ECHO \"a\"\tb \"c\"\vd 'e'\ff \"g\"\r\n").commands,
            (std::vector<Argv>{{"ECHO", "a", "b", "c", "d", "e", "f", "g"}}));
}

TEST(RequestParserTest, InlineVerticalTabAndFormFeedOnlySeparateOutsideTokens) {
  // Leading blanks are skipped with isspace(), but an unquoted token ends only at
  // space, tab, CR or LF.
  EXPECT_EQ(Parse("\vECHO a\vb\fc \fd\n").commands, (std::vector<Argv>{{"ECHO", "a\vb\fc", "d"}}));
}

TEST(RequestParserTest, InlineQuotedCrAndBinaryBytesKept) {
  EXPECT_EQ(Parse("ECHO \"a\rb\" \xc3\xa9\x01\r\n").commands,
            (std::vector<Argv>{{"ECHO", "a\rb", "\xc3\xa9\x01"}}));
}

TEST(RequestParserTest, InlineQuotingSurvivesEveryByteSplit) {
  const std::string bytes = R"(SET "k \"1\"" 'v\'2' "\x41")"
                            "\r\nPING\r\n";
  const std::vector<Argv> expected = {{"SET", "k \"1\"", "v'2", "A"}, {"PING"}};
  for (size_t split = 0; split <= bytes.size(); ++split) {
    const std::string_view view(bytes);
    ASSERT_EQ(ParseChunks({view.substr(0, split), view.substr(split)}).commands, expected)
        << "split at " << split;
  }
}

// ---------------------------------------------------------------------------------------------
// Scale: linear time on long pipelines and on large bodies arriving in small pieces

TEST(RequestParserTest, TenThousandPipelinedCommandsInOneFeedReturnedInOrder) {
  std::string bytes;
  std::vector<Argv> expected;
  for (int i = 0; i < 10000; ++i) {
    Argv argv = {"SET", "key:" + std::to_string(i), std::string(static_cast<size_t>(i % 50), 'v')};
    if (i % 3 == 0) {
      bytes += "SET " + argv[1] + " " + (argv[2].empty() ? "\"\"" : argv[2]) + "\r\n";
    } else {
      bytes += Resp(argv);
    }
    expected.push_back(std::move(argv));
  }
  const Parsed p = Parse(bytes);
  EXPECT_EQ(p.status, ParseStatus::kNeedMore);
  EXPECT_EQ(p.commands, expected);
  EXPECT_EQ(p.buffered, 0u);
}

TEST(RequestParserTest, MillionPipelinedPingsInOneFeedParseInLinearTime) {
  // Quadratic buffer compaction would move gigabytes here and take minutes.
  const std::string ping = "*1\r\n$4\r\nPING\r\n";
  std::string bytes;
  bytes.reserve(ping.size() * 1000000);
  for (int i = 0; i < 1000000; ++i) bytes += ping;
  RequestParser parser;
  const auto start = std::chrono::steady_clock::now();
  parser.Feed(bytes.data(), bytes.size());
  size_t count = 0;
  size_t wrong = 0;
  while (parser.Next() == ParseStatus::kCommand) {
    ++count;
    if (parser.args().size() != 1 || parser.args()[0] != "PING") ++wrong;
  }
  const auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(count, 1000000u);
  EXPECT_EQ(wrong, 0u);
  EXPECT_EQ(parser.buffered(), 0u);
  EXPECT_LT(elapsed, std::chrono::seconds(20));
}

TEST(RequestParserTest, EightMibBulkFedOneByteAtATimeCompletesOnlyAtItsLastByte) {
  const std::string value(8 * 1024 * 1024, 'd');
  const std::string bytes = Resp({"PUBLISH", "q", value});
  RequestParser parser;
  size_t early = 0;
  for (size_t i = 0; i + 1 < bytes.size(); ++i) {
    parser.Feed(&bytes[i], 1);
    if (parser.Next() != ParseStatus::kNeedMore) ++early;
  }
  EXPECT_EQ(early, 0u);
  EXPECT_EQ(parser.buffered(), bytes.size() - 1);
  parser.Feed(&bytes.back(), 1);
  ASSERT_EQ(parser.Next(), ParseStatus::kCommand);
  ASSERT_EQ(parser.args().size(), 3u);
  EXPECT_EQ(parser.args()[0], "PUBLISH");
  EXPECT_EQ(parser.args()[1], "q");
  EXPECT_TRUE(parser.args()[2] == value);
  EXPECT_EQ(parser.buffered(), 0u);
}

TEST(RequestParserTest, LargeBulksInOddSizedChunksInterleavedWithSmallCommands) {
  std::string bytes;
  std::vector<Argv> expected;
  for (int i = 0; i < 20; ++i) {
    Argv big = {"PUBLISH", "q", std::string(static_cast<size_t>(100000 + i * 7919), 'a' + i)};
    bytes += Resp(big) + "PING\r\n";
    expected.push_back(std::move(big));
    expected.push_back({"PING"});
  }
  for (size_t chunk : {1000u, 4093u, 65536u, 1u << 20}) {
    std::vector<std::string_view> chunks;
    for (size_t at = 0; at < bytes.size(); at += chunk) {
      chunks.push_back(std::string_view(bytes).substr(at, chunk));
    }
    const Parsed p = ParseChunks(chunks);
    EXPECT_EQ(p.commands, expected) << "chunk " << chunk;
    EXPECT_EQ(p.buffered, 0u);
  }
}

}  // namespace
}  // namespace deferq::proto
