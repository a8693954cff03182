// Job commands (SPEC §3): PUBLISH, CONSUME, ACK, NACK, TOUCH, CANCEL, JOB, PEEK, QSTAT, QUEUES,
// PURGE, DEADLETTER. Each validates its arguments here, then performs its state change with one
// storage script (docs/storage.md) and writes the reply when Redis answers.
#include <hiredis/hiredis.h>

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "queue/client_port.h"
#include "queue/commands.h"
#include "queue/job_codec.h"
#include "queue/job_id.h"
#include "queue/names.h"
#include "queue/worker.h"

namespace deferq::queue {

namespace {

constexpr const char* kNotInteger = "ERR value is not an integer or out of range";
constexpr int64_t kMaxDurationS = 100LL * 365 * 86400;  // a century: keeps ms arithmetic safe

bool ParseInt(std::string_view s, int64_t* out) {
  if (s.empty() || s[0] == '+') return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size();
}

// A non-negative integer no larger than max; false also for non-integers.
bool ParseRange(std::string_view s, int64_t min, int64_t max, int64_t* out) {
  return ParseInt(s, out) && *out >= min && *out <= max;
}

bool IsConsumeKeyword(std::string_view s) {
  return EqualsIgnoreCase(s, "ttr") || EqualsIgnoreCase(s, "timeout") ||
         EqualsIgnoreCase(s, "count");
}

bool ValidQueueName(std::string_view s) { return ValidName(s) && !IsConsumeKeyword(s); }

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c + 32);
  }
  return out;
}

// The namespace a connection's job commands work in, or false after replying an error.
bool JobNamespace(CommandContext& ctx, std::string* ns) {
  if (ctx.session.admin) {
    ctx.reply.Error("NOPERM admin connections have no queues; AUTH <namespace> <token> first");
    return false;
  }
  *ns = ctx.session.ns;
  return true;
}

// Runs one storage script for a command and answers through `write` when Redis replies.
// Errors from Redis (and TRYAGAIN when the pool is down) are passed to the client as they are.
using ReplyFn = std::function<void(proto::ReplyWriter&, const redisReply*)>;

void RunScript(CommandContext& ctx, const QueueName& q, persist::Script script,
               std::vector<std::string> args, ReplyFn write) {
  Worker* worker = ctx.worker;
  persist::PoolClient* pool = worker->PoolFor(q.ns);
  if (pool == nullptr) return ctx.reply.Error("ERR no pool configured for this namespace");
  ClientPort* port = ctx.client;
  const ReplyTicket ticket = port->Defer(false);
  const std::string prefix = q.prefix();
  const std::string_view keys[] = {prefix};
  std::vector<std::string_view> argv(args.begin(), args.end());
  pool->Eval(script, keys, argv, ctx.session.id,
             [port, ticket, write = std::move(write)](const persist::UpstreamResult& r) {
               proto::ReplyWriter* out = port->Begin(ticket);
               if (out == nullptr) return;
               if (r.reply == nullptr) {
                 out->Error(r.error);
               } else if (r.reply->type == REDIS_REPLY_ERROR) {
                 out->Error(std::string_view(r.reply->str, r.reply->len));
               } else {
                 write(*out, r.reply);
               }
               port->Finish(ticket);
             });
}

void WriteIntegerReply(proto::ReplyWriter& w, const redisReply* r) {
  int64_t v = 0;
  if (!ReplyInt(r, &v)) return w.Error("ERR unexpected reply from storage");
  w.Integer(v);
}

// The bucket second of a generated id's first due time (the "derivable" position), or "".
std::string DerivableSecond(std::string_view key) {
  if (key.size() != 16 || key[0] == '#') return "";
  uint64_t ts = 0;
  for (int i = 0; i < 6; ++i) ts = (ts << 8) | static_cast<uint8_t>(key[i]);
  return std::to_string(ts / 1000);
}

bool ValidJobId(std::string_view id) { return ValidName(id); }

}  // namespace

