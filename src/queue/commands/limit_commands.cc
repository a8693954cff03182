// LIMIT SET / LIMIT GET (docs/commands.md, admin commands): per-namespace rate limits, stored in
// the pool `default` (rate_limiter.h has how they are enforced), and AdmitJobs, which job commands
// call.

#include <string>
#include <vector>

#include "config/queue_tag.h"
#include "queue/commands/auth.h"
#include "queue/commands/commands.h"
#include "queue/context/client_port.h"
#include "queue/context/loop.h"
#include "queue/model/job_codec.h"
#include "queue/tenancy/rate_limiter.h"

namespace deferq::queue {

namespace {

constexpr int64_t kMaxLimit = 1'000'000'000'000;  // jobs/s; far beyond any fleet
constexpr const char* kKindName[] = {"publish", "consume"};

// The pool `default`, where limits and budgets live whatever pool a namespace is bound to.
persist::PoolClient* DefaultPool(CommandContext& ctx) {
  return ctx.loop == nullptr ? nullptr : ctx.loop->namespaces().MetadataPool();
}

// Sends one command to the pool `default` and answers through `write` (errors passed on).
template <typename Write>
void RunOnDefault(CommandContext& ctx, std::span<const std::string_view> cmd, Write write) {
  persist::PoolClient* pool = DefaultPool(ctx);
  if (pool == nullptr || ctx.client == nullptr) {
    return ctx.reply.Error("ERR no pool 'default' configured");
  }
  const OwedReply owed = OwedReply::Owe(ctx.client, /*blocking=*/false);
  pool->Command(cmd, ctx.session.id, [owed, write](const persist::UpstreamResult& r) {
    owed.Write([&](proto::ReplyWriter& out) { WriteUpstreamReply(out, r, write); });
  });
}

/* LIMIT SET ns [PUBLISH n] [CONSUME n] */
void LimitSet(CommandContext& ctx, Args args) {
  if (!RequireAdmin(ctx, "limit|set")) return;
  if (args.size() < 5) return ReplyWrongArity(ctx.reply, "limit|set");
  const std::string ns(args[2]);
  if (!ValidName(ns)) return ctx.reply.Error("ERR invalid namespace name");
  if (args.size() % 2 == 0) return ReplySyntaxError(ctx.reply);
  std::string value[2];
  for (size_t i = 3; i + 1 < args.size(); i += 2) {
    int k = EqualsIgnoreCase(args[i], "publish")   ? 0
            : EqualsIgnoreCase(args[i], "consume") ? 1
                                                   : -1;
    if (k < 0 || !value[k].empty()) return ReplySyntaxError(ctx.reply);  // unknown or repeated
    int64_t n = 0;
    if (!ParseInteger(args[i + 1], &n) || n < 0 || n > kMaxLimit) {
      return ctx.reply.Error("ERR value is not an integer or out of range");
    }
    value[k] = std::to_string(n);
  }
  const std::string key = LimitKey(ns);
  std::vector<std::string_view> cmd = {"HSET", key};
  for (int k = 0; k < 2; ++k) {
    if (value[k].empty()) continue;
    cmd.push_back(kKindName[k]);
    cmd.push_back(value[k]);
  }
  if (ctx.loop != nullptr) ctx.loop->rate_limiter().Invalidate(ns);
  RunOnDefault(ctx, cmd, [](proto::ReplyWriter& w, persist::ReplyView) { w.Ok(); });
}

/* LIMIT GET ns: a map {publish, consume}, 0 = unlimited */
void LimitGet(CommandContext& ctx, Args args) {
  if (!RequireAdmin(ctx, "limit|get")) return;
  if (args.size() != 3) return ReplyWrongArity(ctx.reply, "limit|get");
  if (!ValidName(args[2])) return ctx.reply.Error("ERR invalid namespace name");
  const std::string key = LimitKey(args[2]);
  const std::string_view cmd[] = {"HMGET", key, kKindName[0], kKindName[1]};
  RunOnDefault(ctx, cmd, [](proto::ReplyWriter& w, persist::ReplyView r) {
    if (!r.is_array() || r.size() != 2) {
      return w.Error(kUnexpectedReply);
    }
    w.MapHeader(2);
    for (int k = 0; k < 2; ++k) {
      int64_t v = 0;
      if (!r[k].Int(&v)) v = 0;
      w.Bulk(kKindName[k]);
      w.Integer(v);
    }
  });
}

}  // namespace

/* LIMIT SET ns [PUBLISH n] [CONSUME n] | LIMIT GET ns | LIMIT HELP */
void CmdLimit(CommandContext& ctx, Args args) {
  if (EqualsIgnoreCase(args[1], "set")) return LimitSet(ctx, args);
  if (EqualsIgnoreCase(args[1], "get")) return LimitGet(ctx, args);
  if (EqualsIgnoreCase(args[1], "help") && args.size() == 2) {
    static const char* const kHelp[] = {
        "LIMIT <subcommand> [<arg> [value] ...]. Subcommands are:",
        "SET <namespace> [PUBLISH <n>] [CONSUME <n>]",
        "    Limit the namespace's jobs published and consumed per second (0 = unlimited).",
        "GET <namespace>",
        "    Return the namespace's limits as a map (publish, consume).",
        "HELP",
        "    Print this help.",
    };
    return ReplyHelp(ctx.reply, kHelp);
  }
  std::string msg = "ERR unknown subcommand '";
  msg.append(args[1].substr(0, 128));
  msg += "'. Try LIMIT HELP.";
  ctx.reply.Error(msg);
}

int64_t AdmitJobs(CommandContext& ctx, const std::string& ns, RateKind kind, int64_t want) {
  Loop* loop = ctx.loop;
  RateLimiter& limiter = loop->rate_limiter();
  const int64_t got =
      limiter.Admit(loop->namespaces().MetadataPool(), ns, kind, want, loop->wall_ms());
  if (got > 0) return got;
  std::string msg = "RATELIMIT ";
  msg += kKindName[static_cast<int>(kind)];
  msg += " rate of namespace '";
  msg += ns;
  msg += "' exceeded (";
  msg += std::to_string(limiter.Limit(ns, kind));
  msg += "/s)";
  ctx.reply.Error(msg);
  return 0;
}

}  // namespace deferq::queue
