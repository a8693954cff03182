// The job commands on a sharded queue (shards.h) that touch several shards: each shard gets its
// own script call (the shards live in different cluster slots), all sent at once, and the client
// gets one reply folded from theirs. Commands that name one job (NACK, TOUCH, JOB, DEADLETTER
// DELETE ... ID) go to the job's shard and need nothing here. `n` is the queue's shard count.
#pragma once

#include "persist/scripts.h"
#include "queue/commands/commands.h"
#include "queue/commands/job_requests.h"

namespace deferq::queue {

// ACK / CANCEL: the ids grouped by shard, one call per shard holding any; the counts summed.
void ShardedAckOrCancel(CommandContext& ctx, const IdsRequest& req, persist::Script script, int n);
// PEEK: up to COUNT jobs from each shard's head, interleaved shard by shard, cut to COUNT.
void ShardedPeek(CommandContext& ctx, const QueueRequest& req, int n);
// QSTAT: the figures summed; paused when any shard is.
void ShardedQstat(CommandContext& ctx, const QueueRequest& req, int n);
// PURGE: every shard; the counts summed.
void ShardedPurge(CommandContext& ctx, const QueueRequest& req, int n);
// DEADLETTER SIZE (summed), PEEK (as PEEK), RESPAWN and DELETE with COUNT (the shards one after
// the other until COUNT jobs are done). DELETE ... ID goes to the job's shard (job_commands.cc).
void ShardedDeadletter(CommandContext& ctx, const DeadletterRequest& req, int n);

}  // namespace deferq::queue
