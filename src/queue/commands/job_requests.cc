// Argument parsing of the job commands (see job_requests.h). The rules of docs/commands.md, errors
// and limits: numbers read as Redis reads them, each option at most once, option keywords
// case-insensitive, and the error texts Redis uses for the same mistakes.
#include "queue/commands/job_requests.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdlib>

#include "config/job_limits.h"
#include "config/queue_tag.h"
#include "schedule/cron.h"

namespace deferq::queue {

namespace {

constexpr const char* kNotInteger = "ERR value is not an integer or out of range";

// An integer in [min, max]; false also for what is not an integer.
bool ParseRange(std::string_view s, int64_t min, int64_t max, int64_t* out) {
  return ParseInteger(s, out) && *out >= min && *out <= max;
}

// An admin connection names the namespace its job commands work in first (docs/commands.md).
constexpr const char* kAdminNoNamespace =
    "NOPERM an admin connection names its namespace first: NAMESPACE USE <namespace>";

// The failure path of every parser: the error is answered, the command goes no further.
bool Fail(CommandContext& ctx, std::string_view error) {
  ctx.reply.Error(error);
  return false;
}

bool SyntaxError(CommandContext& ctx) { return Fail(ctx, "ERR syntax error"); }

// The namespace the connection's job commands work in and the queue named `name` in it.
bool ParseQueue(CommandContext& ctx, std::string_view name, QueueName* q) {
  if (ctx.session.admin && ctx.session.ns == "admin") {
    return Fail(ctx, kAdminNoNamespace);
  }
  if (!ValidQueueName(name)) return Fail(ctx, "ERR invalid queue name");
  q->ns = ctx.session.ns;
  q->queue = std::string(name);
  return true;
}

bool ParseJobId(CommandContext& ctx, std::string_view id) {
  return ValidName(id) || Fail(ctx, "ERR invalid job id");
}

// "[<keyword> n]" at args[from], n in [min, max], or nothing; anything else is a syntax error.
bool ParseOneOption(CommandContext& ctx, Args args, size_t from, std::string_view keyword,
                    int64_t min, int64_t max, int64_t* out) {
  if (args.size() == from) return true;
  if (args.size() != from + 2 || !EqualsIgnoreCase(args[from], keyword)) return SyntaxError(ctx);
  return ParseRange(args[from + 1], min, max, out) || Fail(ctx, kNotInteger);
}

// BLPOP's timeout rules and texts; -0 counts as negative (docs/commands.md, errors and limits: "-0"
// is not a number).
bool ParseTimeout(CommandContext& ctx, std::string_view val, double* out) {
  const std::string text(val);
  char* end = nullptr;
  const double t = strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(t) ||
      isspace(static_cast<unsigned char>(text[0]))) {
    return Fail(ctx, "ERR timeout is not a float or out of range");
  }
  if (std::signbit(t)) return Fail(ctx, "ERR timeout is negative");
  if (t > static_cast<double>(kMaxDurationS)) return Fail(ctx, "ERR timeout is out of range");
  *out = t;
  return true;
}

// The longest prefix of s of at most max bytes that does not end inside a UTF-8 character (a
// reason that is not UTF-8 is cut at max bytes, less at most 3).
std::string_view CutUtf8(std::string_view s, size_t max) {
  if (s.size() <= max) return s;
  size_t n = max;
  for (int back = 0; back < 3 && n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80;
       ++back) {
    --n;
  }
  return s.substr(0, n);
}

}  // namespace

