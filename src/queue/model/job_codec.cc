#include "queue/model/job_codec.h"

#include <hiredis/hiredis.h>

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

bool ReplyInt(const redisReply* r, int64_t* out) {
  if (r == nullptr) return false;
  if (r->type == REDIS_REPLY_INTEGER) {
    *out = r->integer;
    return true;
  }
  if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS) {
    auto [p, ec] = std::from_chars(r->str, r->str + r->len, *out);
    return ec == std::errc() && p == r->str + r->len;
  }
  if (r->type == REDIS_REPLY_NIL) {
    *out = 0;
    return true;
  }
  return false;
}

bool DecodeJobs(const redisReply* reply, size_t skip, const std::string& ns,
                const std::string& queue, std::vector<JobEntry>* out, bool with_errors) {
  const size_t stride = kJobFields + (with_errors ? kJobErrorFields : 0);
  if (reply == nullptr || reply->type != REDIS_REPLY_ARRAY || reply->elements < skip ||
      (reply->elements - skip) % stride != 0) {
    return false;
  }
  for (size_t i = skip; i < reply->elements; i += stride) {
    if (!DecodeJobSpan(reply, i, ns, queue, out)) return false;
    if (!with_errors) continue;
    JobEntry& j = out->back();
    const redisReply* reason = reply->element[i + kJobFields];
    if (reason->type == REDIS_REPLY_STRING) {
      j.has_error = true;
      j.last_error.assign(reason->str, reason->len);
    } else if (reason->type != REDIS_REPLY_NIL) {
      return false;
    }
    if (!ReplyInt(reply->element[i + kJobFields + 1], &j.last_error_attempt) ||
        !ReplyInt(reply->element[i + kJobFields + 2], &j.last_error_ms)) {
      return false;
    }
  }
  return true;
}

