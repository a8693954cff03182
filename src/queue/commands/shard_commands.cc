// Job commands over the shards of a sharded queue (shard_commands.h).
#include "queue/commands/shard_commands.h"

#include "queue/context/client_port.h"
#include "queue/context/instance.h"
#include "queue/context/loop.h"
#include "queue/delivery/waiters.h"
#include "queue/model/job_codec.h"
#include "queue/model/job_id.h"
#include "queue/model/queue_name.h"
#include "queue/model/shards.h"
#include "queue/stats/queue_stats.h"

namespace deferq::queue {

namespace {

struct ShardCall {
  QueueName q;  // the shard
  std::vector<std::string> args;
};

// Folds one shard's reply (its index in the calls) into the command's state; false when the
// reply does not have the script's shape.
using TakeFn = std::function<bool(size_t, persist::ReplyView)>;
using FinishFn = std::function<void(proto::ReplyWriter&)>;

using persist::FailureOf;

// Sends every call at once; when all have answered, writes the first error met or `finish`.
void RunOnShards(CommandContext& ctx, persist::Script script, std::vector<ShardCall> calls,
                 TakeFn take, FinishFn finish) {
  persist::PoolClient* pool = ctx.loop->PoolFor(calls.front().q.ns);
  if (pool == nullptr) return ctx.reply.Error("ERR no pool configured for this namespace");
  struct Join {
    size_t left = 0;
    std::string error;
    TakeFn take;
    FinishFn finish;
    OwedReply owed;
  };
  auto j = std::make_shared<Join>();
  j->left = calls.size();
  j->take = std::move(take);
  j->finish = std::move(finish);
  j->owed = OwedReply::Owe(ctx.client, /*blocking=*/false);
  for (size_t i = 0; i < calls.size(); ++i) {
    const ShardCall& c = calls[i];
    ctx.instance->queue_stats().NoteActive(c.q.tag());
    const std::string prefix = c.q.prefix();
    const std::string_view keys[] = {prefix};
    const std::vector<std::string_view> argv(c.args.begin(), c.args.end());
    pool->Eval(script, keys, argv, ctx.session.id, [j, i](const persist::UpstreamResult& r) {
      if (j->error.empty()) {
        j->error = FailureOf(r);
        if (j->error.empty() && !j->take(i, r.view())) j->error = kUnexpectedReply;
      }
      if (--j->left > 0) return;
      if (!j->error.empty()) return j->owed.Error(j->error);
      j->owed.Write([&](proto::ReplyWriter& out) { j->finish(out); });
    });
  }
}

// The same arguments for every shard.
std::vector<ShardCall> EveryShard(const QueueName& q, int n, std::vector<std::string> args) {
  std::vector<ShardCall> calls;
  for (int i = 0; i < n; ++i) calls.push_back({Shard(q, i), args});
  return calls;
}

// Integer replies, summed.
void RunSummed(CommandContext& ctx, persist::Script script, std::vector<ShardCall> calls) {
  auto sum = std::make_shared<int64_t>(0);
  RunOnShards(
      ctx, script, std::move(calls),
      [sum](size_t, persist::ReplyView r) {
        int64_t v = 0;
        if (!r.Int(&v)) return false;
        *sum += v;
        return true;
      },
      [sum](proto::ReplyWriter& w) { w.Integer(*sum); });
}

// Job lists (PEEK, DEADLETTER PEEK): each shard's head in turn, up to `count` jobs.
void RunJobLists(CommandContext& ctx, persist::Script script, std::vector<ShardCall> calls,
                 int64_t count, bool with_errors = false) {
  auto lists = std::make_shared<std::vector<std::vector<JobEntry>>>(calls.size());
  std::vector<QueueName> shards;
  for (const ShardCall& c : calls) shards.push_back(c.q);
  RunOnShards(
      ctx, script, std::move(calls),
      [lists, shards = std::move(shards), with_errors](size_t i, persist::ReplyView r) {
        return DecodeJobs(r, 0, shards[i].ns, shards[i].queue, &(*lists)[i], with_errors);
      },
      [lists, count, with_errors, loop = ctx.loop](proto::ReplyWriter& w) {
        std::vector<JobEntry> jobs;
        for (size_t depth = 0; static_cast<int64_t>(jobs.size()) < count; ++depth) {
          bool any = false;
          for (auto& list : *lists) {
            if (depth >= list.size() || static_cast<int64_t>(jobs.size()) >= count) continue;
            jobs.push_back(std::move(list[depth]));
            any = true;
          }
          if (!any) break;
        }
        WriteJobs(w, jobs, loop->wall_ms(), with_errors);
      });
}

// What a chain of calls keeps of the command that started it: where the calls run, and the
// reply the command owes.
struct ChainContext {
  Loop* loop = nullptr;
  Instance* instance = nullptr;
  persist::PoolClient* pool = nullptr;
  OwedReply owed;
  uint64_t affinity = 0;  // the client's id: its calls share one upstream connection
};

// DEADLETTER RESPAWN / DELETE with COUNT: shard after shard, each asked for what is still
// wanted, so no more than COUNT jobs change in all.
struct DeadletterChain : std::enable_shared_from_this<DeadletterChain> {
  ChainContext call;
  QueueName q;  // the client's queue
  int shards = 1;
  int next = 0;
  bool respawn = false;
  int64_t left = 0;  // jobs still wanted
  int64_t done = 0;
  std::string ttl;