namespace {

// CRON spec [TZ zone]: the schedule block, and the first occurrence after the due time the
// other options gave (now, or DELAY/AT) as the job's due time.
bool ParseSchedule(CommandContext& ctx, std::string_view text, std::string_view zone_name,
                   PublishRequest* req) {
  schedule::Cron cron;
  std::string error;
  if (!schedule::ParseCron(text, &cron, &error)) return Fail(ctx, error);
  const schedule::ZoneRule* zone = schedule::SystemZones().Find(zone_name);
  if (zone == nullptr) {
    return Fail(ctx, "ERR unknown time zone (TZ wants an IANA name such as Europe/Paris)");
  }
  const int64_t due = schedule::NextOccurrence(cron, *zone, req->due_ms);
  if (due < 0 || due - req->now_ms > kMaxDurationS * 1000) {
    return Fail(ctx, "ERR CRON has no occurrence within a century");
  }
  req->due_ms = due;
  req->delay_ms = due - req->now_ms;
  req->schedule = schedule::EncodeSchedule(cron, *zone, text, zone_name);
  return true;
}

}  // namespace

namespace {

bool ParsePublishOrCall(CommandContext& ctx, Args args, PublishRequest* req, bool call) {
  if (!ParseQueue(ctx, args[1], &req->q)) return false;
  const Config& cfg = ctx.loop->config();
  if (args[2].size() > cfg.max_payload) return Fail(ctx, "ERR payload too large");
  req->payload = args[2];
  req->now_ms = ctx.loop->wall_ms();
  req->due_ms = req->now_ms;
  req->ttl_s = cfg.default_ttl;
  req->tries = cfg.default_tries;
  // Each option at most once, as Redis's SET refuses "EX 1 EX 2".
  bool has_due = false, has_ttl = false, has_tries = false, has_id = false, has_every = false,
       has_backoff = false, has_max = false, has_keep = false, has_tz = false, has_priority = false,
       has_timeout = false;
  std::string_view cron_text, zone_name = "UTC";
  auto once = [&](bool* seen) {
    if (*seen) return false;
    *seen = true;
    return true;
  };
  for (size_t i = 3; i < args.size(); ++i) {
    std::string_view opt = args[i];
    if (EqualsIgnoreCase(opt, "replace")) {
      if (req->replace) return SyntaxError(ctx);
      req->replace = true;
      continue;
    }
    if (EqualsIgnoreCase(opt, "jitter")) {
      if (req->backoff_jitter) return SyntaxError(ctx);
      req->backoff_jitter = true;
      continue;
    }
    if (i + 1 >= args.size()) return SyntaxError(ctx);
    std::string_view val = args[++i];
    const bool at = EqualsIgnoreCase(opt, "at") || EqualsIgnoreCase(opt, "pat");
    const bool ms = EqualsIgnoreCase(opt, "pdelay") || EqualsIgnoreCase(opt, "pat");
    if (at || ms || EqualsIgnoreCase(opt, "delay")) {
      if (!once(&has_due)) return SyntaxError(ctx);  // also two different due-time options
      int64_t v = 0;
      if (at) {
        if (!ParseRange(val, 0, ms ? INT64_MAX / 2 : INT64_MAX / 2000, &v)) {
          return Fail(ctx, kNotInteger);
        }
        const int64_t at_ms = ms ? v : v * 1000;
        if (at_ms - req->now_ms > kMaxDurationS * 1000) return Fail(ctx, kNotInteger);
        req->delay_ms = std::max<int64_t>(0, at_ms - req->now_ms);  // in the past: ready at once
      } else {
        if (!ParseRange(val, 0, ms ? kMaxDurationS * 1000 : kMaxDurationS, &v)) {
          return Fail(ctx, kNotInteger);
        }
        req->delay_ms = ms ? v : v * 1000;
      }
      req->due_ms = req->now_ms + req->delay_ms;
    } else if (EqualsIgnoreCase(opt, "ttl")) {
      if (!once(&has_ttl)) return SyntaxError(ctx);
      if (!ParseRange(val, 0, kMaxDurationS, &req->ttl_s)) return Fail(ctx, kNotInteger);
    } else if (EqualsIgnoreCase(opt, "tries")) {
      if (!once(&has_tries)) return SyntaxError(ctx);
      if (!ParseRange(val, 1, kMaxTries, &req->tries)) return Fail(ctx, kNotInteger);
    } else if (EqualsIgnoreCase(opt, "id")) {
      if (!once(&has_id)) return SyntaxError(ctx);
      req->id = val;
    } else if (EqualsIgnoreCase(opt, "every")) {
      if (!once(&has_every)) return SyntaxError(ctx);
      if (!ParseRange(val, 1, kMaxDurationS, &req->every_s)) return Fail(ctx, kNotInteger);
    } else if (EqualsIgnoreCase(opt, "cron")) {
      if (!cron_text.empty() || val.empty()) return SyntaxError(ctx);
      cron_text = val;
    } else if (EqualsIgnoreCase(opt, "priority")) {
      if (!once(&has_priority)) return SyntaxError(ctx);
      if (!ParseRange(val, 0, kMaxPriority, &req->priority)) return Fail(ctx, kNotInteger);
    } else if (EqualsIgnoreCase(opt, "tz")) {
      if (!once(&has_tz)) return SyntaxError(ctx);
      zone_name = val;
    } else if (EqualsIgnoreCase(opt, "backoff")) {
      if (!once(&has_backoff)) return SyntaxError(ctx);
      if (!ParseRange(val, 0, kMaxDurationS, &req->backoff_s)) return Fail(ctx, kNotInteger);
    } else if (EqualsIgnoreCase(opt, "keep")) {
      if (!once(&has_keep)) return SyntaxError(ctx);
      if (!ParseRange(val, 1, kMaxDurationS, &req->keep_s)) return Fail(ctx, kNotInteger);
    } else if (EqualsIgnoreCase(opt, "max")) {
      if (!once(&has_max)) return SyntaxError(ctx);
      if (!ParseRange(val, 1, kMaxBackoffCapS, &req->backoff_max_s)) {
        return Fail(ctx, kNotInteger);
      }
    } else if (EqualsIgnoreCase(opt, "retain")) {
      if (req->retain_s >= 0) return SyntaxError(ctx);
      if (!ParseRange(val, 0, kMaxDurationS, &req->retain_s)) return Fail(ctx, kNotInteger);
    } else if (call && EqualsIgnoreCase(opt, "timeout")) {
      if (!once(&has_timeout)) return SyntaxError(ctx);
      if (!ParseTimeout(ctx, val, &req->timeout_s)) return false;
    } else {
      return SyntaxError(ctx);
    }
  }
  if ((req->replace || has_keep) && !has_id) return SyntaxError(ctx);             // ID's
  if ((has_max || req->backoff_jitter) && !has_backoff) return SyntaxError(ctx);  // BACKOFF's
  if (has_tz && cron_text.empty()) return SyntaxError(ctx);                       // CRON's
  if (has_every && !cron_text.empty()) return SyntaxError(ctx);                   // one schedule
  if ((has_every || !cron_text.empty()) && (req->retain_s >= 0 || call)) {
    return Fail(ctx, "ERR a recurring job never finishes: RETAIN and CALL are for one-off jobs");
  }
  if (has_id && !ParseJobId(ctx, req->id)) return false;
  if (!cron_text.empty() && !ParseSchedule(ctx, cron_text, zone_name, req)) return false;
  // TTL counts from publish, so an explicit one must cover the delay. A default TTL shorter
  // than the delay is stretched to the delay plus the default (a job delayed by two days does
  // not expire before it is due). A recurring job's TTL applies to each occurrence from its due
  // time.
  if (req->every_s == 0 && req->schedule.empty() && req->ttl_s != 0 &&
      req->ttl_s * 1000 < req->delay_ms) {
    if (has_ttl) return Fail(ctx, "ERR ttl is shorter than delay");
    // The record holds the TTL in 32 bits; a century's delay still fits below the cap.
    req->ttl_s = std::min<int64_t>(req->ttl_s + (req->delay_ms + 999) / 1000, UINT32_MAX);
  }
  if (call && req->retain_s < 0) req->retain_s = kDefaultCallRetainS;
  return true;
}

}  // namespace

