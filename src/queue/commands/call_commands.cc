// CALL and WAITJOB (docs/commands.md): a requester blocked until a job finishes, answered with
// its result (queue/delivery/calls.h).
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "queue/commands/commands.h"
#include "queue/commands/job_requests.h"
#include "queue/commands/publish_call.h"
#include "queue/context/instance.h"
#include "queue/context/loop.h"
#include "queue/delivery/calls.h"
#include "queue/delivery/waiters.h"
#include "queue/model/job_codec.h"
#include "queue/model/job_id.h"
#include "queue/model/queue_name.h"
#include "queue/model/shards.h"
#include "queue/stats/queue_stats.h"
#include "queue/tenancy/rate_limiter.h"

namespace deferq::queue {

namespace {

// A requester blocked on job K of queue q (the shard that holds it), for at most timeout_s
// (0: no limit).
std::shared_ptr<Call> NewCall(CommandContext& ctx, const QueueName& q, std::string key,
                              std::string id_text, double timeout_s) {
  auto call = std::make_shared<Call>();
  call->port = ctx.client;
  call->ticket = ctx.client->Defer(/*blocking=*/true);
  call->q = q;
  call->key = std::move(key);
  call->id_text = std::move(id_text);
  if (timeout_s > 0) {
    call->deadline_ms = ctx.loop->now_ms() + static_cast<int64_t>(std::llround(timeout_s * 1000));
  }
  ctx.loop->calls().Park(call);
  return call;
}

}  // namespace

/* CALL queue payload [TIMEOUT s] [options of PUBLISH] */
void CmdCall(CommandContext& ctx, Args args) {
  PublishRequest req;
  if (!ParseCall(ctx, args, &req)) return;
  persist::PoolClient* pool = ctx.loop->PoolFor(req.q.ns);
  if (pool == nullptr) return ctx.reply.Error("ERR no pool configured for this namespace");
  if (AdmitJobs(ctx, req.q.ns, RateKind::kPublish, 1) == 0) return;  // -RATELIMIT
  PreparedPublish p = PreparePublish(ctx, req, /*notify=*/true);
  ctx.instance->queue_stats().NoteActive(req.q.tag());
  // Parked before its publish is sent: news of the job cannot come before the call waits.
  std::shared_ptr<Call> call = NewCall(ctx, req.q, p.key, p.id_text, req.timeout_s);
  const std::string prefix = req.q.prefix();
  const std::string_view keys[] = {prefix};
  std::vector<std::string_view> argv(p.argv.begin(), p.argv.end());
  Loop* loop = ctx.loop;
  pool->Eval(persist::Script::kPublish, keys, argv, ctx.session.id,
             [loop, call, tag = req.q.tag(), ready_now = p.ready_now,
              not_applied = std::move(p.not_applied)](const persist::UpstreamResult& r) {
               if (not_applied && persist::NotApplied(r)) not_applied();
               if (std::string e = persist::FailureOf(r); !e.empty()) {
                 return loop->calls().Fail(call, e);
               }
               const int64_t status = PublishStatus(r.view());
               if (ready_now && status != 0) loop->waiters().OfferReady(tag);
               // The id was taken (ID given: a live job, or a kept outcome): that job is the one
               // waited for.
               if (status == 0) loop->calls().Read(call);
             });
}

/* WAITJOB queue id [TIMEOUT s] */
void CmdWaitJob(CommandContext& ctx, Args args) {
  WaitJobRequest req;
  if (!ParseWaitJob(ctx, args, &req)) return;
  if (ctx.loop->PoolFor(req.q.ns) == nullptr) {
    return ctx.reply.Error("ERR no pool configured for this namespace");
  }
  std::string key = CanonicalKeyOfText(req.id);
  QueueName q = req.q;
  if (const int n = ShardCount(ctx.loop->config(), q); n > 1) q = Shard(q, ShardOf(key, n));
  ctx.instance->queue_stats().NoteActive(q.tag());
  ctx.loop->calls().Read(NewCall(ctx, q, std::move(key), std::string(req.id), req.timeout_s));
}

}  // namespace deferq::queue