  void Step() {
    const QueueName shard = Shard(q, next);
    call.instance->queue_stats().NoteActive(shard.tag());
    const std::string prefix = shard.prefix();
    const std::string now = std::to_string(call.loop->wall_ms());
    const std::string count = std::to_string(left);
    const std::string_view keys[] = {prefix};
    const std::string_view args[] = {respawn ? "respawn" : "delete", now, count, ttl};
    call.pool->Eval(
        persist::Script::kDeadletter, keys, args, call.affinity,
        [self = shared_from_this(), tag = shard.tag()](const persist::UpstreamResult& r) {
          std::string error = FailureOf(r);
          int64_t n = 0;
          if (error.empty() && !r.view().Int(&n)) error = kUnexpectedReply;
          if (n > 0 && self->respawn) self->call.loop->waiters().OfferReady(tag);
          self->done += n;
          self->left -= n;
          if (error.empty() && self->left > 0 && ++self->next < self->shards) {
            return self->Step();
          }
          if (!error.empty()) return self->call.owed.Error(error);
          self->call.owed.Write([&](proto::ReplyWriter& out) { out.Integer(self->done); });
        });
  }
};

}  // namespace

void ShardedAckOrCancel(CommandContext& ctx, const IdsRequest& req, persist::Script script, int n) {
  const std::string now = std::to_string(ctx.loop->wall_ms());
  std::map<int, ShardCall> by_shard;
  for (std::string_view id : req.ids) {
    std::string key = CanonicalKeyOfText(id);
    const int shard = ShardOf(key, n);
    ShardCall& call = by_shard[shard];
    if (call.args.empty()) call = {Shard(req.q, shard), {now}};
    std::string sec = DerivableSecond(key);
    call.args.push_back(std::move(key));
    call.args.push_back(std::move(sec));
  }
  std::vector<ShardCall> calls;
  for (auto& [shard, call] : by_shard) calls.push_back(std::move(call));
  RunSummed(ctx, script, std::move(calls));
}

void ShardedPeek(CommandContext& ctx, const QueueRequest& req, int n) {
  RunJobLists(
      ctx, persist::Script::kPeek,
      EveryShard(req.q, n, {std::to_string(ctx.loop->wall_ms()), std::to_string(req.count)}),
      req.count);
}

void ShardedQstat(CommandContext& ctx, const QueueRequest& req, int n) {
  auto sum = std::make_shared<QueueStatsSum>();
  RunOnShards(
      ctx, persist::Script::kQstat, EveryShard(req.q, n, {std::to_string(ctx.loop->wall_ms())}),
      [sum](size_t, persist::ReplyView r) { return AddQueueStats(r, sum.get()); },
      [sum](proto::ReplyWriter& w) { WriteQueueStatsSum(w, *sum); });
}

void ShardedPurge(CommandContext& ctx, const QueueRequest& req, int n) {
  RunSummed(ctx, persist::Script::kPurge,
            EveryShard(req.q, n, {std::to_string(ctx.loop->wall_ms())}));
}

void ShardedDeadletter(CommandContext& ctx, const DeadletterRequest& req, int n) {
  using Op = DeadletterRequest::Op;
  const std::string now = std::to_string(ctx.loop->wall_ms());
  const std::string count = std::to_string(req.count);
  if (req.op == Op::kSize) {
    return RunSummed(ctx, persist::Script::kDeadletterRead,
                     EveryShard(req.q, n, {"size", now, "0", ""}));
  }
  if (req.op == Op::kPeek) {
    return RunJobLists(ctx, persist::Script::kDeadletterRead,
                       EveryShard(req.q, n, {"peek", now, count, req.with_errors ? "errors" : ""}),
                       req.count, req.with_errors);
  }
  // kRespawn, kDelete (kDeleteId is routed to the job's shard by the caller).
  persist::PoolClient* pool = ctx.loop->PoolFor(req.q.ns);
  if (pool == nullptr) return ctx.reply.Error("ERR no pool configured for this namespace");
  auto chain = std::make_shared<DeadletterChain>();
  chain->call = {.loop = ctx.loop,
                 .instance = ctx.instance,
                 .pool = pool,
                 .owed = OwedReply::Owe(ctx.client, /*blocking=*/false),
                 .affinity = ctx.session.id};
  chain->q = req.q;
  chain->shards = n;
  chain->respawn = req.op == Op::kRespawn;
  chain->left = req.count;
  chain->ttl = req.op == Op::kRespawn ? std::to_string(req.ttl_s) : "";
  chain->Step();
}

}  // namespace deferq::queue
