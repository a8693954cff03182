// Job commands (docs/commands.md): PUBLISH, CONSUME, ACK, NACK, TOUCH, CANCEL, JOB, PEEK, QSTAT,
// QUEUES, PURGE, DEADLETTER. Each reads its arguments with its parser (job_requests.h), then
// performs its state change with one storage script (docs/storage.md) and writes the reply when
// Redis answers.

#include <algorithm>
#include <cmath>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "queue/commands/commands.h"
#include "queue/commands/job_requests.h"
#include "queue/commands/publish_call.h"
#include "queue/commands/shard_commands.h"
#include "queue/context/client_port.h"
#include "queue/context/instance.h"
#include "queue/context/loop.h"
#include "queue/delivery/pump.h"
#include "queue/delivery/waiters.h"
#include "queue/model/job_codec.h"
#include "queue/model/job_id.h"
#include "queue/model/queue_name.h"
#include "queue/model/shards.h"
#include "queue/stats/queue_stats.h"
#include "queue/tenancy/rate_limiter.h"

namespace deferq::queue {

namespace {

// Runs one storage script for a command and answers through `write` when Redis replies.
// Errors from Redis (and TRYAGAIN when the pool is down) are passed to the client as they are.
using ReplyFn = std::function<void(proto::ReplyWriter&, persist::ReplyView)>;

void RunScript(CommandContext& ctx, const QueueName& q, persist::Script script,
               std::vector<std::string> args, ReplyFn write,
               std::function<void()> not_applied = {}) {
  Loop* loop = ctx.loop;
  persist::PoolClient* pool = loop->PoolFor(q.ns);
  if (pool == nullptr) return ctx.reply.Error("ERR no pool configured for this namespace");
  ctx.instance->queue_stats().NoteActive(q.tag());  // the per-queue metrics (queue_stats.h)
  const OwedReply owed = OwedReply::Owe(ctx.client, /*blocking=*/false);
  const std::string prefix = q.prefix();
  const std::string_view keys[] = {prefix};
  std::vector<std::string_view> argv(args.begin(), args.end());
  pool->Eval(script, keys, argv, ctx.session.id,
             [owed, write = std::move(write),
              not_applied = std::move(not_applied)](const persist::UpstreamResult& r) {
               if (not_applied && persist::NotApplied(r)) not_applied();
               owed.Write([&](proto::ReplyWriter& out) { WriteUpstreamReply(out, r, write); });
             });
}

void WriteIntegerReply(proto::ReplyWriter& w, persist::ReplyView r) {
  int64_t v = 0;
  if (!r.Int(&v)) return w.Error(kUnexpectedReply);
  w.Integer(v);
}

// The shard of queue `q` that holds the job with canonical key K (q itself when not sharded).
QueueName ShardOfJob(const Loop* loop, const QueueName& q, std::string_view key) {
  const int n = ShardCount(loop->config(), q);
  return n == 1 ? q : Shard(q, ShardOf(key, n));
}

}  // namespace

PreparedPublish PreparePublish(CommandContext& ctx, PublishRequest& req, bool notify) {
  PreparedPublish p;
  const int64_t now = req.now_ms, due = req.due_ms;
  std::string key;
  bool derivable = false;
  const int shards = ShardCount(ctx.loop->config(), req.q);
  if (req.id.empty()) {
    GeneratedId id = ctx.loop->ids().Next(static_cast<uint64_t>(due));
    // A sharded queue's generated ids take the shards in turn and carry theirs (shards.h).
    if (shards > 1) id.random[0] = static_cast<uint8_t>(ctx.loop->ids().Turn() % shards);
    key = CanonicalKey(id);
    derivable = due > now;
  } else {
    key = CanonicalKeyOfText(req.id);
  }
  if (shards > 1) req.q = Shard(req.q, ShardOf(key, shards));
  NewJob job;
  job.created_ms = now;
  job.ttl_s = static_cast<uint32_t>(req.ttl_s);
  job.tries = static_cast<uint32_t>(req.tries);
  job.every_s = static_cast<uint32_t>(req.every_s);
  job.schedule = req.schedule;
  job.backoff_s = static_cast<uint32_t>(req.backoff_s);
  job.backoff_max_s = static_cast<uint32_t>(req.backoff_max_s);
  job.backoff_jitter = req.backoff_jitter;
  job.priority = static_cast<uint8_t>(req.priority);
  job.retain_s = static_cast<uint32_t>(std::max<int64_t>(0, req.retain_s));
  job.notify = notify;
  // A recurring job carries its occurrence's due time.
  if (req.every_s != 0 || !req.schedule.empty()) job.at_ms = due;
  job.payload = req.payload;
  job.delayed = due > now;
  Loop* loop = ctx.loop;
  p.ready_now = due <= now;
  // A delayed job: the queue's pump runs at its due millisecond (the sweep would find it too,
  // up to one sweep period late).
  if (!p.ready_now) loop->pump().ScheduleDue(req.q.tag(), due);
  // A publish Redis did not apply gives its admission back (rate_limiter.h Refund).
  if (loop->rate_limiter().Limit(req.q.ns, RateKind::kPublish) > 0) {
    p.not_applied = [loop, ns = req.q.ns, at = loop->wall_ms()] {
      loop->rate_limiter().Refund(ns, RateKind::kPublish, 1, at);
    };
  }
  const std::string mode = req.id.empty() ? "" : (req.replace ? "replace" : "id");
  p.argv = {std::to_string(now),
            key,
            EncodeRecord(job),
            std::to_string(due),
            mode,
            derivable ? "1" : "0",
            std::to_string(loop->config().lookahead_ms)};
  if (req.keep_s > 0) p.argv.push_back(std::to_string(req.keep_s * 1000));
  p.id_text = IdTextOfKey(key);
  p.key = std::move(key);
  return p;
}

int64_t PublishStatus(persist::ReplyView r) {
  int64_t status = 0;
  if (r.is_array() && r.size() > 0) {
    r[0].Int(&status);
  } else {
    r.Int(&status);
  }
  return status;
}

/* PUBLISH queue payload [DELAY s | PDELAY ms | AT unix-s | PAT unix-ms] [TTL s] [TRIES n]
 *         [ID key [REPLACE] [KEEP s]] [EVERY s | CRON spec [TZ zone]]
 *         [BACKOFF s [MAX s] [JITTER]] [PRIORITY n] [RETAIN s] */
void CmdPublish(CommandContext& ctx, Args args) {
  PublishRequest req;
  if (!ParsePublish(ctx, args, &req)) return;
  if (AdmitJobs(ctx, req.q.ns, RateKind::kPublish, 1) == 0) return;  // -RATELIMIT
  PreparedPublish p = PreparePublish(ctx, req, /*notify=*/false);
  Loop* loop = ctx.loop;
  RunScript(
      ctx, req.q, persist::Script::kPublish, std::move(p.argv),
      [loop, tag = req.q.tag(), ready_now = p.ready_now, id_text = std::move(p.id_text)](
          proto::ReplyWriter& w, persist::ReplyView r) {
        const int64_t status = PublishStatus(r);
        w.Bulk(id_text);
        // A job became ready: offer it to the consumers blocked on this queue.
        if (ready_now && status != 0) loop->waiters().OfferReady(tag);
      },
      std::move(p.not_applied));
}

/* CONSUME queue [queue ...] [TTR s] [TIMEOUT s] [COUNT n] */
void CmdConsume(CommandContext& ctx, Args args) {
  ConsumeRequest req;
  if (!ParseConsume(ctx, args, &req)) return;
  // The consume rate limit: COUNT is cut to what is admitted; what the reply does not use is
  // given back (rate_limiter.h).
  const int64_t want = std::max<int64_t>(1, req.count);
  const int64_t admitted = AdmitJobs(ctx, req.ns, RateKind::kConsume, want);
  if (admitted == 0) return;  // -RATELIMIT
  if (req.count > 0) req.count = admitted;
  auto w = std::make_shared<Waiter>();
  if (ctx.loop->rate_limiter().Limit(req.ns, RateKind::kConsume) > 0) {
    w->on_reply = [loop = ctx.loop, ns = req.ns, admitted, at = ctx.loop->wall_ms()](size_t jobs) {
      loop->rate_limiter().Refund(ns, RateKind::kConsume, admitted - static_cast<int64_t>(jobs),
                                  at);
    };
  }
  w->ns = std::move(req.ns);
  // A sharded queue is consumed as its shards, from a different one each time (shards.h).
  std::vector<std::string> shards;
  std::vector<std::string_view> shard_views;
  if (!ctx.loop->config().queue_shards.empty()) {
    shards = ConsumeOrder(ctx.loop->config(), w->ns, req.queues, ctx.loop->ids().Turn());
    shard_views.assign(shards.begin(), shards.end());
  }
  const std::span<const std::string_view> queues =
      shards.empty() ? std::span<const std::string_view>(req.queues) : shard_views;
  w->ttr_ms = req.ttr_s * 1000;
  w->count = static_cast<int>(req.count);
  // Inside EXEC nothing blocks: a blocking CONSUME acts as TIMEOUT 0 (as BLPOP in MULTI).
  const bool blocking = req.timeout_s > 0 && !ctx.in_exec;
  w->deadline_ms =
      blocking ? ctx.loop->now_ms() + static_cast<int64_t>(std::llround(req.timeout_s * 1000)) : 0;
  w->port = ctx.client;
  // A parked consumer re-checks the binding it was admitted under (waiters.h).
  if (!ctx.session.admin) {
    w->auth.token_digest = ctx.session.token_digest;
    w->auth.valid_until_ms = ctx.session.auth_valid_until_ms;
  }
  w->ticket = ctx.client->Defer(blocking);
  ctx.loop->waiters().Consume(w, queues, blocking);
}

namespace {

// A fenced ACK/NACK/TOUCH (ATTEMPT n): the script's -1 (the job is in another attempt or state;
// nothing changed) is answered as -STALE, any other count as it is.
void WriteFencedReply(proto::ReplyWriter& w, persist::ReplyView r) {
  int64_t n = 0;
  if (!r.Int(&n)) return w.Error(kUnexpectedReply);
  if (n < 0) {
    return w.Error(
        "STALE the job is not leased at that attempt: it was delivered again, given back or "
        "finished meanwhile (nothing changed)");
  }
  w.Integer(n);
}

// ACK queue id [RESULT bytes] [ATTEMPT n]: one id, on the shard that holds it.
void OneJobAck(CommandContext& ctx, const IdsRequest& req) {
  std::string key = CanonicalKeyOfText(req.ids.front());
  std::string sec = DerivableSecond(key);
  const QueueName q = ShardOfJob(ctx.loop, req.q, key);
  std::vector<std::string> argv = {std::to_string(ctx.loop->wall_ms()), std::move(key),
                                   std::move(sec),
                                   req.attempt >= 0 ? std::to_string(req.attempt) : ""};
  if (req.has_result) {
    argv.emplace_back("result");
    argv.emplace_back(req.result);
  }
  RunScript(ctx, q, persist::Script::kAck, std::move(argv), WriteFencedReply);
}

// ACK and CANCEL: many ids, one script call, integer reply.
void AckOrCancel(CommandContext& ctx, Args args, persist::Script script) {
  IdsRequest req;
  if (!(script == persist::Script::kAck ? ParseAck(ctx, args, &req) : ParseIds(ctx, args, &req))) {
    return;
  }
  if (req.attempt >= 0 || req.has_result) return OneJobAck(ctx, req);
  if (const int n = ShardCount(ctx.loop->config(), req.q); n > 1) {
    return ShardedAckOrCancel(ctx, req, script, n);
  }
  std::vector<std::string> argv;
  argv.reserve(1 + 2 * req.ids.size());
  argv.push_back(std::to_string(ctx.loop->wall_ms()));
  for (std::string_view id : req.ids) {
    std::string key = CanonicalKeyOfText(id);
    std::string sec = DerivableSecond(key);
    argv.push_back(std::move(key));
    argv.push_back(std::move(sec));
  }
  RunScript(ctx, req.q, script, std::move(argv), WriteIntegerReply);
}

}  // namespace

/* ACK queue id [id ...] | ACK queue id ATTEMPT n */
void CmdAck(CommandContext& ctx, Args args) { AckOrCancel(ctx, args, persist::Script::kAck); }

/* CANCEL queue id [id ...] */
void CmdCancel(CommandContext& ctx, Args args) { AckOrCancel(ctx, args, persist::Script::kCancel); }

/* NACK queue id [DELAY s] [REASON text] [KEEPTRY] [ATTEMPT n] */
void CmdNack(CommandContext& ctx, Args args) {
  JobOptionRequest req;
  if (!ParseNack(ctx, args, &req)) return;
  const std::string delay_ms = req.option_s < 0 ? "" : std::to_string(req.option_s * 1000);
  Loop* loop = ctx.loop;
  std::string key = CanonicalKeyOfText(req.id);
  const QueueName q = ShardOfJob(loop, req.q, key);
  const std::string tag = q.tag();
  const bool now = req.option_s <= 0;
  std::vector<std::string> argv = {std::to_string(ctx.loop->wall_ms()), std::move(key), delay_ms};
  if (!req.reason.empty() || req.keep_try || req.attempt >= 0) {
    argv.emplace_back(req.keep_try ? "keep" : "");  // mode: a snooze, or a plain NACK
    argv.emplace_back(req.reason);
  }
  if (req.attempt >= 0) argv.push_back(std::to_string(req.attempt));
  RunScript(ctx, q, persist::Script::kNack, std::move(argv),
            [loop, tag, now](proto::ReplyWriter& w, persist::ReplyView r) {
              int64_t n = 0;
              r.Int(&n);
              WriteFencedReply(w, r);
              if (n > 0 && now) loop->waiters().OfferReady(tag);  // ready again, unless BACKOFF
            });
}

/* TOUCH queue id [TTR s] [ATTEMPT n] */
void CmdTouch(CommandContext& ctx, Args args) {
  JobOptionRequest req;
  if (!ParseTouch(ctx, args, &req)) return;
  const std::string ttr_ms = req.option_s < 0 ? "" : std::to_string(req.option_s * 1000);
  std::string key = CanonicalKeyOfText(req.id);
  const QueueName q = ShardOfJob(ctx.loop, req.q, key);
  std::vector<std::string> argv = {std::to_string(ctx.loop->wall_ms()), std::move(key), ttr_ms};
  if (req.attempt >= 0) argv.push_back(std::to_string(req.attempt));
  RunScript(ctx, q, persist::Script::kTouch, std::move(argv), WriteFencedReply);
}

/* JOB queue id */
void CmdJob(CommandContext& ctx, Args args) {
  JobOptionRequest req;
  if (!ParseJob(ctx, args, &req)) return;
  std::string key = CanonicalKeyOfText(req.id);
  std::string sec = DerivableSecond(key);
  RunScript(ctx, ShardOfJob(ctx.loop, req.q, key), persist::Script::kJob,
            {std::to_string(ctx.loop->wall_ms()), key, sec},
            [queue = req.q.queue, id = std::string(req.id)](
                proto::ReplyWriter& w, persist::ReplyView r) { WriteJobInfo(w, queue, id, r); });
}

namespace {

// PEEK and DEADLETTER PEEK: an array of jobs (possibly empty).
ReplyFn JobListReply(const QueueName& q, Loop* loop, bool with_errors = false) {
  return
      [ns = q.ns, queue = q.queue, loop, with_errors](proto::ReplyWriter& w, persist::ReplyView r) {
        std::vector<JobEntry> jobs;
        if (!DecodeJobs(r, 0, ns, queue, &jobs, with_errors)) return w.Error(kUnexpectedReply);
        WriteJobs(w, jobs, loop->wall_ms(), with_errors);
      };
}

}  // namespace

/* PEEK queue [COUNT n] */
void CmdPeek(CommandContext& ctx, Args args) {
  QueueRequest req;
  if (!ParsePeek(ctx, args, &req)) return;
  if (const int n = ShardCount(ctx.loop->config(), req.q); n > 1) {
    return ShardedPeek(ctx, req, n);
  }
  RunScript(ctx, req.q, persist::Script::kPeek,
            {std::to_string(ctx.loop->wall_ms()), std::to_string(req.count)},
            JobListReply(req.q, ctx.loop));
}

/* BROWSE queue DELAYED|LEASED [FROM ms] [COUNT n] | BROWSE queue DUE [STEP s] [STEPS n] */
void CmdBrowse(CommandContext& ctx, Args args) {
  using Op = BrowseRequest::Op;
  BrowseRequest req;
  if (!ParseBrowse(ctx, args, &req)) return;
  if (ShardCount(ctx.loop->config(), req.q) > 1) {
    return ctx.reply.Error("ERR BROWSE does not read sharded queues yet");
  }
  const std::string now = std::to_string(ctx.loop->wall_ms());
  if (req.op == Op::kDue) {
    return RunScript(
        ctx, req.q, persist::Script::kBrowse,
        {"due", now, std::to_string(req.step_s * 1000), std::to_string(req.steps)},
        [now_ms = ctx.loop->wall_ms(), req](proto::ReplyWriter& w, persist::ReplyView r) {
          const size_t steps = static_cast<size_t>(req.steps);
          if (!r.is_array() || r.size() != steps + 2) return w.Error(kUnexpectedReply);
          int64_t v = 0;
          w.MapHeader(5);
          w.Bulk("from_ms");
          w.Integer(now_ms);
          w.Bulk("step_ms");
          w.Integer(req.step_s * 1000);
          w.Bulk("counts");
          w.ArrayHeader(steps);
          for (size_t i = 0; i < steps; ++i) w.Integer(r[i].Int(&v) ? v : 0);
          w.Bulk("later");
          w.Integer(r[steps].Int(&v) ? v : 0);
          w.Bulk("complete");
          w.Integer(r[steps + 1].Int(&v) ? v : 0);
        });
  }
  RunScript(ctx, req.q, persist::Script::kBrowse,
            {req.op == Op::kDelayed ? "delayed" : "leased", now, std::to_string(req.from_ms),
             std::to_string(req.count)},
            [](proto::ReplyWriter& w, persist::ReplyView r) {
              // [K, due_ms, payload_head, payload_bytes, tries_left, attempt] per job.
              if (!r.is_array() || r.size() % 6 != 0) return w.Error(kUnexpectedReply);
              w.ArrayHeader(r.size() / 6);
              for (size_t i = 0; i < r.size(); i += 6) {
                w.ArrayHeader(6);
                w.Bulk(IdTextOfKey(r[i].str()));
                for (size_t k = 1; k < 6; ++k) {
                  int64_t v = 0;
                  if (k == 2) {
                    w.Bulk(r[i + k].str());
                  } else {
                    w.Integer(r[i + k].Int(&v) ? v : 0);
                  }
                }
              }
            });
}

/* QSTAT queue */
void CmdQstat(CommandContext& ctx, Args args) {
  QueueRequest req;
  if (!ParseQueueOnly(ctx, args, &req)) return;
  if (const int n = ShardCount(ctx.loop->config(), req.q); n > 1) {
    return ShardedQstat(ctx, req, n);
  }
  RunScript(ctx, req.q, persist::Script::kQstat, {std::to_string(ctx.loop->wall_ms())},
            WriteQueueStats);
}

/* PURGE queue */
void CmdPurge(CommandContext& ctx, Args args) {
  QueueRequest req;
  if (!ParseQueueOnly(ctx, args, &req)) return;
  if (const int n = ShardCount(ctx.loop->config(), req.q); n > 1) {
    return ShardedPurge(ctx, req, n);
  }
  RunScript(ctx, req.q, persist::Script::kPurge, {std::to_string(ctx.loop->wall_ms())},
            WriteIntegerReply);
}

/* DEADLETTER SIZE queue | PEEK queue [COUNT n] [WITHERRORS] | RESPAWN queue [COUNT n] [TTL s]
 *            | DELETE queue [COUNT n] | DELETE queue ID id | HELP */
void CmdDeadletter(CommandContext& ctx, Args args) {
  using Op = DeadletterRequest::Op;
  DeadletterRequest req;
  if (!ParseDeadletter(ctx, args, &req)) return;
  if (req.op == Op::kHelp) {
    static const char* const kHelp[] = {
        "DEADLETTER <subcommand> <queue> [<arg> [value] ...]. Subcommands are:",
        "SIZE <queue>",
        "    Return the number of dead jobs of the queue.",
        "PEEK <queue> [COUNT <n>] [WITHERRORS]",
        "    Return the oldest n (default 1) dead jobs, without changing them; WITHERRORS adds",
        "    why each failed last: last_error, last_error_attempt, last_error_ms.",
        "RESPAWN <queue> [COUNT <n>] [TTL <s>]",
        "    Move the oldest n (default 1) dead jobs back to ready with tries 1.",
        "RESPAWN <queue> ID <id> [TTL <s>]",
        "    Move the dead job with that id back to ready with tries 1.",
        "DELETE <queue> [COUNT <n>]",
        "    Delete the oldest n (default 1) dead jobs.",
        "DELETE <queue> ID <id>",
        "    Delete the dead job with that id.",
        "HELP",
        "    Print this help.",
    };
    return ReplyHelp(ctx.reply, kHelp);
  }
  const std::string now = std::to_string(ctx.loop->wall_ms());
  const std::string count = std::to_string(req.count);
  const int shards = ShardCount(ctx.loop->config(), req.q);
  const bool by_id = req.op == Op::kDeleteId || req.op == Op::kRespawnId;
  if (shards > 1 && !by_id) return ShardedDeadletter(ctx, req, shards);
  const QueueName q = by_id ? ShardOfJob(ctx.loop, req.q, CanonicalKeyOfText(req.id)) : req.q;
  switch (req.op) {
    case Op::kSize:
      return RunScript(ctx, q, persist::Script::kDeadletterRead, {"size", now, "0", ""},
                       WriteIntegerReply);
    case Op::kPeek:
      return RunScript(ctx, q, persist::Script::kDeadletterRead,
                       {"peek", now, count, req.with_errors ? "errors" : ""},
                       JobListReply(q, ctx.loop, req.with_errors));
    case Op::kRespawn:
    case Op::kRespawnId: {
      Loop* loop = ctx.loop;
      std::vector<std::string> argv = {"respawn", now, count, std::to_string(req.ttl_s)};
      if (req.op == Op::kRespawnId) {
        argv[0] = "respawn_id";
        argv.push_back(CanonicalKeyOfText(req.id));
      }
      return RunScript(ctx, q, persist::Script::kDeadletter, std::move(argv),
                       [loop, tag = q.tag()](proto::ReplyWriter& w, persist::ReplyView r) {
                         int64_t n = 0;
                         r.Int(&n);
                         w.Integer(n);
                         if (n > 0) loop->waiters().OfferReady(tag);
                       });
    }
    case Op::kDeleteId:
      return RunScript(ctx, q, persist::Script::kDeadletter,
                       {"delete_id", now, "1", CanonicalKeyOfText(req.id)}, WriteIntegerReply);
    default:  // kDelete
      return RunScript(ctx, q, persist::Script::kDeadletter, {"delete", now, count, ""},
                       WriteIntegerReply);
  }
}

namespace {

// Redis's glob dialect (KEYS, SCAN MATCH): * ? [abc] [^a-z] and \ escapes.
bool GlobMatch(std::string_view p, std::string_view s) {
  size_t pi = 0, si = 0, star_p = std::string_view::npos, star_s = 0;
  while (si < s.size()) {
    if (pi < p.size() && p[pi] == '*') {
      star_p = pi++;
      star_s = si;
      continue;
    }
    if (pi < p.size()) {
      bool ok = false;
      size_t next = pi + 1;
      if (p[pi] == '?') {
        ok = true;
      } else if (p[pi] == '[') {
        size_t j = pi + 1;
        bool negate = j < p.size() && p[j] == '^';
        if (negate) ++j;
        bool hit = false;
        while (j < p.size() && p[j] != ']') {
          if (p[j] == '\\' && j + 1 < p.size()) {
            hit |= p[j + 1] == s[si];
            j += 2;
          } else if (j + 2 < p.size() && p[j + 1] == '-' && p[j + 2] != ']') {
            char a = p[j], b = p[j + 2];
            if (a > b) std::swap(a, b);
            hit |= s[si] >= a && s[si] <= b;
            j += 3;
          } else {
            hit |= p[j] == s[si];
            ++j;
          }
        }
        ok = negate ? !hit : hit;
        next = j < p.size() ? j + 1 : j;
      } else if (p[pi] == '\\' && pi + 1 < p.size()) {
        ok = p[pi + 1] == s[si];
        next = pi + 2;
      } else {
        ok = p[pi] == s[si];
      }
      if (ok) {
        pi = next;
        ++si;
        continue;
      }
    }
    if (star_p == std::string_view::npos) return false;
    pi = star_p + 1;
    si = ++star_s;
  }
  while (pi < p.size() && p[pi] == '*') ++pi;
  return pi == p.size();
}

}  // namespace

/* QUEUES [MATCH glob]: the namespace's queues that hold at least one job, or are paused. */
void CmdQueues(CommandContext& ctx, Args args) {
  QueuesRequest req;
  if (!ParseQueues(ctx, args, &req)) return;
  const std::string ns = std::move(req.ns);
  const std::string pattern = std::move(req.pattern);
  Loop* loop = ctx.loop;
  persist::PoolClient* pool = loop->PoolFor(ns);
  if (pool == nullptr) return ctx.reply.Error("ERR no pool configured for this namespace");
  const OwedReply owed = OwedReply::Owe(ctx.client, /*blocking=*/false);
  const uint64_t affinity = ctx.session.id;
  pool->ReadRegistry(affinity, [loop, pool, owed, ns, pattern, affinity](persist::RegistryRead& r) {
    if (!r.error.empty()) return owed.Error(r.error);
    struct Gather {
      std::vector<std::string> names;   // as the client knows them
      std::vector<bool> nonempty;       // by name
      std::vector<std::string> stored;  // the registry's queues (a sharded one's shards)
      std::vector<size_t> name_of;      // by stored queue: its index in names
      size_t left = 0;
    };
    auto g = std::make_shared<Gather>();
    std::map<std::string, size_t, std::less<>> index;
    for (const std::string& tag : r.tags) {
      std::optional<QueueName> q = QueueName::Parse(tag);
      if (!q || q->ns != ns) continue;
      // A sharded queue's shards are one queue to the client (shards.h).
      const std::string_view name = ClientQueueName(q->queue);
      if (!GlobMatch(pattern, name)) continue;
      auto [it, added] = index.try_emplace(std::string(name), g->names.size());
      if (added) g->names.emplace_back(name);
      g->stored.push_back(std::move(q->queue));
      g->name_of.push_back(it->second);
    }
    g->nonempty.assign(g->names.size(), false);
    g->left = g->stored.size();
    auto finish = [owed, g] {
      owed.Write([&](proto::ReplyWriter& out) {
        size_t n = 0;
        for (bool b : g->nonempty) n += b;
        out.ArrayHeader(n);
        for (size_t i = 0; i < g->names.size(); ++i) {
          if (g->nonempty[i]) out.Bulk(g->names[i]);
        }
      });
    };
    if (g->left == 0) return finish();
    const std::string now = std::to_string(loop->wall_ms());
    for (size_t i = 0; i < g->stored.size(); ++i) {
      const std::string prefix_key = QueueName{ns, g->stored[i]}.prefix();
      const std::string_view keys[] = {prefix_key};
      const std::string_view argv[] = {now};
      pool->Eval(persist::Script::kQstat, keys, argv, affinity,
                 [g, i, finish](const persist::UpstreamResult& q) {
                   // Listed: a queue holding a job in any state (the four gauges), or
                   // paused (qstat.lua's 13th figure), as the registry keeps them.
                   if (q.view().is_array() && q.view().size() >= 13) {
                     for (size_t k : {0, 1, 2, 3, 12}) {
                       int64_t v = 0;
                       if (q.view()[k].Int(&v) && v > 0) {
                         g->nonempty[g->name_of[i]] = true;
                       }
                     }
                   }
                   if (--g->left == 0) finish();
                 });
    }
  });
}

}  // namespace deferq::queue
