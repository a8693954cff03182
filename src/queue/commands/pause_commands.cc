// QPAUSE and QRESUME (docs/commands.md). A queue is paused while its key P.."p" exists in Redis;
// the consume script checks it once per call, so every instance honours a pause as soon as it is
// written. Publishes, timers, the pump, PEEK, ACK and the rest go on as usual. pause.lua sets and
// deletes the mark; a paused queue is listed by QUEUES until QRESUME (an operator sees every pause
// mark there is) and NAMESPACE DELETE removes it.

#include <memory>
#include <string>

#include "queue/commands/commands.h"
#include "queue/commands/job_requests.h"
#include "queue/context/client_port.h"
#include "queue/context/loop.h"
#include "queue/delivery/waiters.h"
#include "queue/model/queue_name.h"
#include "queue/model/shards.h"

namespace deferq::queue {

namespace {

// pause.lua on the queue, or on every shard of a sharded queue (shards.h); `after` runs for each
// shard on success, before the +OK.
template <typename After>
void PauseCommand(CommandContext& ctx, Args args, bool pause, After after) {
  QueueRequest req;
  if (!ParseQueueOnly(ctx, args, &req)) return;
  persist::PoolClient* pool = ctx.loop->PoolFor(req.q.ns);
  if (pool == nullptr) return ctx.reply.Error("ERR no pool configured for this namespace");
  struct Join {
    int left = 0;
    std::string error;
    OwedReply owed;
  };
  auto j = std::make_shared<Join>();
  const int shards = ShardCount(ctx.loop->config(), req.q);
  j->left = shards;
  j->owed = OwedReply::Owe(ctx.client, /*blocking=*/false);
  const std::string now = std::to_string(ctx.loop->wall_ms());
  for (int i = 0; i < shards; ++i) {
    const QueueName q = Shard(req.q, i);
    const std::string prefix = q.prefix();
    const std::string_view keys[] = {prefix};
    const std::string_view call[] = {pause ? "pause" : "resume", now};
    pool->Eval(persist::Script::kPause, keys, call, ctx.session.id,
               [j, after, q](const persist::UpstreamResult& r) {
                 if (std::string e = persist::FailureOf(r); !e.empty()) {
                   if (j->error.empty()) j->error = std::move(e);
                 } else {
                   after(q, r.view());
                 }
                 if (--j->left > 0) return;
                 if (!j->error.empty()) return j->owed.Error(j->error);
                 j->owed.Write([](proto::ReplyWriter& out) { out.Ok(); });
               });
  }
}

}  // namespace

/* QPAUSE queue */
void CmdQpause(CommandContext& ctx, Args args) {
  PauseCommand(ctx, args, true, [](const QueueName&, persist::ReplyView) {});
}

/* QRESUME queue */
void CmdQresume(CommandContext& ctx, Args args) {
  Loop* loop = ctx.loop;
  PauseCommand(ctx, args, false, [loop](const QueueName& q, persist::ReplyView r) {
    if (!r.is_integer() || r.integer() == 0) return;  // was not paused
    // The consumers blocked on the queue (here and on other instances) try it again now rather
    // than at their next poll: announced like jobs that became ready.
    const std::string tag = q.tag();
    loop->waiters().OfferReady(tag);
    loop->waiters().PublishNews(tag);
  });
}

}  // namespace deferq::queue