bool ParsePublish(CommandContext& ctx, Args args, PublishRequest* req) {
  return ParsePublishOrCall(ctx, args, req, /*call=*/false);
}

bool ParseCall(CommandContext& ctx, Args args, PublishRequest* req) {
  return ParsePublishOrCall(ctx, args, req, /*call=*/true);
}

bool ParseWaitJob(CommandContext& ctx, Args args, WaitJobRequest* req) {
  if (!ParseQueue(ctx, args[1], &req->q) || !ParseJobId(ctx, args[2])) return false;
  req->id = args[2];
  if (args.size() == 3) return true;
  if (args.size() != 5 || !EqualsIgnoreCase(args[3], "timeout")) return SyntaxError(ctx);
  return ParseTimeout(ctx, args[4], &req->timeout_s);
}

bool ParseConsume(CommandContext& ctx, Args args, ConsumeRequest* req) {
  if (ctx.session.admin && ctx.session.ns == "admin") {
    return Fail(ctx, kAdminNoNamespace);
  }
  req->ns = ctx.session.ns;
  req->queues.reserve(args.size() - 1);
  size_t i = 1;
  for (; i < args.size() && !IsConsumeKeyword(args[i]); ++i) {
    if (!ValidName(args[i])) return Fail(ctx, "ERR invalid queue name");
    req->queues.emplace_back(args[i]);
  }
  if (req->queues.empty()) {
    ReplyWrongArity(ctx.reply, "consume");
    return false;
  }
  const Config& cfg = ctx.loop->config();
  req->ttr_s = cfg.default_ttr;
  req->timeout_s = cfg.default_timeout;
  bool has_ttr = false, has_timeout = false, has_count = false;
  for (; i < args.size(); i += 2) {
    if (!IsConsumeKeyword(args[i]) || i + 1 >= args.size()) return SyntaxError(ctx);
    std::string_view val = args[i + 1];
    bool* seen = EqualsIgnoreCase(args[i], "ttr")     ? &has_ttr
                 : EqualsIgnoreCase(args[i], "count") ? &has_count
                                                      : &has_timeout;
    if (*seen) return SyntaxError(ctx);
    *seen = true;
    if (seen == &has_ttr) {
      if (!ParseRange(val, 1, kMaxTtrS, &req->ttr_s)) return Fail(ctx, kNotInteger);
    } else if (seen == &has_count) {
      if (!ParseRange(val, 1, kMaxCount, &req->count)) return Fail(ctx, kNotInteger);
    } else if (!ParseTimeout(ctx, val, &req->timeout_s)) {
      return false;
    }
  }
  return true;
}

