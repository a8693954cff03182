// The log line format, the per-site rate limit, and what actually reaches stderr.
#include "base/log.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdarg>
#include <cstdio>
#include <regex>
#include <string>

namespace deferq::base {
namespace {

std::string Format(int64_t wall_ms, LogLevel level, uint64_t suppressed, size_t cap,
                   const char* fmt, ...) {
  std::string buf(cap, '\0');
  va_list args;
  va_start(args, fmt);
  const size_t n = FormatLogLine(buf.data(), cap, wall_ms, level, suppressed, fmt, args);
  va_end(args);
  buf.resize(n);
  return buf;
}

TEST(LogFormatTest, UtcTimestampWithMillisecondsLevelLetterAndMessage) {
  // 1700000000 s = 2023-11-14T22:13:20Z.
  EXPECT_EQ(Format(1700000000123, LogLevel::kInfo, 0, kMaxLineBytes, "pool %s up (%d)", "x", 42),
            "2023-11-14T22:13:20.123Z I pool x up (42)\n");
  EXPECT_EQ(Format(1700000000007, LogLevel::kDebug, 0, 128, "d"), "2023-11-14T22:13:20.007Z D d\n");
  EXPECT_EQ(Format(1700000000000, LogLevel::kWarning, 0, 128, "w"),
            "2023-11-14T22:13:20.000Z W w\n");
  EXPECT_EQ(Format(1700000000000, LogLevel::kError, 0, 128, "e"), "2023-11-14T22:13:20.000Z E e\n");
  EXPECT_EQ(Format(1700000000000, LogLevel::kFatal, 0, 128, "f"), "2023-11-14T22:13:20.000Z F f\n");
}

TEST(LogFormatTest, NewlinesInTheMessageBecomeSpacesSoAnEventIsOneLine) {
  EXPECT_EQ(Format(1700000000000, LogLevel::kError, 0, 128, "a\nb\r\nc%s", "\n"),
            "2023-11-14T22:13:20.000Z E a b  c \n");
}

TEST(LogFormatTest, ALongMessageIsCutToTheLineLimitAndEndsInDots) {
  const std::string big(5000, 'x');
  const std::string line =
      Format(1700000000000, LogLevel::kInfo, 3, kMaxLineBytes, "%s", big.c_str());
  ASSERT_EQ(line.size(), kMaxLineBytes);
  const std::string suffix = "... (3 similar lines suppressed)\n";
  EXPECT_EQ(line.substr(line.size() - suffix.size()), suffix);
  EXPECT_EQ(line.substr(0, 27), "2023-11-14T22:13:20.000Z I ");
  EXPECT_EQ(line.find('\n'), line.size() - 1);
}

TEST(LogFormatTest, SuppressedLinesAreCountedOnTheNextLine) {
  EXPECT_EQ(Format(1700000000000, LogLevel::kWarning, 17, 128, "drop"),
            "2023-11-14T22:13:20.000Z W drop (17 similar lines suppressed)\n");
}

TEST(LogSiteTest, BurstPerIntervalThenSuppressedUntilTheNextWindowWhichReportsTheCount) {
  LogSite site;
  uint64_t suppressed = 99;
  for (int i = 0; i < kLogBurst; ++i) {
    ASSERT_TRUE(site.Admit(1000 + i, &suppressed)) << i;
    EXPECT_EQ(suppressed, 0u);
  }
  for (int i = 0; i < 25; ++i) EXPECT_FALSE(site.Admit(1100 + i, &suppressed)) << i;
  EXPECT_FALSE(site.Admit(1000 + kLogIntervalMs - 1, &suppressed));
  ASSERT_TRUE(site.Admit(1000 + kLogIntervalMs, &suppressed));
  EXPECT_EQ(suppressed, 26u);
  ASSERT_TRUE(site.Admit(1000 + kLogIntervalMs + 1, &suppressed));
  EXPECT_EQ(suppressed, 0u);
}

// Runs `fn` with stderr redirected to a temporary file; returns what was written.
template <typename Fn>
std::string CaptureStderr(Fn fn) {
  FILE* tmp = tmpfile();
  EXPECT_NE(tmp, nullptr);
  const int saved = dup(STDERR_FILENO);
  dup2(fileno(tmp), STDERR_FILENO);
  fn();
  dup2(saved, STDERR_FILENO);
  close(saved);
  std::string out;
  rewind(tmp);
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), tmp)) > 0) out.append(buf, n);
  fclose(tmp);
  return out;
}

TEST(LogLevelTest, ParseLogLevelKnowsTheFourConfigurableNames) {
  LogLevel level = LogLevel::kFatal;
  ASSERT_TRUE(ParseLogLevel("debug", &level));
  EXPECT_EQ(level, LogLevel::kDebug);
  ASSERT_TRUE(ParseLogLevel("info", &level));
  EXPECT_EQ(level, LogLevel::kInfo);
  ASSERT_TRUE(ParseLogLevel("warning", &level));
  EXPECT_EQ(level, LogLevel::kWarning);
  ASSERT_TRUE(ParseLogLevel("error", &level));
  EXPECT_EQ(level, LogLevel::kError);
  EXPECT_FALSE(ParseLogLevel("fatal", &level));
  EXPECT_FALSE(ParseLogLevel("INFO", &level));
  EXPECT_FALSE(ParseLogLevel("", &level));
  EXPECT_EQ(level, LogLevel::kError);
}

TEST(LogTest, AFloodFromOneCallSiteWritesOnlyTheBurst) {
  const std::string out = CaptureStderr([] {
    for (int i = 0; i < 1000; ++i) DQ_LOG(kWarning, "flood %d", i);
  });
  const std::regex line(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z W flood (\d+)\n)");
  int lines = 0;
  for (auto it = std::sregex_iterator(out.begin(), out.end(), line); it != std::sregex_iterator();
       ++it) {
    EXPECT_EQ((*it)[1].str(), std::to_string(lines));
    ++lines;
  }
  EXPECT_EQ(lines, kLogBurst) << out;
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), kLogBurst) << out;
}

TEST(LogTest, LinesBelowTheMinimumLevelAreDropped) {
  const std::string out = CaptureStderr([] {
    SetMinLogLevel(LogLevel::kWarning);
    DQ_LOG(kInfo, "quiet");
    DQ_LOG(kError, "loud");
    SetMinLogLevel(LogLevel::kInfo);
    DQ_LOG(kInfo, "heard");
  });
  EXPECT_EQ(out.find("quiet"), std::string::npos) << out;
  EXPECT_NE(out.find(" E loud\n"), std::string::npos) << out;
  EXPECT_NE(out.find(" I heard\n"), std::string::npos) << out;
  EXPECT_EQ(MinLogLevel(), LogLevel::kInfo);
}

}  // namespace
}  // namespace deferq::base
