#include "queue/model/job_codec.h"

#include <algorithm>
#include <charconv>
#include <iterator>

#include "queue/model/job_id.h"
#include "queue/model/queue_figures.h"
#include "queue/model/shards.h"

namespace deferq::queue {

namespace {

void PutLE(std::string* out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

// Record flag bits (docs/storage.md).
constexpr uint8_t kFlagTries = 1 << 2;
constexpr uint8_t kFlagEvery = 1 << 3;
constexpr uint8_t kFlagBackoff = 1 << 4;
constexpr uint8_t kFlagAt = 1 << 5;
constexpr uint8_t kStateDelayed = 3;  // bits 0-1; ready is 0

}  // namespace

std::string EncodeRecord(const NewJob& job) {
  uint8_t flags = 0;
  // The long T block's last byte: the level, kNotify and kRetain (common/record.lua L_NOTIFY,
  // L_RETAIN).
  constexpr uint8_t kNotify = 16, kRetain = 32;
  const uint8_t level = static_cast<uint8_t>(job.priority | (job.notify ? kNotify : 0) |
                                             (job.retain_s != 0 ? kRetain : 0));
  if (job.tries != 1 || level != 0) flags |= kFlagTries;
  if (job.every_s != 0 || !job.schedule.empty()) flags |= kFlagEvery;
  if (job.backoff_s != 0) flags |= kFlagBackoff;
  if (job.at_ms != 0) flags |= kFlagAt;
  if (job.delayed) flags |= kStateDelayed;
  std::string r;
  r.reserve(32 + job.payload.size());
  r.push_back(static_cast<char>(flags));
  PutLE(&r, static_cast<uint64_t>(job.created_ms), 6);
  PutLE(&r, job.ttl_s, 4);
  if (level != 0) {
    // The long T block: tries_left, attempt, 0, tries_total, level and flags, [retain_s]
    // (common/record.lua t_len).
    PutLE(&r, job.tries, 2);
    PutLE(&r, 0, 2);
    PutLE(&r, 0, 2);
    PutLE(&r, job.tries, 2);
    PutLE(&r, level, 1);
    if (job.retain_s != 0) PutLE(&r, job.retain_s, 4);
  } else if (flags & kFlagTries) {
    PutLE(&r, job.tries, 2);  // tries_left
    PutLE(&r, 0, 2);          // attempt
    PutLE(&r, job.tries, 2);  // tries_total
  }
  if (!job.schedule.empty()) {
    // The long E block: u32 0, u16 length, the schedule (common/record.lua e_len, decode_schedule).
    PutLE(&r, 0, 4);
    PutLE(&r, job.schedule.size(), 2);
    r.append(job.schedule);
  } else if (flags & kFlagEvery) {
    PutLE(&r, job.every_s, 4);
  }
  if ((flags & kFlagBackoff) && (job.backoff_max_s != 0 || job.backoff_jitter)) {
    // The long B block: u32 0, backoff_s, max_s + 2^31 * jitter (common/record.lua b_len).
    PutLE(&r, 0, 4);
    PutLE(&r, job.backoff_s, 4);
    PutLE(&r, (job.backoff_max_s & 0x7fffffffu) | (job.backoff_jitter ? 0x80000000u : 0u), 4);
  } else if (flags & kFlagBackoff) {
    PutLE(&r, job.backoff_s, 4);
  }
  if (flags & kFlagAt) PutLE(&r, static_cast<uint64_t>(job.at_ms), 6);
  r.append(job.payload);
  return r;
}

bool DecodeJobs(persist::ReplyView reply, size_t skip, const std::string& ns,
                const std::string& queue, std::vector<JobEntry>* out, bool with_errors) {
  const size_t stride = kJobFields + (with_errors ? kJobErrorFields : 0);
  if (reply == nullptr || !reply.is_array() || reply.size() < skip ||
      (reply.size() - skip) % stride != 0) {
    return false;
  }
  for (size_t i = skip; i < reply.size(); i += stride) {
    if (!DecodeJobSpan(reply, i, ns, queue, out)) return false;
    if (!with_errors) continue;
    JobEntry& j = out->back();
    persist::ReplyView reason = reply[i + kJobFields];
    if (reason.is_string()) {
      j.has_error = true;
      j.last_error.assign(reason.str());
    } else if (!reason.is_nil()) {
      return false;
    }
    if (!reply[i + kJobFields + 1].Int(&j.last_error_attempt) ||
        !reply[i + kJobFields + 2].Int(&j.last_error_ms)) {
      return false;
    }
  }
  return true;
}

bool DecodeJobSpan(persist::ReplyView reply, size_t at, const std::string& ns,
                   const std::string& queue, std::vector<JobEntry>* out) {
  if (reply == nullptr || !reply.is_array() || at + kJobFields > reply.size()) {
    return false;
  }
  auto e = [&reply, at](size_t k) { return reply[at + k]; };
  if (!e(0).is_string() || !e(1).is_string()) return false;
  JobEntry j;
  j.ns = ns;
  j.queue = queue;
  j.key.assign(e(0).str());
  j.payload.assign(e(1).str());
  // created_ms is a unix time in ms: a negative one is no job of deferq's (a fuzzed reply's
  // INT64_MIN + 1 overflowed elapsed_ms below).
  if (!e(2).Int(&j.tries_left) || !e(3).Int(&j.ttl_left_s) || !e(4).Int(&j.attempt) ||
      !e(5).Int(&j.created_ms) || j.created_ms < 0) {
    return false;
  }
  out->push_back(std::move(j));
  return true;
}

void WriteJob(proto::ReplyWriter& w, const JobEntry& job, int64_t wall_ms, bool with_errors) {
  w.ArrayHeader(kJobReplyFields + (with_errors ? kJobErrorFields : 0));
  w.Bulk(ClientQueueName(job.queue));  // a shard's jobs are the sharded queue's (shards.h)
  w.Bulk(IdTextOfKey(job.key));
  w.Bulk(job.payload);
  w.Integer(job.tries_left);
  w.Integer(job.ttl_left_s);
  w.Integer(job.attempt);
  int64_t elapsed_ms = 0;
  if (__builtin_sub_overflow(wall_ms, job.created_ms, &elapsed_ms)) elapsed_ms = 0;
  w.Integer(std::max<int64_t>(0, elapsed_ms));
  if (!with_errors) return;
  if (job.has_error) {
    w.Bulk(job.last_error);
  } else {
    w.Null();
  }
  w.Integer(job.last_error_attempt);
  w.Integer(job.last_error_ms);
}

void WriteJobs(proto::ReplyWriter& w, const std::vector<JobEntry>& jobs, int64_t wall_ms,
               bool with_errors) {
  w.ArrayHeader(jobs.size());
  for (const JobEntry& j : jobs) WriteJob(w, j, wall_ms, with_errors);
}

void WriteConsumeReply(proto::ReplyWriter& w, const std::vector<JobEntry>& jobs, bool with_count,
                       int64_t wall_ms) {
  if (jobs.empty()) return w.NullArray();
  if (!with_count) return WriteJob(w, jobs.front(), wall_ms);
  WriteJobs(w, jobs, wall_ms);
}

void WriteJobInfo(proto::ReplyWriter& w, std::string_view queue, std::string_view id,
                  persist::ReplyView r) {
  if (r.is_nil() || (r.is_array() && r.size() == 0)) {
    return w.NullArray();
  }
  static const char* const kInts[] = {"tries_left", "attempt", "created_ms", "due_ms",
                                      "ttl_left_s", "every_s", "backoff_s"};
  // A finished job's kept outcome has no payload (nil).
  if (!r.is_array() || r.size() < 2 + std::size(kInts) || !r[0].is_string() ||
      (!r[1].is_string() && !r[1].is_nil())) {
    return w.Error(kUnexpectedReply);
  }
  // last_error, last_error_attempt, last_error_ms follow the ints (nil, 0, 0 when none).
  const size_t err = 2 + std::size(kInts);
  const bool has_error_fields = r.size() >= err + 3;
  const bool has_schedule_fields = r.size() >= err + 5;  // cron, tz
  const bool has_priority = r.size() >= err + 6;
  const bool has_result = r.size() >= err + 8;  // result, finished_ms
  w.MapHeader(4 + std::size(kInts) + (has_error_fields ? 3 : 0) + (has_schedule_fields ? 2 : 0) +
              (has_priority ? 1 : 0) + (has_result ? 2 : 0));
  w.Bulk("id");
  w.Bulk(id);
  w.Bulk("queue");
  w.Bulk(queue);
  w.Bulk("state");
  w.Bulk(r[0].str());
  w.Bulk("payload");
  if (r[1].is_string()) {
    w.Bulk(r[1].str());
  } else {
    w.Null();
  }
  for (size_t i = 0; i < std::size(kInts); ++i) {
    int64_t v = 0;
    r[2 + i].Int(&v);
    w.Bulk(kInts[i]);
    w.Integer(v);
  }
  if (!has_error_fields) return;
  w.Bulk("last_error");
  if (r[err].is_string()) {
    w.Bulk(r[err].str());
  } else {
    w.Null();
  }
  static const char* const kErrorInts[] = {"last_error_attempt", "last_error_ms"};
  for (size_t i = 0; i < std::size(kErrorInts); ++i) {
    int64_t v = 0;
    r[err + 1 + i].Int(&v);
    w.Bulk(kErrorInts[i]);
    w.Integer(v);
  }
  if (!has_schedule_fields) return;
  for (size_t i = 0; i < 2; ++i) {
    persist::ReplyView e = r[err + 3 + i];
    w.Bulk(i == 0 ? "cron" : "tz");
    if (e.is_string()) {
      w.Bulk(e.str());
    } else {
      w.Null();
    }
  }
  if (!has_priority) return;
  int64_t level = 0;
  r[err + 5].Int(&level);
  w.Bulk("priority");
  w.Integer(level);
  if (!has_result) return;
  w.Bulk("result");
  if (persist::ReplyView e = r[err + 6]; e.is_string()) {
    w.Bulk(e.str());
  } else {
    w.Null();
  }
  int64_t finished_ms = 0;
  r[err + 7].Int(&finished_ms);
  w.Bulk("finished_ms");
  w.Integer(finished_ms);
}

namespace {
constexpr size_t kQstatPaused = 12;     // index of `paused` in qstat.lua's reply
constexpr size_t kQstatSchedules = 14;  // index of `schedules`
}  // namespace

bool AddQueueStats(persist::ReplyView r, QueueStatsSum* sum) {
  if (!r.is_array() || r.size() < sum->counts.size()) return false;
  for (size_t i = 0; i < sum->counts.size(); ++i) {
    int64_t v = 0;
    r[i].Int(&v);
    sum->counts[i] += v;
  }
  // qstat.lua's 13th element: 1 while the queue is paused (QPAUSE).
  int64_t paused = 0;
  if (r.size() > kQstatPaused) r[kQstatPaused].Int(&paused);
  sum->paused = std::max(sum->paused, paused);
  int64_t schedules = 0;
  if (r.size() > kQstatSchedules) r[kQstatSchedules].Int(&schedules);
  sum->schedules += schedules;
  return true;
}

void WriteQueueStatsSum(proto::ReplyWriter& w, const QueueStatsSum& sum) {
  // qstat.lua's first figures, in QueueFigures' order (ready .. dead_total), then paused.
  static_assert(std::tuple_size_v<decltype(sum.counts)> == QueueFigures::kDeadTotal + 1);
  w.MapHeader(sum.counts.size() + 2);
  for (size_t i = 0; i < sum.counts.size(); ++i) {
    w.Bulk(NamesOf(static_cast<QueueFigures::Field>(i)).qstat);
    w.Integer(sum.counts[i]);
  }
  w.Bulk(NamesOf(QueueFigures::kPaused).qstat);
  w.Integer(sum.paused);
  w.Bulk(NamesOf(QueueFigures::kSchedules).qstat);
  w.Integer(sum.schedules);
}

void WriteQueueStats(proto::ReplyWriter& w, persist::ReplyView r) {
  QueueStatsSum sum;
  if (!AddQueueStats(r, &sum)) return w.Error(kUnexpectedReply);
  WriteQueueStatsSum(w, sum);
}

}  // namespace deferq::queue