/* PUBLISH queue payload [DELAY s | PDELAY ms | AT unix-s | PAT unix-ms] [TTL s] [TRIES n]
 *         [ID key [REPLACE]] [EVERY s] [BACKOFF s] */
void CmdPublish(CommandContext& ctx, Args args) {
  std::string ns;
  if (!JobNamespace(ctx, &ns)) return;
  if (!ValidQueueName(args[1])) return ctx.reply.Error("ERR invalid queue name");
  const Config& cfg = ctx.worker->config();
  if (args[2].size() > cfg.max_payload) return ctx.reply.Error("ERR payload too large");

  const int64_t now = ctx.worker->wall_ms();
  int64_t due = now;
  bool has_due = false;
  int64_t ttl = cfg.default_ttl, tries = cfg.default_tries, every = 0, backoff = 0;
  bool has_ttl = false;
  std::string_view custom_id;
  bool has_id = false;
  bool replace = false;
  int64_t delay_ms = 0;
  for (size_t i = 3; i < args.size(); ++i) {
    std::string_view opt = args[i];
    if (EqualsIgnoreCase(opt, "replace")) {
      replace = true;
      continue;
    }
    if (i + 1 >= args.size()) return ReplySyntaxError(ctx.reply);
    std::string_view val = args[++i];
    int64_t v = 0;
    if (EqualsIgnoreCase(opt, "delay") || EqualsIgnoreCase(opt, "pdelay") ||
        EqualsIgnoreCase(opt, "at") || EqualsIgnoreCase(opt, "pat")) {
      if (has_due) return ReplySyntaxError(ctx.reply);
      has_due = true;
      const bool ms = EqualsIgnoreCase(opt, "pdelay") || EqualsIgnoreCase(opt, "pat");
      const int64_t max = ms ? kMaxDurationS * 1000 : kMaxDurationS;
      if (EqualsIgnoreCase(opt, "at") || EqualsIgnoreCase(opt, "pat")) {
        if (!ParseRange(val, 0, ms ? INT64_MAX / 2 : INT64_MAX / 2000, &v)) {
          return ctx.reply.Error(kNotInteger);
        }
        const int64_t at = ms ? v : v * 1000;
        if (at - now > kMaxDurationS * 1000) return ctx.reply.Error(kNotInteger);
        delay_ms = std::max<int64_t>(0, at - now);  // in the past: ready at once
      } else {
        if (!ParseRange(val, 0, max, &v)) return ctx.reply.Error(kNotInteger);
        delay_ms = ms ? v : v * 1000;
      }
      due = now + delay_ms;
    } else if (EqualsIgnoreCase(opt, "ttl")) {
      if (!ParseRange(val, 0, kMaxDurationS, &ttl)) return ctx.reply.Error(kNotInteger);
      has_ttl = true;
    } else if (EqualsIgnoreCase(opt, "tries")) {
      if (!ParseRange(val, 1, 65535, &tries)) return ctx.reply.Error(kNotInteger);
    } else if (EqualsIgnoreCase(opt, "id")) {
      custom_id = val;
      has_id = true;
    } else if (EqualsIgnoreCase(opt, "every")) {
      if (!ParseRange(val, 1, kMaxDurationS, &every)) return ctx.reply.Error(kNotInteger);
    } else if (EqualsIgnoreCase(opt, "backoff")) {
      if (!ParseRange(val, 0, kMaxDurationS, &backoff)) return ctx.reply.Error(kNotInteger);
    } else {
      return ReplySyntaxError(ctx.reply);
    }
  }
  if (replace && !has_id) return ReplySyntaxError(ctx.reply);
  if (has_id && !ValidJobId(custom_id)) return ctx.reply.Error("ERR invalid job id");
  // TTL counts from publish, so an explicit one must cover the delay. A default TTL shorter
  // than the delay is stretched to the delay plus the default (a job delayed by two days does
  // not expire before it is due). A recurring job's TTL applies to each occurrence from its due
  // time.
  if (every == 0 && ttl != 0 && ttl * 1000 < delay_ms) {
    if (has_ttl) return ctx.reply.Error("ERR ttl is shorter than delay");
    ttl += (delay_ms + 999) / 1000;
  }

  std::string key;
  bool derivable = false;
  if (!has_id) {
    const GeneratedId id = ctx.worker->ids().Next(static_cast<uint64_t>(due));
    key = CanonicalKey(id);
    derivable = due > now;
  } else {
    key = CanonicalKeyOfText(custom_id);
  }
  NewJob job;
  job.created_ms = now;
  job.ttl_s = static_cast<uint32_t>(ttl);
  job.tries = static_cast<uint32_t>(tries);
  job.every_s = static_cast<uint32_t>(every);
  job.backoff_s = static_cast<uint32_t>(backoff);
  if (every != 0) job.at_ms = due;  // a recurring job carries its occurrence's due time
  job.payload = args[2];
  QueueName q{ns, std::string(args[1])};
  ctx.worker->RegisterQueue(q);
  std::string id_text = IdTextOfKey(key);
  const std::string mode = !has_id ? "" : (replace ? "replace" : "id");
  Worker* worker = ctx.worker;
  const std::string tag = q.tag();
  const bool ready_now = due <= now;
  // A delayed job: the queue's pump runs at its due millisecond (the sweep would find it too,
  // up to one sweep period late).
  if (!ready_now) ctx.worker->ScheduleDue(tag, due);
  RunScript(ctx, q, persist::Script::kPublish,
            {std::to_string(now), key, EncodeRecord(job), std::to_string(due), mode,
             derivable ? "1" : "0"},
            [worker, tag, ready_now, id_text](proto::ReplyWriter& w, const redisReply* r) {
              int64_t status = 0;
              if (r->type == REDIS_REPLY_ARRAY && r->elements > 0) {
                ReplyInt(r->element[0], &status);
              } else {
                ReplyInt(r, &status);
              }
              w.Bulk(id_text);
              // A job became ready: offer it to the consumers blocked on this queue.
              if (ready_now && status != 0) worker->AnnounceReady(tag);
            });
}