bool ParseIds(CommandContext& ctx, Args args, IdsRequest* req) {
  if (!ParseQueue(ctx, args[1], &req->q)) return false;
  for (size_t i = 2; i < args.size(); ++i) {
    if (!ParseJobId(ctx, args[i])) return false;
    req->ids.push_back(args[i]);
  }
  return true;
}

namespace {

// The one-job ACK's options from args[3] on: RESULT bytes and ATTEMPT n, each at most once.
bool OneJobAckOptions(Args args, IdsRequest* req) {
  if (args.size() != 5 && args.size() != 7) return false;
  for (size_t i = 3; i + 1 < args.size(); i += 2) {
    if (EqualsIgnoreCase(args[i], "attempt") && req->attempt < 0) {
      if (!ParseRange(args[i + 1], 0, kMaxTries, &req->attempt)) return false;
    } else if (EqualsIgnoreCase(args[i], "result") && !req->has_result) {
      req->has_result = true;
      req->result = args[i + 1];
    } else {
      return false;
    }
  }
  return true;
}

}  // namespace

bool ParseAck(CommandContext& ctx, Args args, IdsRequest* req) {
  if (OneJobAckOptions(args, req)) {
    if (!ParseQueue(ctx, args[1], &req->q) || !ParseJobId(ctx, args[2])) return false;
    if (req->result.size() > ctx.loop->config().max_payload) {
      return Fail(ctx, "ERR result too large");
    }
    req->ids.push_back(args[2]);
    return true;
  }
  req->attempt = -1;
  req->has_result = false;
  req->result = {};
  return ParseIds(ctx, args, req);
}

