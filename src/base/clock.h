// The two clocks deferq reads, in milliseconds (and microseconds): monotonic (timers, deadlines,
// leases held by this process) and real time (unix ms: job due times, anything stored in Redis or
// shown to clients). The loops read them once per iteration and hand the values down (queue::Loop);
// these are for the places outside a loop's iteration.
#pragma once

#include <time.h>

#include <cstdint>

namespace deferq::base {

inline int64_t ClockMs(clockid_t clock) {
  struct timespec ts;
  clock_gettime(clock, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

inline int64_t ClockUs(clockid_t clock) {
  struct timespec ts;
  clock_gettime(clock, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000 + ts.tv_nsec / 1000;
}

inline int64_t MonotonicMs() { return ClockMs(CLOCK_MONOTONIC); }
inline int64_t RealtimeMs() { return ClockMs(CLOCK_REALTIME); }
// Microseconds: latency histograms (monotonic) and TIME's reply (real time).
inline int64_t MonotonicUs() { return ClockUs(CLOCK_MONOTONIC); }
inline int64_t RealtimeUs() { return ClockUs(CLOCK_REALTIME); }

}  // namespace deferq::base
