#include "base/log.h"

#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>

#include "base/clock.h"

namespace deferq::base {
namespace {

std::atomic<int> min_level{static_cast<int>(LogLevel::kInfo)};

constexpr char kLevelLetters[] = {'D', 'I', 'W', 'E', 'F'};
static_assert(sizeof(kLevelLetters) == static_cast<size_t>(LogLevel::kFatal) + 1,
              "one letter per level");

void WriteAll(const char* p, size_t n) {
  while (n > 0) {
    const ssize_t w = write(STDERR_FILENO, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return;  // stderr is gone: nowhere left to say so
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
}

void Emit(LogSite* site, LogLevel level, const char* fmt, va_list args) {
  const int64_t now = RealtimeMs();
  uint64_t suppressed = 0;
  if (site != nullptr && !site->Admit(now, &suppressed)) return;
  char buf[kMaxLineBytes];
  WriteAll(buf, FormatLogLine(buf, sizeof(buf), now, level, suppressed, fmt, args));
}

}  // namespace

void SetMinLogLevel(LogLevel level) {
  min_level.store(static_cast<int>(level), std::memory_order_relaxed);
}

namespace {
constexpr const char* kLevelNames[] = {"debug", "info", "warning", "error"};
}  // namespace

const char* LogLevelName(LogLevel level) {
  const auto i = static_cast<size_t>(level);
  return i < std::size(kLevelNames) ? kLevelNames[i] : "error";
}

bool ParseLogLevel(std::string_view name, LogLevel* out) {
  static constexpr std::string_view kNames[] = {kLevelNames[0], kLevelNames[1], kLevelNames[2],
                                                kLevelNames[3]};
  for (size_t i = 0; i < std::size(kNames); ++i) {
    if (name == kNames[i]) {
      *out = static_cast<LogLevel>(i);
      return true;
    }
  }
  return false;
}

LogLevel MinLogLevel() { return static_cast<LogLevel>(min_level.load(std::memory_order_relaxed)); }

bool LogSite::Admit(int64_t now_ms, uint64_t* suppressed) {
  int64_t start = window_start_ms_.load(std::memory_order_relaxed);
  if (start < 0 || now_ms - start >= kLogIntervalMs || now_ms < start) {
    // A new window; of racing threads, one resets the count.
    if (window_start_ms_.compare_exchange_strong(start, now_ms, std::memory_order_relaxed)) {
      in_window_.store(0, std::memory_order_relaxed);
    }
  }
  if (in_window_.fetch_add(1, std::memory_order_relaxed) >= kLogBurst) {
    suppressed_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  *suppressed = suppressed_.exchange(0, std::memory_order_relaxed);
  return true;
}

size_t FormatLogLine(char* buf, size_t cap, int64_t wall_ms, LogLevel level, uint64_t suppressed,
                     const char* fmt, va_list args) {
  if (cap < 128) return 0;  // too small for a line (no DQ_CHECK here: it logs through this)
  const time_t secs = static_cast<time_t>(wall_ms / 1000);
  tm utc;
  gmtime_r(&secs, &utc);
  int n = snprintf(buf, cap, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ %c ", utc.tm_year + 1900,
                   utc.tm_mon + 1, utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec,
                   static_cast<int>(wall_ms % 1000), kLevelLetters[static_cast<int>(level)]);
  size_t len = static_cast<size_t>(n);
  // Room for the message: the suffix and the newline are kept out of it.
  char suffix[64] = "";
  if (suppressed > 0) {
    snprintf(suffix, sizeof(suffix), " (%llu similar lines suppressed)",
             static_cast<unsigned long long>(suppressed));
  }
  const size_t suffix_len = strlen(suffix);
  const size_t room = cap - len - suffix_len - 1;              // -1: the newline
  const int want = vsnprintf(buf + len, room + 1, fmt, args);  // +1: vsnprintf's terminator
  size_t msg_len = want < 0 ? 0 : static_cast<size_t>(want);
  if (msg_len > room) {
    msg_len = room;
    memcpy(buf + len + room - 3, "...", 3);
  }
  for (size_t i = len; i < len + msg_len; ++i) {
    if (buf[i] == '\n' || buf[i] == '\r') buf[i] = ' ';
  }
  len += msg_len;
  memcpy(buf + len, suffix, suffix_len);
  len += suffix_len;
  buf[len++] = '\n';
  return len;
}

void LogLine(LogSite* site, LogLevel level, const char* fmt, ...) {
  if (static_cast<int>(level) < min_level.load(std::memory_order_relaxed)) return;
  va_list args;
  va_start(args, fmt);
  Emit(site, level, fmt, args);
  va_end(args);
}

void CheckFailed(const char* file, int line, const char* condition) {
  LogLine(nullptr, LogLevel::kFatal, "check failed: %s at %s:%d", condition, file, line);
  abort();
}

void CheckFailedMsg(const char* file, int line, const char* condition, const char* fmt, ...) {
  char why[512];
  va_list args;
  va_start(args, fmt);
  vsnprintf(why, sizeof(why), fmt, args);
  va_end(args);
  LogLine(nullptr, LogLevel::kFatal, "check failed: %s at %s:%d: %s", condition, file, line, why);
  abort();
}

}  // namespace deferq::base
