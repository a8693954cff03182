// Invariants in code (STYLE.md): a condition that can only be false through a bug in deferq.
//
// API:
//   DQ_CHECK(cond);                     always on, release builds included: for cheap conditions
//   DQ_CHECK_MSG(cond, "fmt", ...);     the same, with a printf-style explanation
//   DQ_DCHECK(cond);                    on unless NDEBUG (meson -Db_ndebug=true): for costly ones
//
// A failed check writes one fatal log line (base/log.h, never rate-limited) naming the condition,
// file and line, then aborts: a core dump beats serving on from a state nobody designed. Use it
// where the code would otherwise skip an impossible state silently; a client's or Redis's
// mistake is an error reply or a log line, never a check.
#pragma once

#include "base/log.h"

namespace deferq::base {

[[noreturn]] void CheckFailed(const char* file, int line, const char* condition);
[[noreturn]] void CheckFailedMsg(const char* file, int line, const char* condition, const char* fmt,
                                 ...) __attribute__((format(printf, 4, 5)));

}  // namespace deferq::base

#define DQ_CHECK(cond)                                                                   \
  (__builtin_expect(!(cond), 0) ? ::deferq::base::CheckFailed(__FILE__, __LINE__, #cond) \
                                : static_cast<void>(0))

#define DQ_CHECK_MSG(cond, ...)                                                 \
  (__builtin_expect(!(cond), 0)                                                 \
       ? ::deferq::base::CheckFailedMsg(__FILE__, __LINE__, #cond, __VA_ARGS__) \
       : static_cast<void>(0))

#ifdef NDEBUG
// Compiled (so it cannot rot) but never evaluated.
#define DQ_DCHECK(cond) static_cast<void>(sizeof(!(cond)))
#else
#define DQ_DCHECK(cond) DQ_CHECK(cond)
#endif