/* CONSUME queue [queue ...] [TTR s] [TIMEOUT s] [COUNT n] */
void CmdConsume(CommandContext& ctx, Args args) {
  std::string ns;
  if (!JobNamespace(ctx, &ns)) return;
  const Config& cfg = ctx.worker->config();
  auto w = std::make_shared<Waiter>();
  w->ns = ns;
  size_t i = 1;
  for (; i < args.size() && !IsConsumeKeyword(args[i]); ++i) {
    if (!ValidName(args[i])) return ctx.reply.Error("ERR invalid queue name");
    w->queues.emplace_back(args[i]);
  }
  if (w->queues.empty()) return ReplyWrongArity(ctx.reply, "consume");
  int64_t ttr = cfg.default_ttr;
  double timeout = cfg.default_timeout;
  int64_t count = 0;
  for (; i < args.size(); i += 2) {
    if (!IsConsumeKeyword(args[i]) || i + 1 >= args.size()) return ReplySyntaxError(ctx.reply);
    std::string_view val = args[i + 1];
    if (EqualsIgnoreCase(args[i], "ttr")) {
      if (!ParseRange(val, 1, kMaxDurationS, &ttr)) return ctx.reply.Error(kNotInteger);
    } else if (EqualsIgnoreCase(args[i], "count")) {
      if (!ParseRange(val, 1, 1000, &count)) return ctx.reply.Error(kNotInteger);
    } else {
      // BLPOP's rules and texts.
      const std::string text(val);
      char* end = nullptr;
      const double t = strtod(text.c_str(), &end);
      if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(t) ||
          isspace(static_cast<unsigned char>(text[0]))) {
        return ctx.reply.Error("ERR timeout is not a float or out of range");
      }
      if (t < 0) return ctx.reply.Error("ERR timeout is negative");
      if (t > static_cast<double>(kMaxDurationS)) {
        return ctx.reply.Error("ERR timeout is out of range");
      }
      timeout = t;
    }
  }
  w->ttr_ms = ttr * 1000;
  w->count = static_cast<int>(count);
  const bool blocking = timeout > 0;
  w->deadline_ms =
      blocking ? ctx.worker->now_ms() + static_cast<int64_t>(std::llround(timeout * 1000)) : 0;
  w->ticket = ctx.client->Defer(blocking);
  ctx.worker->Consume(w, blocking);
}