bool ParseNack(CommandContext& ctx, Args args, JobOptionRequest* req) {
  if (!ParseQueue(ctx, args[1], &req->q) || !ParseJobId(ctx, args[2])) return false;
  req->id = args[2];
  bool has_delay = false, has_reason = false, has_attempt = false;
  for (size_t i = 3; i < args.size(); ++i) {
    if (EqualsIgnoreCase(args[i], "keeptry") && !req->keep_try) {
      req->keep_try = true;
      continue;
    }
    if (i + 1 >= args.size()) return SyntaxError(ctx);
    if (EqualsIgnoreCase(args[i], "delay") && !has_delay) {
      has_delay = true;
      if (!ParseRange(args[++i], 0, kMaxDurationS, &req->option_s)) {
        return Fail(ctx, kNotInteger);
      }
    } else if (EqualsIgnoreCase(args[i], "reason") && !has_reason) {
      has_reason = true;
      req->reason = CutUtf8(args[++i], kMaxReasonBytes);
    } else if (EqualsIgnoreCase(args[i], "attempt") && !has_attempt) {
      has_attempt = true;
      if (!ParseRange(args[++i], 0, kMaxTries, &req->attempt)) return Fail(ctx, kNotInteger);
    } else {
      return SyntaxError(ctx);  // unknown or repeated
    }
  }
  return true;
}

bool ParseTouch(CommandContext& ctx, Args args, JobOptionRequest* req) {
  if (!ParseQueue(ctx, args[1], &req->q) || !ParseJobId(ctx, args[2])) return false;
  req->id = args[2];
  bool has_ttr = false, has_attempt = false;
  for (size_t i = 3; i < args.size(); i += 2) {
    if (i + 1 >= args.size()) return SyntaxError(ctx);
    if (EqualsIgnoreCase(args[i], "ttr") && !has_ttr) {
      has_ttr = true;
      if (!ParseRange(args[i + 1], 1, kMaxTtrS, &req->option_s)) return Fail(ctx, kNotInteger);
    } else if (EqualsIgnoreCase(args[i], "attempt") && !has_attempt) {
      has_attempt = true;
      if (!ParseRange(args[i + 1], 0, kMaxTries, &req->attempt)) return Fail(ctx, kNotInteger);
    } else {
      return SyntaxError(ctx);  // unknown or repeated
    }
  }
  return true;
}

bool ParseJob(CommandContext& ctx, Args args, JobOptionRequest* req) {
  if (!ParseQueue(ctx, args[1], &req->q) || !ParseJobId(ctx, args[2])) return false;
  req->id = args[2];
  return true;
}

bool ParsePeek(CommandContext& ctx, Args args, QueueRequest* req) {
  return ParseQueue(ctx, args[1], &req->q) &&
         ParseOneOption(ctx, args, 2, "count", 1, kMaxCount, &req->count);
}