bool DecodeJobSpan(const redisReply* reply, size_t at, const std::string& ns,
                   const std::string& queue, std::vector<JobEntry>* out) {
  if (reply == nullptr || reply->type != REDIS_REPLY_ARRAY || at + kJobFields > reply->elements) {
    return false;
  }
  redisReply** e = reply->element + at;
  if (e[0]->type != REDIS_REPLY_STRING || e[1]->type != REDIS_REPLY_STRING) return false;
  JobEntry j;
  j.ns = ns;
  j.queue = queue;
  j.key.assign(e[0]->str, e[0]->len);
  j.payload.assign(e[1]->str, e[1]->len);
  // created_ms is a unix time in ms: a negative one is no job of deferq's (a fuzzed reply's
  // INT64_MIN + 1 overflowed elapsed_ms below).
  if (!ReplyInt(e[2], &j.tries_left) || !ReplyInt(e[3], &j.ttl_left_s) ||
      !ReplyInt(e[4], &j.attempt) || !ReplyInt(e[5], &j.created_ms) || j.created_ms < 0) {
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
                  const redisReply* r) {
  if (r->type == REDIS_REPLY_NIL || (r->type == REDIS_REPLY_ARRAY && r->elements == 0)) {
    return w.NullArray();
  }
  static const char* const kInts[] = {"tries_left", "attempt", "created_ms", "due_ms",
                                      "ttl_left_s", "every_s", "backoff_s"};
  // A finished job's kept outcome has no payload (nil).
  if (r->type != REDIS_REPLY_ARRAY || r->elements < 2 + std::size(kInts) ||
      r->element[0]->type != REDIS_REPLY_STRING ||
      (r->element[1]->type != REDIS_REPLY_STRING && r->element[1]->type != REDIS_REPLY_NIL)) {
    return w.Error(kUnexpectedReply);
  }
  // last_error, last_error_attempt, last_error_ms follow the ints (nil, 0, 0 when none).
  const size_t err = 2 + std::size(kInts);
  const bool has_error_fields = r->elements >= err + 3;
  const bool has_schedule_fields = r->elements >= err + 5;  // cron, tz
  const bool has_priority = r->elements >= err + 6;
  const bool has_result = r->elements >= err + 8;  // result, finished_ms
  w.MapHeader(4 + std::size(kInts) + (has_error_fields ? 3 : 0) + (has_schedule_fields ? 2 : 0) +
              (has_priority ? 1 : 0) + (has_result ? 2 : 0));
  w.Bulk("id");
  w.Bulk(id);
  w.Bulk("queue");
  w.Bulk(queue);
  w.Bulk("state");
  w.Bulk(std::string_view(r->element[0]->str, r->element[0]->len));
  w.Bulk("payload");
  if (r->element[1]->type == REDIS_REPLY_STRING) {
    w.Bulk(std::string_view(r->element[1]->str, r->element[1]->len));
  } else {
    w.Null();
  }
  for (size_t i = 0; i < std::size(kInts); ++i) {
    int64_t v = 0;
    ReplyInt(r->element[2 + i], &v);
    w.Bulk(kInts[i]);
    w.Integer(v);
  }
  if (!has_error_fields) return;
  w.Bulk("last_error");
  if (r->element[err]->type == REDIS_REPLY_STRING) {
    w.Bulk(std::string_view(r->element[err]->str, r->element[err]->len));
  } else {
    w.Null();
  }
  static const char* const kErrorInts[] = {"last_error_attempt", "last_error_ms"};
  for (size_t i = 0; i < std::size(kErrorInts); ++i) {
    int64_t v = 0;
    ReplyInt(r->element[err + 1 + i], &v);
    w.Bulk(kErrorInts[i]);
    w.Integer(v);
  }
  if (!has_schedule_fields) return;
  for (size_t i = 0; i < 2; ++i) {
    const redisReply* e = r->element[err + 3 + i];
    w.Bulk(i == 0 ? "cron" : "tz");
    if (e->type == REDIS_REPLY_STRING) {
      w.Bulk(std::string_view(e->str, e->len));
    } else {
      w.Null();
    }
  }
  if (!has_priority) return;
  int64_t level = 0;
  ReplyInt(r->element[err + 5], &level);
  w.Bulk("priority");
  w.Integer(level);
  if (!has_result) return;
  w.Bulk("result");
  if (const redisReply* e = r->element[err + 6]; e->type == REDIS_REPLY_STRING) {
    w.Bulk(std::string_view(e->str, e->len));
  } else {
    w.Null();
  }
  int64_t finished_ms = 0;
  ReplyInt(r->element[err + 7], &finished_ms);
  w.Bulk("finished_ms");
  w.Integer(finished_ms);
}

namespace {
constexpr size_t kQstatPaused = 12;     // index of `paused` in qstat.lua's reply
constexpr size_t kQstatSchedules = 14;  // index of `schedules`
}  // namespace

bool AddQueueStats(const redisReply* r, QueueStatsSum* sum) {
  if (r->type != REDIS_REPLY_ARRAY || r->elements < sum->counts.size()) return false;
  for (size_t i = 0; i < sum->counts.size(); ++i) {
    int64_t v = 0;
    ReplyInt(r->element[i], &v);
    sum->counts[i] += v;
  }
  // qstat.lua's 13th element: 1 while the queue is paused (QPAUSE).
  int64_t paused = 0;
  if (r->elements > kQstatPaused) ReplyInt(r->element[kQstatPaused], &paused);
  sum->paused = std::max(sum->paused, paused);
  int64_t schedules = 0;
  if (r->elements > kQstatSchedules) ReplyInt(r->element[kQstatSchedules], &schedules);
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

void WriteQueueStats(proto::ReplyWriter& w, const redisReply* r) {
  QueueStatsSum sum;
  if (!AddQueueStats(r, &sum)) return w.Error(kUnexpectedReply);
  WriteQueueStatsSum(w, sum);
}

}  // namespace deferq::queue
