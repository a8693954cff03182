// The ranges of a job's numbers (docs/commands.md, errors and limits), one source for the commands'
// parsers (queue/commands/job_requests.cc) and the configuration's [defaults] (config/load.cc):
// what one accepts the other accepts, and the record the storage scripts keep can hold it.
#pragma once

#include <cstddef>
#include <cstdint>

namespace deferq {

// DELAY, TTL, EVERY, BACKOFF, TIMEOUT: a century keeps every ms sum far from overflow and fits
// the record's 32-bit seconds.
inline constexpr int64_t kMaxDurationS = 100LL * 365 * 86400;
// TTR: a lease length is kept in ms in 32 bits (the record's R block), so 4,294,967 s (49 days).
inline constexpr int64_t kMaxTtrS = 4294967;
// TRIES: 16 bits in the record.
inline constexpr int64_t kMaxTries = 65535;
// PRIORITY levels: 0 (none) to 9; the levels above 0 share one sorted set per queue, so their
// number costs nothing (docs/commands.md PRIORITY).
inline constexpr int64_t kMaxPriority = 9;
// COUNT of CONSUME, PEEK and the dead letter's commands.
inline constexpr int64_t kMaxCount = 1000;
// A time in ms since the epoch that names a due time (BROWSE ... FROM): 48 bits, as a generated
// job key holds one.
inline constexpr int64_t kMaxTimestampMs = (int64_t{1} << 48) - 1;
// BACKOFF ... MAX: 31 bits in the record (the top bit is JITTER's), so 68 years.
inline constexpr int64_t kMaxBackoffCapS = 2147483647;
// NACK REASON: the bytes kept of a reason (a longer one is cut at a UTF-8 character boundary);
// the storage scripts keep at most this many (common/outcomes.lua MAX_REASON).
inline constexpr size_t kMaxReasonBytes = 512;

}  // namespace deferq
