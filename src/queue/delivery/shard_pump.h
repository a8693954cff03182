// Pump ownership per shard (docs/operations.md "Sharded queues"): the instances that serve a
// sharded queue share the pumping of its shards, so one hot queue's sweeps of lease ends and of
// jobs published elsewhere are spread over the fleet rather than all run by the pool's owner.
//
// Who owns a shard: every instance is a member of each sharded queue's roster (pumpers.lua, in
// shard 0's slot: renewed every kPumpLeaseRenewMs, a member gone kPumpLeaseMs after its last
// renewal), and shard i belongs to the member at position (i + FNV-1a(tag)) mod n of the sorted
// roster. Instances that read the same roster agree; all of them read it every renewal.
// An owner pumps its shards as the pool's pump owner pumps any queue: it reads their due index
// entries every sweep_ms (due.lua; not when it owns the pool's pump too, whose due-index poll
// already sees them) and follows their next due times after each pump call. The pool owner's
// poll skips shards owned elsewhere.
//
// No shard is left without a pump:
//   - a shard this instance stops owning is still pumped for kShardGraceMs (two renewals), by
//     which time the new owner, reading the same roster within one renewal, has taken it;
//   - an instance that dies leaves the roster kPumpLeaseMs after its last renewal, and the
//     others take its shards at their next renewal (within kPumpLeaseMs + kPumpLeaseRenewMs);
//   - while this instance's view of a roster is older than kPumpLeaseMs (Redis did not answer),
//     it pumps every shard of that queue if it owns the pool's pump, and none otherwise.
// Pumping a shard twice meanwhile is harmless: pump.lua is one atomic step.
//
// API:
//   ShardPumpTable   (queue/delivery/shard_pump_table.h) process-wide (held by queue::Instance):
//   for each shard of every sharded
//                    queue of the config, whether this instance pumps it now; loop 0's
//                    ShardPumping writes, every thread's Pump reads (relaxed atomics: a stale
//                    view costs one pump call, or one due time followed late, never a job)
//   ShardPumping     loop 0's part, beside its Pump (queue/worker.h): the rosters, the
//                    assignment, the due reads
//   ShardPumpTable::owned()  how many shards this instance owns now (INFO stats pump_shards)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "queue/delivery/shard_pump_table.h"

namespace deferq::queue {

class Loop;
class Pump;

// Loop 0's part: one roster per sharded queue, read and renewed every kPumpLeaseRenewMs; the
// shards' states in the table; the due index entries of the shards it pumps, every sweep_ms.
class ShardPumping {
 public:
  ShardPumping(Loop& loop, Pump& pump, ShardPumpTable& table);
  // Every loop tick.
  void Tick();

 private:
  struct Roster {
    std::vector<std::string> members;  // sorted, this instance among them
    int64_t valid_until_ms = 0;        // monotonic: the send time of the last answer + lease
    bool in_flight = false;
  };
  struct ShardState {
    int64_t grace_until_ms = 0;  // monotonic, while kGrace
    bool due_in_flight = false;
  };

  void Renew(size_t q);
  // Brings the table's states of queue q's shards in line with its roster.
  void Apply(size_t q);
  void ReadDue(size_t q);
  std::string ShardTag(size_t q, int shard) const;

  Loop& loop_;
  Pump& pump_;
  ShardPumpTable& table_;
  std::vector<Roster> rosters_;     // by queue of the table
  std::vector<ShardState> shards_;  // by shard index of the table
  int64_t next_renew_ms_ = 0;
  int64_t next_sweep_ms_ = 0;
};

}  // namespace deferq::queue