namespace {

// ACK and CANCEL: many ids, one script call, integer reply.
void AckOrCancel(CommandContext& ctx, Args args, persist::Script script) {
  std::string ns;
  if (!JobNamespace(ctx, &ns)) return;
  if (!ValidQueueName(args[1])) return ctx.reply.Error("ERR invalid queue name");
  std::vector<std::string> argv;
  argv.reserve(1 + 2 * (args.size() - 2));
  argv.push_back(std::to_string(ctx.worker->wall_ms()));
  for (size_t i = 2; i < args.size(); ++i) {
    std::string key = CanonicalKeyOfText(args[i]);
    std::string sec = DerivableSecond(key);
    argv.push_back(std::move(key));
    argv.push_back(std::move(sec));
  }
  RunScript(ctx, QueueName{ns, std::string(args[1])}, script, std::move(argv), WriteIntegerReply);
}

}  // namespace

/* ACK queue id [id ...] */
void CmdAck(CommandContext& ctx, Args args) { AckOrCancel(ctx, args, persist::Script::kAck); }

/* CANCEL queue id [id ...] */
void CmdCancel(CommandContext& ctx, Args args) { AckOrCancel(ctx, args, persist::Script::kCancel); }

/* NACK queue id [DELAY s] */
void CmdNack(CommandContext& ctx, Args args) {
  std::string ns;
  if (!JobNamespace(ctx, &ns)) return;
  if (!ValidQueueName(args[1])) return ctx.reply.Error("ERR invalid queue name");
  std::string delay_ms;
  if (args.size() == 5) {
    if (!EqualsIgnoreCase(args[3], "delay")) return ReplySyntaxError(ctx.reply);
    int64_t d = 0;
    if (!ParseRange(args[4], 0, kMaxDurationS, &d)) return ctx.reply.Error(kNotInteger);
    delay_ms = std::to_string(d * 1000);
  } else if (args.size() != 3) {
    return ReplySyntaxError(ctx.reply);
  }
  Worker* worker = ctx.worker;
  const std::string tag = QueueName{ns, std::string(args[1])}.tag();
  const bool now = delay_ms.empty() || delay_ms == "0";
  RunScript(ctx, QueueName{ns, std::string(args[1])}, persist::Script::kNack,
            {std::to_string(ctx.worker->wall_ms()), CanonicalKeyOfText(args[2]), delay_ms},
            [worker, tag, now](proto::ReplyWriter& w, const redisReply* r) {
              int64_t n = 0;
              ReplyInt(r, &n);
              w.Integer(n);
              if (n > 0 && now) worker->AnnounceReady(tag);  // ready again, unless BACKOFF
            });
}

/* TOUCH queue id [TTR s] */
void CmdTouch(CommandContext& ctx, Args args) {
  std::string ns;
  if (!JobNamespace(ctx, &ns)) return;
  if (!ValidQueueName(args[1])) return ctx.reply.Error("ERR invalid queue name");
  std::string ttr_ms;
  if (args.size() == 5) {
    if (!EqualsIgnoreCase(args[3], "ttr")) return ReplySyntaxError(ctx.reply);
    int64_t t = 0;
    if (!ParseRange(args[4], 1, kMaxDurationS, &t)) return ctx.reply.Error(kNotInteger);
    ttr_ms = std::to_string(t * 1000);
  } else if (args.size() != 3) {
    return ReplySyntaxError(ctx.reply);
  }
  RunScript(ctx, QueueName{ns, std::string(args[1])}, persist::Script::kTouch,
            {std::to_string(ctx.worker->wall_ms()), CanonicalKeyOfText(args[2]), ttr_ms},
            WriteIntegerReply);
}

