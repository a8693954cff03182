#include "queue/delivery/shard_pump.h"

#include "base/check.h"
#include "queue/context/loop.h"
#include "queue/context/server_context.h"
#include "queue/delivery/pump.h"
#include "queue/model/job_codec.h"
#include "queue/model/queue_name.h"
#include "queue/model/shards.h"

namespace deferq::queue {

ShardPumping::ShardPumping(Loop& loop, Pump& pump, ShardPumpTable& table)
    : loop_(loop),
      pump_(pump),
      table_(table),
      rosters_(table.queues().size()),
      shards_(table.size()) {}

std::string ShardPumping::ShardTag(size_t q, int shard) const {
  const ShardPumpTable::Queue& e = table_.queues()[q];
  return e.ns + "/" + ShardQueueName(e.queue, shard);
}

void ShardPumping::Tick() {
  const int64_t now_ms = loop_.now_ms();
  if (now_ms >= next_renew_ms_) {
    next_renew_ms_ = now_ms + kPumpLeaseRenewMs;
    for (size_t q = 0; q < rosters_.size(); ++q) Renew(q);
  }
  if (now_ms >= next_sweep_ms_) {
    next_sweep_ms_ = now_ms + loop_.config().sweep_ms;
    for (size_t q = 0; q < rosters_.size(); ++q) {
      Apply(q);  // views and grace times that ran out
      ReadDue(q);
    }
  }
}

void ShardPumping::Renew(size_t q) {
  Roster& roster = rosters_[q];
  if (roster.in_flight) return;  // Redis is slow: the view ages, and Apply acts on it
  const ShardPumpTable::Queue& e = table_.queues()[q];
  persist::PoolClient* pool = loop_.PoolFor(e.ns);
  if (pool == nullptr) return;
  roster.in_flight = true;
  const std::string prefix = QueueName{e.ns, e.queue}.prefix();
  const std::string lease = std::to_string(kPumpLeaseMs);
  const std::string_view keys[] = {prefix};
  const std::string_view args[] = {loop_.peers().instance_id(), lease};
  // The membership runs from when Redis ran pumpers.lua, which is after this.
  const int64_t sent_ms = loop_.now_ms();
  pool->Eval(persist::Script::kPumpers, keys, args, 0,
             [this, q, sent_ms](const persist::UpstreamResult& r) {
               Roster& roster = rosters_[q];
               roster.in_flight = false;
               if (!r.view().is_array()) return;
               std::vector<std::string> members;
               bool me = false;
               for (size_t i = 0; i < r.view().size(); ++i) {
                 persist::ReplyView m = r.view()[i];
                 if (!m.is_string()) return;
                 members.emplace_back(m.str());
                 me = me || members.back() == loop_.peers().instance_id();
               }
               if (!me) return;  // not this call's answer to trust
               roster.members = std::move(members);
               roster.valid_until_ms = sent_ms + kPumpLeaseMs;
               Apply(q);
             });
}

void ShardPumping::Apply(size_t q) {
  const ShardPumpTable::Queue& e = table_.queues()[q];
  const Roster& roster = rosters_[q];
  const int64_t now_ms = loop_.now_ms();
  const bool valid = now_ms < roster.valid_until_ms && !roster.members.empty();
  // Without a recent view of the roster, the pool's pump owner takes every shard (as it does
  // every unsharded queue), and the others none.
  const bool pool_owner = !valid && pump_.OwnsPoolOf(e.tag);
  for (int i = 0; i < e.shards; ++i) {
    const size_t index = e.first + static_cast<size_t>(i);
    const bool mine = valid ? roster.members[ShardOwnerIndex(e.tag, i, roster.members.size())] ==
                                  loop_.peers().instance_id()
                            : pool_owner;
    const ShardPumpTable::State was = table_.state(index);
    if (mine) {
      if (was == ShardPumpTable::kOwned) continue;
      table_.Set(index, ShardPumpTable::kOwned);
      // Newly won: pumped once now, which answers its next due time (followed from there).
      if (was == ShardPumpTable::kNone) pump_.Route(ShardTag(q, i), loop_.wall_ms());
    } else if (was == ShardPumpTable::kOwned) {
      // Handed over: still pumped until the new owner has surely read the same roster.
      table_.Set(index, ShardPumpTable::kGrace);
      shards_[index].grace_until_ms = now_ms + kShardGraceMs;
    } else if (was == ShardPumpTable::kGrace && now_ms >= shards_[index].grace_until_ms) {
      table_.Set(index, ShardPumpTable::kNone);
    }
  }
}

void ShardPumping::ReadDue(size_t q) {
  const ShardPumpTable::Queue& e = table_.queues()[q];
  // The pool's pump owner reads the whole due index every sweep_ms; its poll routes these shards.
  if (pump_.OwnsPoolOf(e.tag)) return;
  persist::PoolClient* pool = loop_.PoolFor(e.ns);
  if (pool == nullptr) return;
  for (int i = 0; i < e.shards; ++i) {
    const size_t index = e.first + static_cast<size_t>(i);
    if (!table_.Pumps(index) || shards_[index].due_in_flight) continue;
    shards_[index].due_in_flight = true;
    const std::string prefix = QueueName{e.ns, ShardQueueName(e.queue, i)}.prefix();
    const std::string_view keys[] = {prefix};
    pool->Eval(persist::Script::kDue, keys, {}, 0,
               [this, q, i, index](const persist::UpstreamResult& r) {
                 shards_[index].due_in_flight = false;
                 // nil: nothing pending. Work due within the horizon goes to the wheel.
                 if (!r.view().is_integer()) return;
                 const int64_t due = r.view().integer();
                 if (due > loop_.wall_ms() + DueHorizonMs(loop_.config().sweep_ms)) return;
                 if (table_.Pumps(index)) pump_.Route(ShardTag(q, i), due);
               });
  }
}

}  // namespace deferq::queue
