#include "proto/reply_writer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <string>

namespace deferq::proto {
namespace {

using namespace std::string_literals;

// Runs `write` against a fresh writer speaking `resp` and returns the bytes it produced.
std::string Write(int resp, const std::function<void(ReplyWriter&)>& write) {
  std::string out;
  ReplyWriter writer(&out, resp);
  write(writer);
  return out;
}

std::string Resp2(const std::function<void(ReplyWriter&)>& write) { return Write(2, write); }
std::string Resp3(const std::function<void(ReplyWriter&)>& write) { return Write(3, write); }

// The text part of a Double() reply in RESP3 (",<text>\r\n").
std::string DoubleText(double d) {
  const std::string out = Resp3([&](ReplyWriter& w) { w.Double(d); });
  EXPECT_EQ(out.front(), ',');
  EXPECT_EQ(out.substr(out.size() - 2), "\r\n");
  return out.substr(1, out.size() - 3);
}

TEST(ReplyWriterTest, ReportsAndSwitchesProtocolVersion) {
  std::string out;
  ReplyWriter writer(&out, 2);
  EXPECT_EQ(writer.resp(), 2);
  EXPECT_EQ(writer.buffer(), &out);
  writer.Null();
  writer.set_resp(3);
  EXPECT_EQ(writer.resp(), 3);
  writer.Null();
  EXPECT_EQ(out, "$-1\r\n_\r\n");
}

TEST(ReplyWriterTest, AppendsAfterExistingBufferContent) {
  std::string out = "+PONG\r\n";
  ReplyWriter writer(&out, 2);
  writer.Integer(7);
  writer.Bulk("x");
  EXPECT_EQ(out, "+PONG\r\n:7\r\n$1\r\nx\r\n");
}

TEST(ReplyWriterTest, SimpleStringIsTheSameInBothProtocols) {
  for (int resp : {2, 3}) {
    EXPECT_EQ(Write(resp, [](ReplyWriter& w) { w.Simple("PONG"); }), "+PONG\r\n");
    EXPECT_EQ(Write(resp, [](ReplyWriter& w) { w.Simple(""); }), "+\r\n");
    EXPECT_EQ(Write(resp, [](ReplyWriter& w) { w.Ok(); }), "+OK\r\n");
  }
}

TEST(ReplyWriterTest, SimpleStringCrLfBecomeSpaces) {
  EXPECT_EQ(Resp2([](ReplyWriter& w) { w.Simple("a\r\nb\rc\nd"); }), "+a  b c d\r\n");
}

TEST(ReplyWriterTest, ErrorWithCodeWordWrittenAsIs) {
  for (int resp : {2, 3}) {
    EXPECT_EQ(Write(resp, [](ReplyWriter& w) { w.Error("ERR syntax error"); }),
              "-ERR syntax error\r\n");
    EXPECT_EQ(Write(resp, [](ReplyWriter& w) { w.Error("NOAUTH Authentication required."); }),
              "-NOAUTH Authentication required.\r\n");
    EXPECT_EQ(Write(resp, [](ReplyWriter& w) { w.Error("TRYAGAIN pool 'x' unavailable"); }),
              "-TRYAGAIN pool 'x' unavailable\r\n");
  }
}

TEST(ReplyWriterTest, ErrorWithoutUpperCaseCodeGetsErrPrefix) {
  EXPECT_EQ(Resp2([](ReplyWriter& w) { w.Error("value is not an integer or out of range"); }),
            "-ERR value is not an integer or out of range\r\n");
  EXPECT_EQ(Resp2([](ReplyWriter& w) { w.Error("1 bad"); }), "-ERR 1 bad\r\n");
  EXPECT_EQ(Resp2([](ReplyWriter& w) { w.Error(" space"); }), "-ERR  space\r\n");
  EXPECT_EQ(Resp2([](ReplyWriter& w) { w.Error("-ERR dash"); }), "-ERR -ERR dash\r\n");
  EXPECT_EQ(Resp2([](ReplyWriter& w) { w.Error(""); }), "-ERR \r\n");
}

TEST(ReplyWriterTest, ErrorCrLfBecomeSpaces) {
  EXPECT_EQ(Resp2([](ReplyWriter& w) { w.Error("ERR bad\r\nthing\n"); }), "-ERR bad  thing \r\n");
  EXPECT_EQ(Resp3([](ReplyWriter& w) { w.Error("\nleading"); }), "-ERR  leading\r\n");
  // The user-supplied part of an unknown-command error can hold anything.
  EXPECT_EQ(Resp2([](ReplyWriter& w) {
              w.Error("ERR unknown command 'a\r\n*1', with args beginning with: ");
            }),
            "-ERR unknown command 'a  *1', with args beginning with: \r\n");
}

TEST(ReplyWriterTest, IntegerCoversTheWholeInt64Range) {
  for (int resp : {2, 3}) {
    EXPECT_EQ(Write(resp, [](ReplyWriter& w) { w.Integer(0); }), ":0\r\n");
    EXPECT_EQ(Write(resp, [](ReplyWriter& w) { w.Integer(-1); }), ":-1\r\n");
    EXPECT_EQ(Write(resp, [](ReplyWriter& w) { w.Integer(1234567890123); }), ":1234567890123\r\n");
    EXPECT_EQ(Write(resp, [](ReplyWriter& w) { w.Integer(INT64_MAX); }),
              ":9223372036854775807\r\n");
    EXPECT_EQ(Write(resp, [](ReplyWriter& w) { w.Integer(INT64_MIN); }),
              ":-9223372036854775808\r\n");
  }
}

TEST(ReplyWriterTest, BulkIsLengthPrefixedAndBinarySafe) {
  std::string all_bytes;
  for (int b = 0; b < 256; ++b) all_bytes.push_back(static_cast<char>(b));
  for (int resp : {2, 3}) {
    EXPECT_EQ(Write(resp, [](ReplyWriter& w) { w.Bulk("hello"); }), "$5\r\nhello\r\n");
    EXPECT_EQ(Write(resp, [](ReplyWriter& w) { w.Bulk(""); }), "$0\r\n\r\n");
    EXPECT_EQ(Write(resp, [](ReplyWriter& w) { w.Bulk("a\r\n\0b"s); }), "$5\r\na\r\n\0b\r\n"s);
    EXPECT_EQ(Write(resp, [&](ReplyWriter& w) { w.Bulk(all_bytes); }),
              "$256\r\n" + all_bytes + "\r\n");
  }
}

TEST(ReplyWriterTest, BigBulkHeaderCarriesTheFullLength) {
  const std::string big(10 * 1024 * 1024 + 3, 'x');
  const std::string out = Resp2([&](ReplyWriter& w) { w.Bulk(big); });
  EXPECT_EQ(out.size(), std::string("$10485763\r\n").size() + big.size() + 2);
  EXPECT_EQ(out.substr(0, 11), "$10485763\r\n");
  EXPECT_EQ(out.substr(out.size() - 3), "x\r\n");
}

TEST(ReplyWriterTest, NullIsBulkNullInResp2AndUnderscoreInResp3) {
  EXPECT_EQ(Resp2([](ReplyWriter& w) { w.Null(); }), "$-1\r\n");
  EXPECT_EQ(Resp3([](ReplyWriter& w) { w.Null(); }), "_\r\n");
}

TEST(ReplyWriterTest, NullArrayIsStarMinusOneInResp2AndUnderscoreInResp3) {
  EXPECT_EQ(Resp2([](ReplyWriter& w) { w.NullArray(); }), "*-1\r\n");
  EXPECT_EQ(Resp3([](ReplyWriter& w) { w.NullArray(); }), "_\r\n");
}

TEST(ReplyWriterTest, ArrayHeaderIsTheSameInBothProtocols) {
  for (int resp : {2, 3}) {
    EXPECT_EQ(Write(resp, [](ReplyWriter& w) { w.ArrayHeader(0); }), "*0\r\n");
    EXPECT_EQ(Write(resp, [](ReplyWriter& w) { w.ArrayHeader(5); }), "*5\r\n");
    EXPECT_EQ(Write(resp, [](ReplyWriter& w) { w.ArrayHeader(SIZE_MAX); }),
              "*18446744073709551615\r\n");
  }
}

TEST(ReplyWriterTest, MapHeaderIsFlatArrayInResp2AndPercentInResp3) {
  EXPECT_EQ(Resp2([](ReplyWriter& w) { w.MapHeader(3); }), "*6\r\n");
  EXPECT_EQ(Resp2([](ReplyWriter& w) { w.MapHeader(0); }), "*0\r\n");
  EXPECT_EQ(Resp3([](ReplyWriter& w) { w.MapHeader(3); }), "%3\r\n");
  EXPECT_EQ(Resp3([](ReplyWriter& w) { w.MapHeader(0); }), "%0\r\n");
}

TEST(ReplyWriterTest, SetHeaderIsArrayInResp2AndTildeInResp3) {
  EXPECT_EQ(Resp2([](ReplyWriter& w) { w.SetHeader(4); }), "*4\r\n");
  EXPECT_EQ(Resp3([](ReplyWriter& w) { w.SetHeader(4); }), "~4\r\n");
  EXPECT_EQ(Resp3([](ReplyWriter& w) { w.SetHeader(0); }), "~0\r\n");
}

TEST(ReplyWriterTest, NestedMapOfMixedValuesEncodesPerProtocol) {
  auto job = [](ReplyWriter& w) {
    w.MapHeader(2);
    w.Bulk("id");
    w.Bulk("01J");
    w.Bulk("ttl_left_s");
    w.Integer(-1);
  };
  EXPECT_EQ(Resp2(job), "*4\r\n$2\r\nid\r\n$3\r\n01J\r\n$10\r\nttl_left_s\r\n:-1\r\n");
  EXPECT_EQ(Resp3(job), "%2\r\n$2\r\nid\r\n$3\r\n01J\r\n$10\r\nttl_left_s\r\n:-1\r\n");
}

TEST(ReplyWriterTest, VerbatimIsPlainBulkInResp2) {
  EXPECT_EQ(Resp2([](ReplyWriter& w) { w.Verbatim("# Server\r\nx:1\r\n"); }),
            "$15\r\n# Server\r\nx:1\r\n\r\n");
  EXPECT_EQ(Resp2([](ReplyWriter& w) { w.Verbatim(""); }), "$0\r\n\r\n");
}

TEST(ReplyWriterTest, VerbatimInResp3CountsTheTxtPrefix) {
  EXPECT_EQ(Resp3([](ReplyWriter& w) { w.Verbatim("# Server\r\nx:1\r\n"); }),
            "=19\r\ntxt:# Server\r\nx:1\r\n\r\n");
  EXPECT_EQ(Resp3([](ReplyWriter& w) { w.Verbatim(""); }), "=4\r\ntxt:\r\n");
}

TEST(ReplyWriterTest, DoubleIsBulkInResp2AndCommaInResp3) {
  EXPECT_EQ(Resp2([](ReplyWriter& w) { w.Double(1.5); }), "$3\r\n1.5\r\n");
  EXPECT_EQ(Resp3([](ReplyWriter& w) { w.Double(1.5); }), ",1.5\r\n");
  EXPECT_EQ(Resp2([](ReplyWriter& w) { w.Double(0.1); }), "$3\r\n0.1\r\n");
  EXPECT_EQ(Resp3([](ReplyWriter& w) { w.Double(-2); }), ",-2\r\n");
}

TEST(ReplyWriterTest, DoubleInfinitiesAreSpelledOut) {
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(Resp2([&](ReplyWriter& w) { w.Double(inf); }), "$3\r\ninf\r\n");
  EXPECT_EQ(Resp2([&](ReplyWriter& w) { w.Double(-inf); }), "$4\r\n-inf\r\n");
  EXPECT_EQ(Resp3([&](ReplyWriter& w) { w.Double(inf); }), ",inf\r\n");
  EXPECT_EQ(Resp3([&](ReplyWriter& w) { w.Double(-inf); }), ",-inf\r\n");
  EXPECT_EQ(DoubleText(std::numeric_limits<double>::quiet_NaN()), "nan");
}

TEST(ReplyWriterTest, DoubleUsesShortestDigitsInPercentGLayout) {
  EXPECT_EQ(DoubleText(0), "0");
  EXPECT_EQ(DoubleText(-0.0), "-0");
  EXPECT_EQ(DoubleText(3), "3");
  EXPECT_EQ(DoubleText(100), "100");
  EXPECT_EQ(DoubleText(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(DoubleText(1.0 / 3), "0.3333333333333333");
  EXPECT_EQ(DoubleText(123.456), "123.456");
  // Fixed notation for decimal exponents -4 .. 16, as "%.17g" does.
  EXPECT_EQ(DoubleText(0.0001), "0.0001");
  EXPECT_EQ(DoubleText(1e16), "10000000000000000");
  EXPECT_EQ(DoubleText(9007199254740993.0), "9007199254740992");
  // Scientific outside it, with at least two exponent digits.
  EXPECT_EQ(DoubleText(0.00001), "1e-05");
  EXPECT_EQ(DoubleText(1.5e-7), "1.5e-07");
  EXPECT_EQ(DoubleText(1e17), "1e+17");
  EXPECT_EQ(DoubleText(1.25e100), "1.25e+100");
  EXPECT_EQ(DoubleText(-1e300), "-1e+300");
  EXPECT_EQ(DoubleText(5e-324), "5e-324");
  EXPECT_EQ(DoubleText(std::numeric_limits<double>::max()), "1.7976931348623157e+308");
}

TEST(ReplyWriterTest, DoubleTextReadsBackAsTheSameValue) {
  const double values[] = {
      0.1,       2.0 / 3,         1e-4,    9.999999999999999e16,    1e23, 6.02214076e23,
      -4.9e-324, 1234567.0000001, 86400.5, std::nextafter(1.0, 2.0)};
  for (double d : values) {
    const std::string text = DoubleText(d);
    EXPECT_EQ(std::strtod(text.c_str(), nullptr), d) << text;
    EXPECT_LE(text.size(), 24u) << text;
  }
}

TEST(ReplyWriterTest, BoolIsIntegerInResp2AndHashInResp3) {
  EXPECT_EQ(Resp2([](ReplyWriter& w) { w.Bool(true); }), ":1\r\n");
  EXPECT_EQ(Resp2([](ReplyWriter& w) { w.Bool(false); }), ":0\r\n");
  EXPECT_EQ(Resp3([](ReplyWriter& w) { w.Bool(true); }), "#t\r\n");
  EXPECT_EQ(Resp3([](ReplyWriter& w) { w.Bool(false); }), "#f\r\n");
}

}  // namespace
}  // namespace deferq::proto