/* JOB queue id */
void CmdJob(CommandContext& ctx, Args args) {
  std::string ns;
  if (!JobNamespace(ctx, &ns)) return;
  if (!ValidQueueName(args[1])) return ctx.reply.Error("ERR invalid queue name");
  std::string key = CanonicalKeyOfText(args[2]);
  std::string sec = DerivableSecond(key);
  const int64_t now = ctx.worker->wall_ms();
  std::string queue(args[1]);
  std::string id(args[2]);
  RunScript(
      ctx, QueueName{ns, queue}, persist::Script::kJob, {std::to_string(now), key, sec},
      [queue, id](proto::ReplyWriter& w, const redisReply* r) {
        if (r->type == REDIS_REPLY_NIL || (r->type == REDIS_REPLY_ARRAY && r->elements == 0)) {
          return w.NullArray();
        }
        // {state, payload, tries_left, attempt, created_ms, due_ms, ttl_left_s, every_s,
        //  backoff_s}
        if (r->type != REDIS_REPLY_ARRAY || r->elements < 9) {
          return w.Error("ERR unexpected reply from storage");
        }
        static const char* const kInts[] = {"tries_left", "attempt", "created_ms", "due_ms",
                                            "ttl_left_s", "every_s", "backoff_s"};
        w.MapHeader(11);
        w.Bulk("id");
        w.Bulk(id);
        w.Bulk("queue");
        w.Bulk(queue);
        w.Bulk("state");
        w.Bulk(std::string_view(r->element[0]->str, r->element[0]->len));
        w.Bulk("payload");
        w.Bulk(std::string_view(r->element[1]->str, r->element[1]->len));
        for (size_t i = 0; i < std::size(kInts); ++i) {
          int64_t v = 0;
          ReplyInt(r->element[2 + i], &v);
          w.Bulk(kInts[i]);
          w.Integer(v);
        }
      });
}

namespace {

// PEEK and DEADLETTER PEEK: an array of jobs (possibly empty).
ReplyFn JobListReply(const std::string& ns, const std::string& queue, Worker* worker) {
  return [ns, queue, worker](proto::ReplyWriter& w, const redisReply* r) {
    std::vector<JobEntry> jobs;
    if (!DecodeJobs(r, 0, ns, queue, &jobs)) return w.Error("ERR unexpected reply from storage");
    w.ArrayHeader(jobs.size());
    for (const JobEntry& j : jobs) WriteJob(w, j, worker->wall_ms());
  };
}

// "[COUNT n]" at args[from]; false after replying an error.
bool ParseCountOption(CommandContext& ctx, Args args, size_t from, int64_t* count) {
  *count = 1;
  if (args.size() == from) return true;
  if (args.size() != from + 2 || !EqualsIgnoreCase(args[from], "count")) {
    ReplySyntaxError(ctx.reply);
    return false;
  }
  if (!ParseRange(args[from + 1], 1, 1000, count)) {
    ctx.reply.Error(kNotInteger);
    return false;
  }
  return true;
}

}  // namespace

/* PEEK queue [COUNT n] */
void CmdPeek(CommandContext& ctx, Args args) {
  std::string ns;
  if (!JobNamespace(ctx, &ns)) return;
  if (!ValidQueueName(args[1])) return ctx.reply.Error("ERR invalid queue name");
  int64_t count;
  if (!ParseCountOption(ctx, args, 2, &count)) return;
  std::string queue(args[1]);
  RunScript(ctx, QueueName{ns, queue}, persist::Script::kPeek,
            {std::to_string(ctx.worker->wall_ms()), std::to_string(count)},
            JobListReply(ns, queue, ctx.worker));
}

