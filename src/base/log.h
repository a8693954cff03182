// The log: one line per event on stderr, with a UTC timestamp and a level, rate-limited per call
// site so that a flood (a client loop, a flapping pool) cannot fill a disk.
//
// API:
//   DQ_LOG(kInfo, "pool '%s' connection up (%s:%u)", ...);   printf-style, one line
//   SetMinLogLevel(LogLevel::kWarning);                        lines below it are dropped
//
// A line reads
//   2026-11-23T15:12:48.123Z W pool 'default' connection down (127.0.0.1:6379): ...
// with the level as one letter: D debug, I info, W warning, E error, F fatal (a failed DQ_CHECK,
// see check.h). Newlines inside the message become spaces; a message longer than kMaxLineBytes
// is cut and ends in "...".
//
// Rate limit (the facts of Linux's printk_ratelimit: a burst of 10 per 5 s): each DQ_LOG call
// site writes at most kLogBurst lines per kLogIntervalMs; the lines it drops meanwhile are
// counted and the next line it writes ends in "(N similar lines suppressed)". A site that floods
// thus costs at most 2 lines a second, whatever the client does.
//
// Each line goes out in one write(2) on the calling thread: lines of different threads never
// interleave (stderr is unbuffered; a line is well below PIPE_BUF). The call blocks only as long
// as stderr does, which the rate limit bounds. base/ includes nothing of the other rooms.
#pragma once

#include <atomic>
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace deferq::base {

enum class LogLevel : int { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3, kFatal = 4 };

inline constexpr int kLogBurst = 10;
inline constexpr int64_t kLogIntervalMs = 5000;
inline constexpr size_t kMaxLineBytes = 1024;  // including timestamp, level and newline

void SetMinLogLevel(LogLevel level);
LogLevel MinLogLevel();
// "debug", "info", "warning", "error" (the config key server.loglevel); false for others.
bool ParseLogLevel(std::string_view name, LogLevel* out);
// The name ParseLogLevel reads ("error" for kError and kFatal).
const char* LogLevelName(LogLevel level);

// The rate limit of one call site (a function-local static of DQ_LOG). Thread-safe; under a race
// a window may admit a line or two more than kLogBurst.
class LogSite {
 public:
  // True when a line at `now_ms` may be written; then *suppressed is how many were dropped since
  // the last line written (and that count restarts from 0).
  bool Admit(int64_t now_ms, uint64_t* suppressed);

 private:
  std::atomic<int64_t> window_start_ms_{-1};  // -1: no line yet
  std::atomic<int> in_window_{0};
  std::atomic<uint64_t> suppressed_{0};
};

// Formats one line into buf (at most `cap` bytes, cap >= 128) and returns its length, newline
// included. Exposed for tests; DQ_LOG is the way to log.
size_t FormatLogLine(char* buf, size_t cap, int64_t wall_ms, LogLevel level, uint64_t suppressed,
                     const char* fmt, va_list args);

// Writes one line through `site`'s rate limit (nullptr: no limit). Use DQ_LOG.
void LogLine(LogSite* site, LogLevel level, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));

}  // namespace deferq::base

// DQ_LOG(kWarning, "fmt", args...): one line at that level, rate-limited per call site.
#define DQ_LOG(level, ...)                                                                \
  do {                                                                                    \
    static ::deferq::base::LogSite dq_log_site_;                                          \
    ::deferq::base::LogLine(&dq_log_site_, ::deferq::base::LogLevel::level, __VA_ARGS__); \
  } while (0)
