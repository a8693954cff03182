// How deferq's storage library runs a batch of calls as one (scripts/batch.lua, acks.lua,
// consume.lua's count; docs/storage.md "Batched calls"): which scripts batch, and how a batch's
// calls become one FCALL and its reply each call's own result. This is the library's calling
// convention, kept beside the scripts; CallBatcher (persist/call_batch.h), the mechanism that
// gathers, orders and merges calls, is given a rule by its owner and knows no script's arguments.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "persist/scripts.h"
#include "persist/upstream_connection.h"

namespace deferq::persist {

// Sends one FCALL: the script, its queue keys (the pool keys are the sink's), its arguments.
using FcallSink = std::function<void(Script, std::span<const std::string_view> keys,
                                     std::span<const std::string_view> args, uint64_t affinity,
                                     UpstreamCallback)>;

// The calls of one batch, two or more, of one script, in the order they were made.
struct BatchCalls {
  Script script = Script::kCount;
  std::span<const std::string> keys;  // its queues, in first use order
  std::span<const uint32_t> at;       // per call: its queue (index into keys)
  std::span<const std::string> args;  // per call: its argument count, then its arguments
};

class BatchRule {
 public:
  virtual ~BatchRule() = default;
  // Whether calls of `script` on one queue may be batched.
  virtual bool Batchable(Script script) const = 0;
  // Sends `batch` as one call through `sink`; cbs[i] gets call i's own result. `stats` (may be
  // null): the pool's counters count each call, not the one request.
  virtual void Send(const BatchCalls& batch, uint64_t affinity, std::vector<UpstreamCallback> cbs,
                    const FcallSink& sink, PoolStats* stats) const = 0;
};

// The rule of deferq's storage library: a batch of one-job consumes with the same arguments on
// one queue is one consume call of COUNT n; one-id ACKs of one ms on one queue, one acks.lua
// call; anything else one batch.lua call.
const BatchRule& LibraryBatchRule();

}  // namespace deferq::persist