/* QSTAT queue */
void CmdQstat(CommandContext& ctx, Args args) {
  std::string ns;
  if (!JobNamespace(ctx, &ns)) return;
  if (!ValidQueueName(args[1])) return ctx.reply.Error("ERR invalid queue name");
  RunScript(ctx, QueueName{ns, std::string(args[1])}, persist::Script::kQstat,
            {std::to_string(ctx.worker->wall_ms())},
            [](proto::ReplyWriter& w, const redisReply* r) {
              static const char* const kFields[] = {
                  "ready",          "delayed",     "leased",        "dead",      "published_total",
                  "consumed_total", "acked_total", "expired_total", "dead_total"};
              if (r->type != REDIS_REPLY_ARRAY || r->elements < std::size(kFields)) {
                return w.Error("ERR unexpected reply from storage");
              }
              w.MapHeader(std::size(kFields));
              for (size_t i = 0; i < std::size(kFields); ++i) {
                int64_t v = 0;
                ReplyInt(r->element[i], &v);
                w.Bulk(kFields[i]);
                w.Integer(v);
              }
            });
}

/* PURGE queue */
void CmdPurge(CommandContext& ctx, Args args) {
  std::string ns;
  if (!JobNamespace(ctx, &ns)) return;
  if (!ValidQueueName(args[1])) return ctx.reply.Error("ERR invalid queue name");
  RunScript(ctx, QueueName{ns, std::string(args[1])}, persist::Script::kPurge,
            {std::to_string(ctx.worker->wall_ms())}, WriteIntegerReply);
}

/* DEADLETTER SIZE queue | PEEK queue [COUNT n] | RESPAWN queue [COUNT n] [TTL s]
 *            | DELETE queue [COUNT n] | DELETE queue ID id */