bool ParseBrowse(CommandContext& ctx, Args args, BrowseRequest* req) {
  using Op = BrowseRequest::Op;
  if (!ParseQueue(ctx, args[1], &req->q)) return false;
  const std::string_view what = args[2];
  if (EqualsIgnoreCase(what, "delayed")) {
    req->op = Op::kDelayed;
  } else if (EqualsIgnoreCase(what, "leased")) {
    req->op = Op::kLeased;
  } else if (EqualsIgnoreCase(what, "due")) {
    req->op = Op::kDue;
  } else {
    return SyntaxError(ctx);
  }
  bool seen[2] = {false, false};
  for (size_t i = 3; i < args.size(); i += 2) {
    if (i + 1 >= args.size()) return SyntaxError(ctx);
    const bool due = req->op == Op::kDue;
    int which;
    int64_t min, max, *out;
    if (!due && EqualsIgnoreCase(args[i], "from")) {
      which = 0, min = 0, max = kMaxTimestampMs, out = &req->from_ms;
    } else if (!due && EqualsIgnoreCase(args[i], "count")) {
      which = 1, min = 1, max = kMaxCount, out = &req->count;
    } else if (due && EqualsIgnoreCase(args[i], "step")) {
      which = 0, min = 1, max = 86400, out = &req->step_s;
    } else if (due && EqualsIgnoreCase(args[i], "steps")) {
      which = 1, min = 1, max = 1000, out = &req->steps;
    } else {
      return SyntaxError(ctx);
    }
    if (seen[which]) return SyntaxError(ctx);  // repeated
    seen[which] = true;
    if (!ParseRange(args[i + 1], min, max, out)) return Fail(ctx, kNotInteger);
  }
  return true;
}

bool ParseQueueOnly(CommandContext& ctx, Args args, QueueRequest* req) {
  return ParseQueue(ctx, args[1], &req->q);
}

bool ParseQueues(CommandContext& ctx, Args args, QueuesRequest* req) {
  if (ctx.session.admin && ctx.session.ns == "admin") {
    return Fail(ctx, kAdminNoNamespace);
  }
  req->ns = ctx.session.ns;
  if (args.size() == 3 && EqualsIgnoreCase(args[1], "match")) {
    req->pattern = std::string(args[2]);
  } else if (args.size() != 1) {
    return SyntaxError(ctx);
  }
  return true;
}

bool ParseDeadletter(CommandContext& ctx, Args args, DeadletterRequest* req) {
  using Op = DeadletterRequest::Op;
  std::string_view sub = args[1];
  if (EqualsIgnoreCase(sub, "help")) {
    if (args.size() != 2) {
      ReplyWrongArity(ctx.reply, "deadletter|help");
      return false;
    }
    req->op = Op::kHelp;
    return true;
  }
  if (ctx.session.admin && ctx.session.ns == "admin") {
    return Fail(ctx, kAdminNoNamespace);
  }
  const char* name = nullptr;
  if (EqualsIgnoreCase(sub, "size")) {
    req->op = Op::kSize, name = "deadletter|size";
  } else if (EqualsIgnoreCase(sub, "peek")) {
    req->op = Op::kPeek, name = "deadletter|peek";
  } else if (EqualsIgnoreCase(sub, "respawn")) {
    req->op = Op::kRespawn, name = "deadletter|respawn";
  } else if (EqualsIgnoreCase(sub, "delete")) {
    req->op = Op::kDelete, name = "deadletter|delete";
  } else {
    std::string msg = "ERR unknown subcommand '";
    msg.append(sub.substr(0, 128));
    msg += "'. Try DEADLETTER HELP.";
    return Fail(ctx, msg);
  }
  if (args.size() < 3) {
    ReplyWrongArity(ctx.reply, name);
    return false;
  }
  if (!ParseQueue(ctx, args[2], &req->q)) return false;
  switch (req->op) {
    case Op::kSize:
      if (args.size() == 3) return true;
      ReplyWrongArity(ctx.reply, name);
      return false;
    case Op::kPeek: {
      bool has_count = false;
      for (size_t i = 3; i < args.size(); ++i) {
        if (EqualsIgnoreCase(args[i], "witherrors") && !req->with_errors) {
          req->with_errors = true;
        } else if (EqualsIgnoreCase(args[i], "count") && !has_count && i + 1 < args.size()) {
          has_count = true;
          if (!ParseRange(args[++i], 1, kMaxCount, &req->count)) return Fail(ctx, kNotInteger);
        } else {
          return SyntaxError(ctx);  // unknown or repeated
        }
      }
      return true;
    }
    case Op::kRespawn: {
      req->ttl_s = ctx.loop->config().default_ttl;
      bool has_count = false, has_ttl = false;
      for (size_t i = 3; i < args.size(); i += 2) {
        if (i + 1 >= args.size()) return SyntaxError(ctx);
        if (EqualsIgnoreCase(args[i], "id") && !has_count && req->op == Op::kRespawn) {
          req->op = Op::kRespawnId;  // RESPAWN queue ID id [TTL s]: that one dead job
          req->id = args[i + 1];
          if (!ParseJobId(ctx, req->id)) return false;
        } else if (EqualsIgnoreCase(args[i], "count") && !has_count && req->op == Op::kRespawn) {
          has_count = true;
          if (!ParseRange(args[i + 1], 1, kMaxCount, &req->count)) return Fail(ctx, kNotInteger);
        } else if (EqualsIgnoreCase(args[i], "ttl") && !has_ttl) {
          has_ttl = true;
          if (!ParseRange(args[i + 1], 0, kMaxDurationS, &req->ttl_s)) {
            return Fail(ctx, kNotInteger);
          }
        } else {
          return SyntaxError(ctx);  // unknown or repeated
        }
      }
      return true;
    }
    default:  // kDelete
      if (args.size() == 5 && EqualsIgnoreCase(args[3], "id")) {
        req->op = Op::kDeleteId;
        req->id = args[4];
        return ParseJobId(ctx, req->id);
      }
      return ParseOneOption(ctx, args, 3, "count", 1, kMaxCount, &req->count);
  }
}

