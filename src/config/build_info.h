// Facts about this build that --version and INFO server print.
#pragma once

#include <cstdint>
#include <string>

namespace deferq {

inline constexpr const char* kVersion = DEFERQ_VERSION;

// "mimalloc 2.0.9" when mimalloc serves this process's malloc (checked by asking mimalloc whether
// a pointer from plain malloc lies in its heap), else "libc malloc (mimalloc 2.0.9 linked, not
// in use)"; "libc malloc (built without mimalloc)" in a -Dmimalloc=false (sanitizer) build.
std::string AllocatorDescription();

// The process's memory, for INFO's memory section (Redis's names): `rss` is the resident set
// (/proc/self/statm, as Redis reads it), `rss_peak` the largest so far (getrusage). `used` and
// `used_peak` are what deferq holds: the resident set and its peak (see build_info.cc).
// The resident set in bytes (/proc/self/statm; procfs is served from memory, so this read never
// waits on a device); 0 if it cannot be read. /metrics and INFO memory show it.
uint64_t ResidentBytes();

struct ProcessMemory {
  uint64_t used = 0;
  uint64_t used_peak = 0;
  uint64_t rss = 0;
  uint64_t rss_peak = 0;
};
ProcessMemory ReadProcessMemory();

}  // namespace deferq
