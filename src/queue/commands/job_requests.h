// What each job command asks for, read from its arguments (docs/commands.md). One parser per
// command serves both the command itself and its check when it is queued after MULTI, so a
// transaction refuses exactly what the command would refuse.
//
// A Parse function either fills its request and returns true, or answers the client's error
// (through ctx.reply) and returns false. It changes nothing else: no id is drawn, nothing is sent.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "queue/commands/commands.h"
#include "queue/context/loop.h"
#include "queue/model/queue_name.h"

namespace deferq::queue {

/* PUBLISH queue payload [DELAY s | PDELAY ms | AT unix-s | PAT unix-ms] [TTL s] [TRIES n]
 *         [ID key [REPLACE] [KEEP s]] [EVERY s | CRON spec [TZ zone]]
 *         [BACKOFF s [MAX s] [JITTER]] [PRIORITY n] */
struct PublishRequest {
  QueueName q;
  std::string_view payload;
  int64_t now_ms = 0;    // wall clock the due time was computed from
  int64_t due_ms = 0;    // unix ms
  int64_t delay_ms = 0;  // due_ms - now_ms, never negative
  int64_t ttl_s = 0;     // 0 = never expires
  int64_t tries = 1;
  int64_t every_s = 0;
  std::string schedule;  // CRON: the record's schedule block (schedule::EncodeSchedule), or empty
  int64_t backoff_s = 0;
  int64_t backoff_max_s = 0;    // BACKOFF ... MAX s; 0: the one-day cap
  bool backoff_jitter = false;  // BACKOFF ... JITTER
  std::string_view id;          // empty: a generated id
  bool replace = false;
  int64_t keep_s = 0;     // ID ... KEEP s: the key is held s seconds after the job's due time
  int64_t priority = 0;   // PRIORITY n, 0..kMaxPriority: higher levels are consumed first
  int64_t retain_s = -1;  // RETAIN s: the outcome kept s seconds once finished; -1 when absent
  double timeout_s = 0;   // CALL's TIMEOUT s (0: none)
};
bool ParsePublish(CommandContext& ctx, Args args, PublishRequest* req);

/* CALL queue payload [TIMEOUT s] [options of PUBLISH]: PUBLISH's parser, which also takes
 * TIMEOUT; a CALL keeps its outcome kDefaultCallRetainS unless RETAIN says otherwise. */
inline constexpr int64_t kDefaultCallRetainS = 60;
bool ParseCall(CommandContext& ctx, Args args, PublishRequest* req);

/* WAITJOB queue id [TIMEOUT s] */
struct WaitJobRequest {
  QueueName q;
  std::string_view id;
  double timeout_s = 0;  // 0: no limit
};
bool ParseWaitJob(CommandContext& ctx, Args args, WaitJobRequest* req);

/* CONSUME queue [queue ...] [TTR s] [TIMEOUT s] [COUNT n] */
struct ConsumeRequest {
  std::string ns;
  std::vector<std::string_view> queues;  // priority order (the command's arguments)
  int64_t ttr_s = 0;
  double timeout_s = 0;  // 0 = do not block
  int64_t count = 0;     // 0 = no COUNT (the reply is one job, not an array)
};
bool ParseConsume(CommandContext& ctx, Args args, ConsumeRequest* req);

/* ACK queue id [id ...] and CANCEL queue id [id ...] */
struct IdsRequest {
  QueueName q;
  std::vector<std::string_view> ids;
  int64_t attempt = -1;     // ACK queue id ATTEMPT n (one id): the lease it must be; -1 when absent
  bool has_result = false;  // ACK queue id RESULT bytes (one id)
  std::string_view result;
};
bool ParseIds(CommandContext& ctx, Args args, IdsRequest* req);
// ACK: ParseIds, or the one-job form `ACK queue id [RESULT bytes] [ATTEMPT n]` (either order):
// exactly those arguments, with n an integer (ids spelled RESULT or ATTEMPT in a list of exactly
// that shape are read as the one-job form).
bool ParseAck(CommandContext& ctx, Args args, IdsRequest* req);

/* NACK queue id [DELAY s] [REASON text] [KEEPTRY] [ATTEMPT n], TOUCH queue id [TTR s]
 * [ATTEMPT n], JOB queue id */
struct JobOptionRequest {
  QueueName q;
  std::string_view id;
  int64_t option_s = -1;    // the DELAY or TTR given, -1 when absent
  std::string_view reason;  // NACK's REASON, cut to kMaxReasonBytes; empty when absent
  bool keep_try = false;    // NACK's KEEPTRY: a snooze, the delivery spends no try
  int64_t attempt = -1;     // ATTEMPT n: act only on the lease of that attempt; -1 when absent
};
bool ParseNack(CommandContext& ctx, Args args, JobOptionRequest* req);
bool ParseTouch(CommandContext& ctx, Args args, JobOptionRequest* req);
bool ParseJob(CommandContext& ctx, Args args, JobOptionRequest* req);

/* PEEK queue [COUNT n], QSTAT queue, PURGE queue */
struct QueueRequest {
  QueueName q;
  int64_t count = 1;
};
bool ParsePeek(CommandContext& ctx, Args args, QueueRequest* req);
bool ParseQueueOnly(CommandContext& ctx, Args args, QueueRequest* req);

/* BROWSE queue DELAYED|LEASED [FROM ms] [COUNT n] | BROWSE queue DUE [STEP s] [STEPS n] */
struct BrowseRequest {
  enum class Op { kDelayed, kLeased, kDue };
  Op op = Op::kDelayed;
  QueueName q;
  int64_t from_ms = 0;  // DELAYED, LEASED
  int64_t count = 10;
  int64_t step_s = 60;  // DUE
  int64_t steps = 60;
};
bool ParseBrowse(CommandContext& ctx, Args args, BrowseRequest* req);

/* QUEUES [MATCH glob] */
struct QueuesRequest {
  std::string ns;
  std::string pattern = "*";
};
bool ParseQueues(CommandContext& ctx, Args args, QueuesRequest* req);

/* DEADLETTER SIZE queue | PEEK queue [COUNT n] [WITHERRORS] | RESPAWN queue [COUNT n] [TTL s]
 *            | DELETE queue [COUNT n] | DELETE queue ID id | HELP */
struct DeadletterRequest {
  enum class Op { kSize, kPeek, kRespawn, kRespawnId, kDelete, kDeleteId, kHelp };
  Op op = Op::kSize;
  QueueName q;
  int64_t count = 1;
  int64_t ttl_s = 0;
  std::string_view id;
  bool with_errors = false;  // PEEK ... WITHERRORS
};
bool ParseDeadletter(CommandContext& ctx, Args args, DeadletterRequest* req);

}  // namespace deferq::queue