// The checks MULTI runs before queuing a job command (CommandSpec::check).
namespace {
template <typename Request, bool (*Parse)(CommandContext&, Args, Request*)>
bool Check(CommandContext& ctx, Args args) {
  Request req;
  return Parse(ctx, args, &req);
}
}  // namespace

bool CheckPublish(CommandContext& ctx, Args args) {
  return Check<PublishRequest, ParsePublish>(ctx, args);
}
bool CheckConsume(CommandContext& ctx, Args args) {
  return Check<ConsumeRequest, ParseConsume>(ctx, args);
}
bool CheckAck(CommandContext& ctx, Args args) { return Check<IdsRequest, ParseAck>(ctx, args); }
bool CheckCall(CommandContext& ctx, Args args) {
  return Check<PublishRequest, ParseCall>(ctx, args);
}
bool CheckWaitJob(CommandContext& ctx, Args args) {
  return Check<WaitJobRequest, ParseWaitJob>(ctx, args);
}
bool CheckCancel(CommandContext& ctx, Args args) { return Check<IdsRequest, ParseIds>(ctx, args); }
bool CheckNack(CommandContext& ctx, Args args) {
  return Check<JobOptionRequest, ParseNack>(ctx, args);
}
bool CheckTouch(CommandContext& ctx, Args args) {
  return Check<JobOptionRequest, ParseTouch>(ctx, args);
}
bool CheckJob(CommandContext& ctx, Args args) {
  return Check<JobOptionRequest, ParseJob>(ctx, args);
}
bool CheckPeek(CommandContext& ctx, Args args) { return Check<QueueRequest, ParsePeek>(ctx, args); }
bool CheckBrowse(CommandContext& ctx, Args args) {
  return Check<BrowseRequest, ParseBrowse>(ctx, args);
}
bool CheckQstat(CommandContext& ctx, Args args) {
  return Check<QueueRequest, ParseQueueOnly>(ctx, args);
}
bool CheckPurge(CommandContext& ctx, Args args) {
  return Check<QueueRequest, ParseQueueOnly>(ctx, args);
}
bool CheckQueues(CommandContext& ctx, Args args) {
  return Check<QueuesRequest, ParseQueues>(ctx, args);
}
bool CheckDeadletter(CommandContext& ctx, Args args) {
  return Check<DeadletterRequest, ParseDeadletter>(ctx, args);
}

}  // namespace deferq::queue
