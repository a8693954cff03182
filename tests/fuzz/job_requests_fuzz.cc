// Fuzz target: the argument parsers of the job commands (queue/commands/job_requests.h), the ones
// both the commands and their check after MULTI use.
//
// Input: lines separated by '\n'; the first is the command, the rest its arguments. Commands
// whose arity Dispatch would refuse are skipped (Dispatch never hands them to a parser). Each
// input runs against the default configuration and against one with every default at the
// largest value config/load.cc accepts. Checked: a parser either accepts and answers nothing, or
// refuses with exactly one error reply; what it accepts lies within the ranges docs/commands.md
// give, and the job record a PUBLISH would store holds its values exactly (no truncation).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "base/check.h"
#include "config/config.h"
#include "fuzz/job_parse_context.h"
#include "queue/commands/commands.h"
#include "queue/commands/job_requests.h"
#include "queue/model/job_codec.h"

namespace {

using namespace deferq;
using namespace deferq::queue;

constexpr int64_t kCenturyS = 100LL * 365 * 86400;
constexpr int64_t kU32Max = std::numeric_limits<uint32_t>::max();

bool ArityOk(const CommandSpec& spec, size_t n) {
  return spec.arity >= 0 ? n == static_cast<size_t>(spec.arity)
                         : n >= static_cast<size_t>(-spec.arity);
}

// Accepted: nothing was written. Refused: exactly one error line.
void CheckAnswered(JobParseContext& parse, bool accepted) {
  const bool replied = parse.replied();
  const std::string error = parse.TakeError();
  if (accepted) {
    DQ_CHECK_MSG(!replied, "accepted, yet answered");
  } else {
    DQ_CHECK_MSG(!error.empty() && error.find('\r') == std::string::npos,
                 "refused without one error line");
  }
}

void CheckPublish(JobParseContext& parse, Args args, const Config& cfg, bool call) {
  PublishRequest p;
  const bool ok = call ? ParseCall(parse.ctx(), args, &p) : ParsePublish(parse.ctx(), args, &p);
  CheckAnswered(parse, ok);
  if (!ok) return;
  // RETAIN: absent (-1) on PUBLISH, a CALL's default otherwise; none on a recurring job.
  DQ_CHECK(p.retain_s >= (call ? 0 : -1) && p.retain_s <= kCenturyS);
  DQ_CHECK(p.retain_s <= 0 || (p.every_s == 0 && p.schedule.empty()));
  DQ_CHECK(!call || (p.every_s == 0 && p.schedule.empty()));
  DQ_CHECK(std::isfinite(p.timeout_s) && p.timeout_s >= 0 && p.timeout_s <= kCenturyS);
  DQ_CHECK(call || p.timeout_s == 0);
  DQ_CHECK(p.payload.size() <= cfg.max_payload);
  DQ_CHECK(p.delay_ms >= 0 && p.delay_ms <= kCenturyS * 1000);
  DQ_CHECK(p.due_ms == p.now_ms + p.delay_ms);
  DQ_CHECK(p.tries >= 1 && p.tries <= 65535);
  DQ_CHECK(p.ttl_s >= 0 && p.every_s >= 0 && p.backoff_s >= 0);
  // A job that expires does not expire before it is due (docs/commands.md, errors and limits).
  DQ_CHECK(p.ttl_s == 0 || p.every_s != 0 || !p.schedule.empty() || p.ttl_s * 1000 >= p.delay_ms);
  DQ_CHECK(p.every_s == 0 || p.schedule.empty());  // one schedule at most
  DQ_CHECK(p.priority >= 0 && p.priority <= 9);
  DQ_CHECK(!p.replace || !p.id.empty());
  // The record's 32-bit fields hold what was asked.
  DQ_CHECK_MSG(p.ttl_s <= kU32Max, "ttl %lld does not fit the record",
               static_cast<long long>(p.ttl_s));
  DQ_CHECK(p.every_s <= kU32Max && p.backoff_s <= kU32Max);
  NewJob job;
  job.created_ms = p.now_ms;
  job.ttl_s = static_cast<uint32_t>(p.ttl_s);
  job.tries = static_cast<uint32_t>(p.tries);
  job.every_s = static_cast<uint32_t>(p.every_s);
  job.backoff_s = static_cast<uint32_t>(p.backoff_s);
  job.schedule = p.schedule;
  job.priority = static_cast<uint8_t>(p.priority);
  job.retain_s = static_cast<uint32_t>(std::max<int64_t>(0, p.retain_s));
  job.notify = call;
  job.payload = p.payload;
  const std::string record = EncodeRecord(job);
  DQ_CHECK(std::string_view(record).ends_with(p.payload));
}

void CheckConsume(JobParseContext& parse, Args args) {
  ConsumeRequest c;
  const bool ok = ParseConsume(parse.ctx(), args, &c);
  CheckAnswered(parse, ok);
  if (!ok) return;
  DQ_CHECK(!c.queues.empty());
  DQ_CHECK(c.ttr_s >= 1 && c.ttr_s <= std::numeric_limits<int64_t>::max() / 1000);
  // The deadline is computed in int64 milliseconds: the timeout must keep that exact.
  DQ_CHECK_MSG(std::isfinite(c.timeout_s) && c.timeout_s >= 0 && c.timeout_s <= kCenturyS,
               "timeout %g", c.timeout_s);
  DQ_CHECK(c.count >= 0 && c.count <= 1000);
}

void Check(Args args, const Config& cfg) {
  JobParseContext parse(cfg);
  const std::string_view name = args[0];
  if (EqualsIgnoreCase(name, "publish") || EqualsIgnoreCase(name, "call")) {
    return CheckPublish(parse, args, cfg, EqualsIgnoreCase(name, "call"));
  }
  if (EqualsIgnoreCase(name, "waitjob")) {
    WaitJobRequest w;
    const bool ok = ParseWaitJob(parse.ctx(), args, &w);
    CheckAnswered(parse, ok);
    if (ok) DQ_CHECK(std::isfinite(w.timeout_s) && w.timeout_s >= 0 && w.timeout_s <= kCenturyS);
    return;
  }
  if (EqualsIgnoreCase(name, "consume")) return CheckConsume(parse, args);
  if (EqualsIgnoreCase(name, "ack") || EqualsIgnoreCase(name, "cancel")) {
    IdsRequest r;
    const bool ack = EqualsIgnoreCase(name, "ack");
    const bool ok = ack ? ParseAck(parse.ctx(), args, &r) : ParseIds(parse.ctx(), args, &r);
    CheckAnswered(parse, ok);
    // The one-job form (ACK queue id [RESULT bytes] [ATTEMPT n]) has one id; any other, every
    // argument's.
    const bool one = r.attempt >= 0 || r.has_result;
    if (ok) DQ_CHECK(r.ids.size() == (one ? 1 : args.size() - 2));
    if (ok && r.has_result) DQ_CHECK(r.result.size() <= cfg.max_payload);
    return;
  }
  if (EqualsIgnoreCase(name, "nack") || EqualsIgnoreCase(name, "touch") ||
      EqualsIgnoreCase(name, "job")) {
    JobOptionRequest r;
    const bool ok = EqualsIgnoreCase(name, "nack")    ? ParseNack(parse.ctx(), args, &r)
                    : EqualsIgnoreCase(name, "touch") ? ParseTouch(parse.ctx(), args, &r)
                                                      : ParseJob(parse.ctx(), args, &r);
    CheckAnswered(parse, ok);
    if (ok) DQ_CHECK(r.option_s == -1 || (r.option_s >= 0 && r.option_s <= kCenturyS));
    if (ok) DQ_CHECK(r.attempt >= -1 && r.attempt <= 65535);
    return;
  }
  if (EqualsIgnoreCase(name, "peek") || EqualsIgnoreCase(name, "qstat") ||
      EqualsIgnoreCase(name, "purge")) {
    QueueRequest r;
    const bool ok = EqualsIgnoreCase(name, "peek") ? ParsePeek(parse.ctx(), args, &r)
                                                   : ParseQueueOnly(parse.ctx(), args, &r);
    CheckAnswered(parse, ok);
    if (ok) DQ_CHECK(r.count >= 1 && r.count <= 1000);
    return;
  }
  if (EqualsIgnoreCase(name, "queues")) {
    QueuesRequest r;
    CheckAnswered(parse, ParseQueues(parse.ctx(), args, &r));
    return;
  }
  if (EqualsIgnoreCase(name, "deadletter")) {
    DeadletterRequest d;
    const bool ok = ParseDeadletter(parse.ctx(), args, &d);
    CheckAnswered(parse, ok);
    if (!ok) return;
    DQ_CHECK(d.count >= 1 && d.count <= 1000);
    DQ_CHECK(d.ttl_s >= 0 && d.ttl_s <= kU32Max);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::vector<std::string_view> args;
  for (size_t start = 0; start <= text.size();) {
    size_t nl = text.find('\n', start);
    if (nl == std::string_view::npos) nl = text.size();
    args.push_back(text.substr(start, nl - start));
    start = nl + 1;
    if (args.size() > 64) return 0;
  }
  const CommandSpec* spec = FindCommand(args[0]);
  if (spec == nullptr || !spec->job || !ArityOk(*spec, args.size())) return 0;

  static const Config defaults;
  static const Config largest = [] {
    Config c;
    c.default_ttl = kU32Max;
    c.default_tries = 65535;
    c.default_ttr = kU32Max;
    c.default_timeout = 100.0 * 365 * 86400;  // the largest config/load.cc accepts
    c.max_payload = 64;
    c.max_bulk_len = c.max_payload + 1024;
    return c;
  }();
  Check(args, defaults);
  Check(args, largest);
  return 0;
}
