// Encoding between deferq's replies and what the storage scripts take and return: the binary job
// record of docs/storage.md, bucket positions, and the job lists scripts return.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "persist/reply_reader.h"
#include "persist/reply_view.h"
#include "persist/upstream_link.h"
#include "proto/reply_writer.h"

namespace deferq::queue {

using persist::kUnexpectedReply;

struct NewJob {
  int64_t created_ms = 0;
  uint32_t ttl_s = 0;  // 0 = never expires
  uint32_t tries = 1;
  uint32_t every_s = 0;
  std::string_view schedule;  // CRON's block (schedule::EncodeSchedule): the long E block
  uint32_t backoff_s = 0;
  uint32_t backoff_max_s = 0;   // BACKOFF ... MAX s; 0: the one-day cap (below 2^31)
  bool backoff_jitter = false;  // BACKOFF ... JITTER
  uint8_t priority = 0;         // PRIORITY level, 0..9 (0: none; the long T block otherwise)
  // Results (common/outcomes.lua retire): RETAIN s keeps the job's outcome s seconds after it
  // finishes; notify: a requester waits for it (CALL), so its end is announced. Either takes the
  // long T block.
  uint32_t retain_s = 0;
  bool notify = false;
  int64_t at_ms = 0;     // 0 = absent (the script adds it where the position does not imply it)
  bool delayed = false;  // the state bits: delayed (its due time is after now) or ready
  std::string_view payload;
};

// The record as stored, state bits included (publish.lua stores a record whose bits are right as
// it is, without rebuilding the string).
std::string EncodeRecord(const NewJob& job);

// One job as a consume / peek / dead-letter peek script returns it (6 elements per job:
// K, payload, tries_left, ttl_left_s, attempt, created_ms).
struct JobEntry {
  std::string ns;
  std::string queue;
  std::string key;  // canonical key K
  std::string payload;
  int64_t tries_left = 0;
  int64_t ttl_left_s = -1;
  int64_t attempt = 0;
  int64_t created_ms = 0;
  // DEADLETTER PEEK ... WITHERRORS: why its last failed attempt failed (has_error false: none).
  bool has_error = false;
  std::string last_error;
  int64_t last_error_attempt = 0;
  int64_t last_error_ms = 0;
};
inline constexpr size_t kJobFields = 6;
// With errors (deadletter.lua peek "errors"), each job's fields are followed by 3 more: reason
// (nil: none), its attempt and when.
inline constexpr size_t kJobErrorFields = 3;

// Appends the jobs of a script reply; false if the reply does not have that shape.
// `skip` leading elements are not jobs (consume.lua puts its ready gauge first).
bool DecodeJobs(persist::ReplyView reply, size_t skip, const std::string& ns,
                const std::string& queue, std::vector<JobEntry>* out, bool with_errors = false);
// Appends the one job whose kJobFields fields begin at reply[at].
bool DecodeJobSpan(persist::ReplyView reply, size_t at, const std::string& ns,
                   const std::string& queue, std::vector<JobEntry>* out);

// A job in a reply, the same array in RESP2 and RESP3 (a job is a tuple, as BLPOP's reply is):
// [queue, id, payload, tries_left, ttl_left_s, attempt, elapsed_ms]; with_errors (DEADLETTER
// PEEK ... WITHERRORS) adds last_error (null: none), last_error_attempt, last_error_ms.
inline constexpr size_t kJobReplyFields = 7;
void WriteJob(proto::ReplyWriter& w, const JobEntry& job, int64_t wall_ms,
              bool with_errors = false);
// PEEK and DEADLETTER PEEK: an array of jobs, possibly empty.
void WriteJobs(proto::ReplyWriter& w, const std::vector<JobEntry>& jobs, int64_t wall_ms,
               bool with_errors = false);
// CONSUME: a null when no job came; one job without COUNT; an array of jobs with COUNT.
void WriteConsumeReply(proto::ReplyWriter& w, const std::vector<JobEntry>& jobs, bool with_count,
                       int64_t wall_ms);
// JOB: the job.lua reply {state, payload, tries_left, attempt, created_ms, due_ms, ttl_left_s,
// every_s, backoff_s} as a map (RESP2: flat field/value array), or a null for an unknown job.
void WriteJobInfo(proto::ReplyWriter& w, std::string_view queue, std::string_view id,
                  persist::ReplyView r);
// QSTAT: the qstat.lua reply as a map of counts and totals.
void WriteQueueStats(proto::ReplyWriter& w, persist::ReplyView r);

// An upstream call's answer to a client: its failure (persist::FailureOf) as the error reply,
// else what `write(out, reply)` makes of Redis's reply.
template <typename Write>
void WriteUpstreamReply(proto::ReplyWriter& out, const persist::UpstreamResult& r,
                        const Write& write) {
  if (std::string e = persist::FailureOf(r); !e.empty()) return out.Error(e);
  write(out, r.view());
}
// QSTAT of a sharded queue: the shards' figures summed (paused when any shard is).
struct QueueStatsSum {
  std::array<int64_t, 9> counts{};  // ready .. dead_total, qstat.lua's first 9 elements
  int64_t paused = 0;
  int64_t schedules = 0;  // recurring jobs (EVERY, CRON), summed over the shards
};
bool AddQueueStats(persist::ReplyView r, QueueStatsSum* sum);  // false: not a qstat.lua reply
void WriteQueueStatsSum(proto::ReplyWriter& w, const QueueStatsSum& sum);

}  // namespace deferq::queue