void CmdDeadletter(CommandContext& ctx, Args args) {
  std::string ns;
  if (!JobNamespace(ctx, &ns)) return;
  const std::string sub = Lower(args[1]);
  if (sub != "size" && sub != "peek" && sub != "respawn" && sub != "delete") {
    std::string msg = "ERR unknown subcommand '";
    msg.append(args[1].substr(0, 128));
    msg += "'. Try DEADLETTER HELP.";
    return ctx.reply.Error(msg);
  }
  if (args.size() < 3) return ReplyWrongArity(ctx.reply, "deadletter|" + sub);
  if (!ValidQueueName(args[2])) return ctx.reply.Error("ERR invalid queue name");
  std::string queue(args[2]);
  QueueName q{ns, queue};
  const std::string now = std::to_string(ctx.worker->wall_ms());
  if (sub == "size") {
    if (args.size() != 3) return ReplyWrongArity(ctx.reply, "deadletter|size");
    return RunScript(ctx, q, persist::Script::kDeadletter, {"size", now, "0", ""},
                     WriteIntegerReply);
  }
  if (sub == "peek") {
    int64_t count;
    if (!ParseCountOption(ctx, args, 3, &count)) return;
    return RunScript(ctx, q, persist::Script::kDeadletter, {"peek", now, std::to_string(count), ""},
                     JobListReply(ns, queue, ctx.worker));
  }
  if (sub == "respawn") {
    int64_t count = 1;
    int64_t ttl = ctx.worker->config().default_ttl;
    for (size_t i = 3; i < args.size(); i += 2) {
      if (i + 1 >= args.size()) return ReplySyntaxError(ctx.reply);
      if (EqualsIgnoreCase(args[i], "count")) {
        if (!ParseRange(args[i + 1], 1, 1000, &count)) return ctx.reply.Error(kNotInteger);
      } else if (EqualsIgnoreCase(args[i], "ttl")) {
        if (!ParseRange(args[i + 1], 0, kMaxDurationS, &ttl)) return ctx.reply.Error(kNotInteger);
      } else {
        return ReplySyntaxError(ctx.reply);
      }
    }
    Worker* worker = ctx.worker;
    const std::string tag = q.tag();
    return RunScript(ctx, q, persist::Script::kDeadletter,
                     {"respawn", now, std::to_string(count), std::to_string(ttl)},
                     [worker, tag](proto::ReplyWriter& w, const redisReply* r) {
                       int64_t n = 0;
                       ReplyInt(r, &n);
                       w.Integer(n);
                       if (n > 0) worker->AnnounceReady(tag);
                     });
  }
  // delete
  if (args.size() == 5 && EqualsIgnoreCase(args[3], "id")) {
    return RunScript(ctx, q, persist::Script::kDeadletter,
                     {"delete_id", now, "1", CanonicalKeyOfText(args[4])}, WriteIntegerReply);
  }
  int64_t count;
  if (!ParseCountOption(ctx, args, 3, &count)) return;
  RunScript(ctx, q, persist::Script::kDeadletter, {"delete", now, std::to_string(count), ""},
            WriteIntegerReply);
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

/* QUEUES [MATCH glob]: the namespace's queues that hold at least one job. */
void CmdQueues(CommandContext& ctx, Args args) {
  std::string ns;
  if (!JobNamespace(ctx, &ns)) return;
  std::string pattern = "*";
  if (args.size() == 3 && EqualsIgnoreCase(args[1], "match")) {
    pattern = std::string(args[2]);
  } else if (args.size() != 1) {
    return ReplySyntaxError(ctx.reply);
  }
  Worker* worker = ctx.worker;
  persist::PoolClient* pool = worker->PoolFor(ns);
  if (pool == nullptr) return ctx.reply.Error("ERR no pool configured for this namespace");
  ClientPort* port = ctx.client;
  const ReplyTicket ticket = port->Defer(false);
  const std::string_view cmd[] = {"SMEMBERS", "dq:queues"};
  const uint64_t affinity = ctx.session.id;
  pool->Command(
      cmd, affinity,
      [worker, pool, port, ticket, ns, pattern, affinity](const persist::UpstreamResult& r) {
        if (r.reply == nullptr || r.reply->type != REDIS_REPLY_ARRAY) {
          if (proto::ReplyWriter* out = port->Begin(ticket)) {
            out->Error(r.reply == nullptr ? r.error : "ERR unexpected reply from storage");
            port->Finish(ticket);
          }
          return;
        }
        struct Gather {
          std::vector<std::string> names;
          std::vector<bool> nonempty;
          size_t left = 0;
        };
        auto g = std::make_shared<Gather>();
        const std::string prefix = ns + "/";
        for (size_t i = 0; i < r.reply->elements; ++i) {
          std::string_view tag(r.reply->element[i]->str, r.reply->element[i]->len);
          if (!tag.starts_with(prefix)) continue;
          std::string_view name = tag.substr(prefix.size());
          if (GlobMatch(pattern, name)) g->names.emplace_back(name);
        }
        g->nonempty.assign(g->names.size(), false);
        g->left = g->names.size();
        auto finish = [port, ticket, g] {
          proto::ReplyWriter* out = port->Begin(ticket);
          if (out == nullptr) return;
          size_t n = 0;
          for (bool b : g->nonempty) n += b;
          out->ArrayHeader(n);
          for (size_t i = 0; i < g->names.size(); ++i) {
            if (g->nonempty[i]) out->Bulk(g->names[i]);
          }
          port->Finish(ticket);
        };
        if (g->left == 0) return finish();
        const std::string now = std::to_string(worker->wall_ms());
        for (size_t i = 0; i < g->names.size(); ++i) {
          const std::string prefix_key = QueueName{ns, g->names[i]}.prefix();
          const std::string_view keys[] = {prefix_key};
          const std::string_view argv[] = {now};
          pool->Eval(persist::Script::kQstat, keys, argv, affinity,
                     [g, i, finish](const persist::UpstreamResult& q) {
                       if (q.reply != nullptr && q.reply->type == REDIS_REPLY_ARRAY &&
                           q.reply->elements >= 4) {
                         for (size_t k = 0; k < 4; ++k) {
                           int64_t v = 0;
                           if (ReplyInt(q.reply->element[k], &v) && v > 0) g->nonempty[i] = true;
                         }
                       }
                       if (--g->left == 0) finish();
                     });
        }
      });
}

}  // namespace deferq::queue
